"""A request whose job has ended gives its GPU quota back before anything else can fail (issue 24, point 5):
the controller on trainctl replay's in-memory stand-ins, with a job that has ended and Pub/Sub down."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from functions.cloud.errors import Transient
from functions.cloud.job_snapshot import JobSnapshot
from functions.controller import Controller
from functions.ledger.requests import ACTIVE_PREFIX, Ledger
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_record

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"
POOL = "us-central1/custom_model_training_nvidia_t4_gpus"


class EndedJobs:
    parent = "projects/p/locations/us-central1"

    def get(self, name: str) -> JobSnapshot:
        return JobSnapshot(name, "JOB_STATE_SUCCEEDED", start_time=NOW - timedelta(hours=1), end_time=NOW)

    def cancel(self, name: str) -> None:
        raise AssertionError("nothing to cancel")

    def find_or_create(self, *args: object, **kwargs: object) -> tuple[JobSnapshot, bool]:
        raise AssertionError("nothing to submit")


@dataclass
class Publisher:
    down: bool = True
    source: str = "test"
    published: list[str] = field(default_factory=list)

    def publish(self, event) -> str:  # type: ignore[no-untyped-def]
        if self.down:
            raise Transient("Pub/Sub is unavailable")
        self.published.append(event.state)
        return event.ce_id


def test_a_request_whose_job_ended_releases_its_quota_even_when_what_follows_fails():
    """Issue 24, point 5: the quota was released only after the final event was published and filed, so any
    failure on the way (here Pub/Sub; before, a job's unreadable output or a refused history write) kept the GPUs
    held from every queued request. Now it is released as soon as the ended state is saved."""
    gcs, publisher, now = MemoryGcs(), Publisher(), [NOW]
    settings = Settings(project="p", control_bucket="control", events_topic="events", trainer_image="img")
    ctl = Controller(settings, Ledger(gcs, "control"), gcs, publisher, EndedJobs, clock=lambda: now[0])
    record = make_record(
        request={"trainer": {"builtin": "tabular"}},
        state="running",
        job_name=JOB,
        max_pending=3600,
        max_silence=1800,
        quota_pool=POOL,
    )
    ctl.ledger.create(record)
    ctl.ledger.mark_active("abc")
    assert ctl.quota_queue.pools.acquire(POOL, "abc", 2, 2).granted

    with pytest.raises(Transient, match="Pub/Sub is unavailable"):
        ctl.observe_record("abc")
    assert ctl.quota_queue.pools.held(POOL) == 0, "released although the `succeeded` event is not out yet"

    publisher.down, now[0] = False, NOW + timedelta(minutes=1)  # a later sweep publishes it, once, and retires it
    assert ctl.observe_record("abc") == "succeeded"
    assert publisher.published == ["succeeded"] and gcs.names("control", ACTIVE_PREFIX) == []
