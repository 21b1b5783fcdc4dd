"""How `trainctl submit --wait` and `trainctl watch` show an event to a person: one line, with the reasons of
a rejection underneath and the metrics of a success on the line."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import Rejected, Running, Trigger
from tests.unit.test_events import succeeded
from trainctl.eventstream import format_event

NOW = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
CLOCK = NOW.astimezone().strftime("%H:%M:%S")


def test_a_rejection_lists_every_reason_under_its_line():
    event = Rejected(
        request_id="r1",
        request_key="pubsub:42",
        time=NOW,
        message="the request is invalid",
        trigger=Trigger(kind="pubsub", message_id="42"),
        delivery="42",
        reason="invalid",
        errors=["dataset.uri: must be a gs://bucket/path URI, got 's3://x'", "resources.replica_count: at most 16"],
    )

    assert format_event(event).splitlines() == [
        f"{CLOCK}  rejected   r1  the request is invalid",
        "    dataset.uri: must be a gs://bucket/path URI, got 's3://x'",
        "    resources.replica_count: at most 16",
    ]


def test_a_success_shows_its_metrics():
    metrics = {"val_loss": 0.2, "val_accuracy": 0.93, "baseline_accuracy": 0.61, "task": "classification"}
    assert format_event(succeeded(metrics=metrics)) == (
        f"{CLOCK}  succeeded  r1  training finished; val_accuracy 0.93 (baseline 0.61), val_loss 0.2"
    )


def test_other_events_are_one_line():
    event = Running(request_id="r1", request_key="request:r1", time=NOW, message="job 7 is running")

    assert format_event(event) == f"{CLOCK}  running    r1  job 7 is running"
