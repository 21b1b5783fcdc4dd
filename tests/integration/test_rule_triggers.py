"""Issue 42, schedules and retraining on an alert, on the emulators and the local JobService: a rule's schedule tick
runs once however often it is delivered, a missed one is caught up (`latest`) or skipped (`none`), an injected Cloud
Monitoring incident starts a run of its model's rule on the rule's newest marker and is in the run's lineage; a closed
incident and garbage start nothing and are acked.

Ticks are handed to the deployment's controller in this process, on a clock the test sets (whether a tick was missed
depends on when it is read); incidents go through the served on_retrain function over HTTP, as Eventarc pushes them.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

from functions import handlers
from functions.controller import Controller
from functions.intake.rule_triggers import alert_request_id, schedule_request_id
from functions.ledger.keys import alert_key, schedule_key
from functions.settings import Settings
from local.names import LOCAL_PROJECT, LOCAL_REGION
from schemas.events import Lineage
from tests.integration.deployment import DATA_SHARD, TRAINER_STAND_IN, Deployment, accuracy, serving
from tests.integration.test_controller_intake import jobs_with_key

MODEL = f"drift-{uuid.uuid4().hex[:8]}"
HOURLY = "0 * * * *"
TEMPLATE = {
    "dataset": {"target": "y"},
    "trainer": {"builtin": "tabular"},
    "resources": {"machine_type": "g2-standard-24"},
}


def rules(deployment: Deployment) -> dict[str, str]:
    data = f"gs://{deployment.data_bucket}"
    return {
        "TRAINCTL_TRIGGER_RULES": json.dumps(
            {
                f"{data}/nightly/": TEMPLATE | {"policy": {"schedule": {"cron": HOURLY, "catch_up": "latest"}}},
                f"{data}/strict/": TEMPLATE | {"policy": {"schedule": {"cron": HOURLY, "catch_up": "none"}}},
                f"{data}/drift/": TEMPLATE | {"model": {"name": MODEL}},
            }
        ),
        "TRAINCTL_TRAINER_IMAGE": TRAINER_STAND_IN,
    }


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), settings_for=rules) as deployed:
        yield deployed


def controller_at(deployment: Deployment, now: datetime) -> Controller:
    """The deployment's controller in this process, its clock at `now`."""
    settings = Settings.from_env(deployment.settings_env(**rules(deployment)))
    return dataclasses.replace(Controller.from_settings(settings), clock=lambda: now)


