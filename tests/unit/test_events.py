"""Lifecycle events: Pub/Sub attributes, deterministic ids, round trips, and the checked-in JSON Schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from schemas import events
from schemas.events import Artifacts, CostEstimate, Rejected, Succeeded, Trigger, parse_event, to_pubsub_message
from schemas.export import (
    EVENT_SCHEMA,
    REQUEST_SCHEMA,
    TRIGGER_POLICY_SCHEMA,
    event_schema,
    render,
    request_schema,
    trigger_policy_schema,
)

NOW = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
ARTIFACTS = Artifacts(
    model_dir="gs://c/runs/r1/model/",
    metrics_uri="gs://c/runs/r1/model/metrics.json",
    checkpoint_dir="gs://c/runs/r1/checkpoints/",
    tensorboard_dir="gs://c/runs/r1/logs/",
)


def succeeded(**overrides) -> Succeeded:
    fields = dict(
        request_id="r1",
        request_key="gcs:data/churn/_SUCCESS#17",
        time=NOW,
        message="training finished",
        trigger=Trigger(kind="gcs", bucket="data", object="churn/_SUCCESS", generation="17"),
        artifacts=ARTIFACTS,
        metrics={"val_accuracy": 0.93},
        cost=CostEstimate(hourly_usd=8.82, max_usd=17.64, gpus=2, nodes=1, prices_as_of="2026-11-22"),
    )
    return Succeeded(**(fields | overrides))


def test_pubsub_message_carries_cloudevents_and_filter_attributes():
    message = to_pubsub_message(succeeded(), source="//trainctl/projects/p/locations/us-central1")
    assert message.attributes == {
        "ce-specversion": "1.0",
        "ce-type": "trainctl.job.v1.succeeded",
        "ce-source": "//trainctl/projects/p/locations/us-central1",
        "ce-id": events.event_id("gcs:data/churn/_SUCCESS#17", "succeeded", 1),
        "ce-time": "2026-11-22T10:30:00.000Z",
        "content-type": "application/json",
        "request_id": "r1",
        "state": "succeeded",
    }
    assert json.loads(message.data)["metrics"] == {"val_accuracy": 0.93}


def test_event_id_is_deterministic_and_differs_by_state_and_attempt():
    first = succeeded().ce_id
    assert first == succeeded(time=datetime(2030, 1, 1, tzinfo=UTC), message="again").ce_id
    assert first != succeeded(attempt=2).ce_id
    assert first != events.event_id("gcs:data/churn/_SUCCESS#17", "failed", 1)
    assert first != succeeded(request_key="gcs:data/churn/_SUCCESS#18").ce_id


def test_published_event_parses_back_to_the_same_model():
    original = succeeded()
    parsed = parse_event(to_pubsub_message(original, source="s").data)
    assert isinstance(parsed, Succeeded)
    assert parsed == original


def test_rejected_event_lists_field_errors():
    event = Rejected(
        request_id="r2",
        request_key="request:r2",
        time=NOW,
        message="the request is invalid",
        reason="invalid",
        errors=["resources.accelerator_count: a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 4"],
    )
    assert parse_event(to_pubsub_message(event, "s").data).errors == event.errors


def test_event_models_forbid_unknown_fields_and_unknown_states():
    data = json.loads(to_pubsub_message(succeeded(), "s").data)
    with pytest.raises(ValidationError):
        parse_event(json.dumps(data | {"surprise": 1}))
    with pytest.raises(ValidationError):
        parse_event(json.dumps(data | {"state": "exploded"}))


def test_every_state_has_a_model():
    assert {m.model_fields["state"].default for m in events.JobEvent.__origin__.__args__} == set(events.State.__args__)


def test_published_events_validate_against_the_checked_in_event_schema():
    schema = json.loads(EVENT_SCHEMA.read_text())
    jsonschema.validate(json.loads(to_pubsub_message(succeeded(), "s").data), schema)


@pytest.mark.parametrize(
    ("path", "build"),
    [(REQUEST_SCHEMA, request_schema), (EVENT_SCHEMA, event_schema), (TRIGGER_POLICY_SCHEMA, trigger_policy_schema)],
)
def test_checked_in_json_schema_is_current(path: Path, build):
    assert path.read_text() == render(build()), f"{path.name} is stale: run `make schemas`"


def test_a_rejection_of_one_delivery_is_marked_in_its_data_and_its_attributes():
    """Issue 38, point 6: a rejection that claimed nothing says so, and which arrival it was, where a subscription
    filter can see it (`NOT attributes:rejected_delivery` keeps only the requests' own events)."""
    event = Rejected(
        request_id="victim-1",
        request_key="request:victim-1",
        time=NOW,
        message="the request is invalid",
        reason="invalid",
        delivery="1234567890",
        rejected_delivery="unclaimed",
    )
    message = to_pubsub_message(event, "s")
    assert (message.attributes["rejected_delivery"], message.attributes["delivery"]) == ("unclaimed", "1234567890")
    assert parse_event(message.data) == event
    jsonschema.validate(json.loads(message.data), json.loads(EVENT_SCHEMA.read_text()))
    holders = Rejected(request_id="victim-1", request_key="request:victim-1", time=NOW, message="m", reason="invalid")
    assert "rejected_delivery" not in to_pubsub_message(holders, "s").attributes
    assert "delivery" not in to_pubsub_message(holders, "s").attributes