def top_of_the_hour(hours_ago: int) -> datetime:
    """A fire time of HOURLY within max_event_age (24 h) of now, which the functions check against the real clock."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours_ago)


def tick(rule: str, published: datetime, message_id: str) -> CloudEvent:
    """What Eventarc delivers for a message of Cloud Scheduler's Pub/Sub target: the fixed data, the message id and the
    publishTime Pub/Sub gave it (RFC 3339, nanoseconds)."""
    message = {
        "data": base64.b64encode(json.dumps({"rule": rule}).encode()).decode(),
        "messageId": message_id,
        "publishTime": published.strftime("%Y-%m-%dT%H:%M:%S.%f123Z"),
    }
    attributes = {
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": f"//pubsub.googleapis.com/projects/{LOCAL_PROJECT}/topics/it-retrain",
        "id": message_id,
        "time": published.isoformat(),
    }
    return CloudEvent(attributes, {"message": message, "subscription": "projects/p/subscriptions/eventarc-retrain"})


def incident(incident_id: str, state: str = "open", model: str = MODEL) -> bytes:
    """A Cloud Monitoring incident as a Pub/Sub notification channel publishes it (schema version 1.2,
    cloud.google.com/monitoring/support/notification-options)."""
    body = {
        "version": "1.2",
        "incident": {
            "incident_id": incident_id,
            "scoping_project_id": LOCAL_PROJECT,
            "scoping_project_number": 12345,
            "url": f"https://console.cloud.google.com/monitoring/alerting/incidents/{incident_id}",
            "started_at": 1764230400,
            "ended_at": None if state == "open" else 1764234000,
            "state": state,
            "summary": "Prediction drift of feature a is above the threshold.",
            "apigee_url": "",
            "observed_value": "0.41",
            "resource": {"type": "aiplatform.googleapis.com/Endpoint", "labels": {"endpoint_id": "123"}},
            "resource_type_display_name": "Vertex AI Endpoint",
            "resource_id": "",
            "resource_display_name": "churn",
            "resource_name": f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}/endpoints/123",
            "metric": {"type": "custom.googleapis.com/drift", "displayName": "drift", "labels": {}},
            "metadata": {"system_labels": {}, "user_labels": {}},
            "policy_name": "churn drift",
            "policy_user_labels": {"trainctl-model": model, "team": "ml"},
            "documentation": {"content": "Retrain churn.", "mime_type": "text/markdown"},
            "condition": {"name": f"projects/{LOCAL_PROJECT}/alertPolicies/1/conditions/2", "displayName": "drift"},
            "condition_name": "drift > 0.3",
            "threshold_value": "0.3",
            "severity": "Warning",
        },
    }
    return json.dumps(body).encode()


def land(deployment: Deployment, folder: str, *fake_node_args: str) -> None:
    """A dataset landing in `folder`: a shard, what the trainer stand-in should do, then its marker."""
    deployment.upload(folder + "part-0.csv", DATA_SHARD)
    deployment.upload(folder + "fake-node-args", "\n".join(fake_node_args))
    deployment.upload(folder + "_SUCCESS")


def test_a_redelivered_schedule_tick_runs_once(deployment, job_client):
    """Guards issue 42 point 1: Cloud Scheduler's message is the same every time, so a fixed id would run once ever;
    each tick's id derives from its rule and scheduled time instead. The same message delivered twice, and a second
    message for the same fire time (Cloud Scheduler published it again), make one request and one Vertex job."""
    events = deployment.events()
    rule = f"gs://{deployment.data_bucket}/nightly/"
    land(deployment, "nightly/day-1/")
    land(deployment, "nightly/day-2/")  # the newest marker: the run trains on it
    fired = top_of_the_hour(2)
    controller = controller_at(deployment, fired + timedelta(minutes=10))
    first = tick(rule, fired + timedelta(seconds=2), "tick-1")
    assert handlers.retrain(first, controller) == "submitted"
    assert handlers.retrain(first, controller) == "duplicate"
    assert handlers.retrain(tick(rule, fired + timedelta(minutes=1, seconds=5), "tick-2"), controller) == "duplicate"
    request_id, key = schedule_request_id(rule, fired), schedule_key(rule, fired)
    assert request_id == f"sched.{deployment.data_bucket}-nightly-{fired:%Y%m%dt%H%Mz}"
    (_job,) = jobs_with_key(job_client, key)
    assert events.states(request_id).count("accepted") == 1 and events.states(request_id).count("submitted") == 1
    record = deployment.record(key)
    assert record["request"]["dataset"]["uri"] == f"gs://{deployment.data_bucket}/nightly/day-2/"
    assert record["trigger"]["kind"] == "schedule" and record["trigger"]["rule"] == rule
    assert datetime.fromisoformat(record["trigger"]["scheduled_time"]) == fired
    # The next fire time is another tick, another run.
    later = controller_at(deployment, fired + timedelta(hours=1, minutes=5))
    assert handlers.retrain(tick(rule, fired + timedelta(hours=1, seconds=1), "tick-3"), later) == "submitted"
    assert len(jobs_with_key(job_client, schedule_key(rule, fired + timedelta(hours=1)))) == 1


def test_missed_ticks_run_once_as_the_newest_due_under_latest_and_are_skipped_under_none(deployment, job_client):
    """Guards issue 42 point 1's catch_up: read three hours late (the controller was down, Pub/Sub held them), two
    missed ticks of a `latest` rule make one run, as the newest fire time due; a `strict` (none) rule's missed tick is
    `skipped`, reason missed_tick, and runs nothing, while its tick that is due runs."""
    events = deployment.events()
    data = f"gs://{deployment.data_bucket}"
    land(deployment, "nightly/day-3/")
    land(deployment, "strict/day-1/")
    fired = top_of_the_hour(6)
    controller = controller_at(deployment, fired + timedelta(hours=3))
    due = fired + timedelta(hours=2)  # the newest fire time due (one due more than a minute ago)
    nightly = f"{data}/nightly/"
    for hours, message_id in ((0, "late-1"), (1, "late-2")):
        published = fired + timedelta(hours=hours, seconds=3)
        assert handlers.retrain(tick(nightly, published, message_id), controller) in ("submitted", "duplicate")
    assert handlers.retrain(tick(nightly, due + timedelta(seconds=1), "on-time"), controller) == "duplicate"
    (_job,) = jobs_with_key(job_client, schedule_key(nightly, due))
    assert jobs_with_key(job_client, schedule_key(nightly, fired)) == []
    assert jobs_with_key(job_client, schedule_key(nightly, fired + timedelta(hours=1))) == []
    assert events.states(schedule_request_id(nightly, due)).count("submitted") == 1

    strict = f"{data}/strict/"
    assert handlers.retrain(tick(strict, fired + timedelta(seconds=3), "strict-late"), controller) == "skipped"
    missed_id = schedule_request_id(strict, fired)
    (skipped,) = events.of(missed_id, "skipped")
    assert skipped.reason == "missed_tick" and skipped.delivery == "strict-late"
    assert skipped.trigger.kind == "schedule" and skipped.trigger.scheduled_time == fired
    assert jobs_with_key(job_client, schedule_key(strict, fired)) == [] and deployment.record(missed_id) is None
    # Filed in the history index, once however often the tick is delivered: `trainctl report` counts it by reason.
    assert handlers.retrain(tick(strict, fired + timedelta(seconds=3), "strict-late-2"), controller) == "skipped"
    filed = [o for o in controller.ledger.outcomes(fired - timedelta(days=1)) if o.request_id == missed_id]
    assert [(o.state, o.reason) for o in filed] == [("skipped", "missed_tick")]
    assert handlers.retrain(tick(strict, due + timedelta(seconds=2), "strict-due"), controller) == "submitted"
    assert len(jobs_with_key(job_client, schedule_key(strict, due))) == 1


def test_an_injected_incident_starts_a_run_of_its_models_rule_with_the_incident_in_its_lineage(
    deployment, job_client, registry: ModelServiceClient
):
    """Guards issue 42 point 5: an open incident of a policy labelled trainctl-model=<model>, as Monitoring's Pub/Sub
    channel publishes it, starts the rule whose template trains that model on its newest data; redelivered, it runs
    once; the version the run registers names the incident and its policy in its lineage."""
    events = deployment.events()
    land(deployment, "drift/week-1/")
    land(deployment, "drift/week-2/", "--metrics", json.dumps(accuracy(0.9)))
    incident_id = f"0.{uuid.uuid4().hex[:12]}"
    push = deployment.push_body(incident(incident_id), "incident-msg-1")
    assert deployment.post("on_retrain", push) == 200
    assert deployment.post("on_retrain", push) == 200  # redelivered
    request_id, key = alert_request_id(MODEL, incident_id), alert_key(MODEL, incident_id)
    (_job,) = jobs_with_key(job_client, key)
    record = deployment.record(key)
    assert record["request"]["dataset"]["uri"] == f"gs://{deployment.data_bucket}/drift/week-2/"
    assert record["trigger"] == {
        "kind": "alert", "rule": f"gs://{deployment.data_bucket}/drift/", "incident": incident_id,
        "policy": "churn drift", "message_id": "incident-msg-1",
    }  # fmt: skip
    assert events.states(request_id).count("submitted") == 1
    events.wait_for(request_id, "promoted", act=deployment.reconcile, timeout=120)
    version = registry.get_model(name=f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}/models/{MODEL}@champion")
    lineage = Lineage.model_validate_json(version.version_description)
    assert lineage.trigger is not None and lineage.trigger.incident == incident_id
    assert lineage.trigger.kind == "alert" and lineage.trigger.policy == "churn drift"
    assert version.labels["trainctl_trigger"] == "alert"


@pytest.mark.parametrize(
    "payload",
    [
        incident("0.closed1", state="closed"),  # a closed incident asks for nothing
        incident("0.unknown1", model="nobody-trains-this"),  # no rule trains it
        b"\x00\x01 not json",
        b'{"rule": "gs://elsewhere/"}',
        b'{"incident": {"incident_id": 7}}',
        b"{" * 200_000,  # past max_request_bytes
    ],
)
def test_a_closed_incident_and_garbage_start_nothing_and_are_acked(deployment, payload: bytes):
    """Guards issue 42 point 5: what can never start a run is answered 2xx (Eventarc would otherwise redeliver it for a
    day) and leaves nothing in the ledger."""
    before = deployment.requests_held()
    assert deployment.post("on_retrain", deployment.push_body(payload)) == 200
    assert deployment.requests_held() == before


def test_a_request_may_not_take_a_tick_or_an_alerts_id(deployment):
    events = deployment.events()
    document: dict[str, Any] = {
        "api_version": "trainctl/v1",
        "request_id": "sched.squatted-20261127t0200z",
        "dataset": {"uri": f"gs://{deployment.data_bucket}/nightly/day-1/", "target": "y"},
        "trainer": {"builtin": "tabular"},
        "resources": {"machine_type": "g2-standard-24"},
    }
    assert deployment.request(document) == 200
    (rejected,) = events.of("sched.squatted-20261127t0200z", "rejected")
    assert any("reserved for requests started by a rule's schedule tick" in error for error in rejected.errors)


def test_reconcile_runs_a_latest_rules_tick_that_never_came_once_and_only_while_it_is_recent(deployment, job_client):
    """Guards issue 42 point 1 (reconcile's catch-up): Cloud Scheduler paused, or its message lost, a `latest` rule's
    fire time with no request ten minutes after it was due is run by reconcile as that tick, once; a later tick for it
    is a duplicate; a `none` rule's is not run, nor a fire time older than the next ten minutes."""
    events = deployment.events()
    data = f"gs://{deployment.data_bucket}"
    land(deployment, "nightly/day-4/")
    land(deployment, "strict/day-2/")
    fired = top_of_the_hour(12)
    nightly, strict = f"{data}/nightly/", f"{data}/strict/"
    assert controller_at(deployment, fired + timedelta(minutes=9)).reconcile().get("ticks_caught_up") is None
    controller = controller_at(deployment, fired + timedelta(minutes=12))
    assert controller.reconcile()["ticks_caught_up"] == 1
    assert controller.reconcile().get("ticks_caught_up") is None  # it has its request now
    (_job,) = jobs_with_key(job_client, schedule_key(nightly, fired))
    record = deployment.record(schedule_key(nightly, fired))
    assert record["request"]["dataset"]["uri"] == f"{data}/nightly/day-4/"
    assert record["trigger"] == {
        "kind": "schedule",
        "rule": nightly,
        "scheduled_time": record["trigger"]["scheduled_time"],
    }
    assert events.states(schedule_request_id(nightly, fired)).count("submitted") == 1
    assert handlers.retrain(tick(nightly, fired + timedelta(minutes=13), "tick-late"), controller) == "duplicate"
    assert jobs_with_key(job_client, schedule_key(strict, fired)) == []
    # The next fire time, never ticked, is left alone once it is more than twenty minutes old.
    hour_later = fired + timedelta(hours=1)
    assert controller_at(deployment, hour_later + timedelta(minutes=21)).reconcile().get("ticks_caught_up") is None
    assert jobs_with_key(job_client, schedule_key(nightly, hour_later)) == []
