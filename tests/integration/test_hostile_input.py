"""Hostile input through HTTP on both event entry points (functions-framework, the real stack).

Guards: input that can never become valid must not crash a function or earn a 5xx (which would make the
trigger redeliver it for a day); requests are answered with a `rejected` event naming the field and rule;
storage objects that are not markers are ignored with a log line; nothing rejected reaches the ledger.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.deployment import EventLog, fake_node_request
from tests.unit.test_request_schema import json_values

REQUEST_PATH = "projects/trainctl-local/topics/it-requests"


@pytest.fixture(scope="module")
def event_log(deployment) -> EventLog:
    """One subscription for the generated cases (a new one per example costs more than the example)."""
    return deployment.events()


def ce_headers(**overrides: str) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "ce-specversion": "1.0",
        "ce-type": "google.cloud.storage.object.v1.finalized",
        "ce-source": "//storage.googleapis.com/projects/_/buckets/it",
        "ce-id": uuid.uuid4().hex,
        "ce-time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return {k: v for k, v in (headers | overrides).items() if v is not None}


def storage_body(deployment, name: str, **fields) -> bytes:
    data = {"bucket": deployment.data_bucket, "name": name, "generation": "1700000000000001", "size": "0"}
    return json.dumps(data | fields).encode()


@pytest.mark.parametrize(
    ("label", "headers", "body"),
    [
        ("no ce-* headers", {"content-type": "application/json"}, b'{"bucket": "b", "name": "x"}'),
        ("wrong specversion", ce_headers(**{"ce-specversion": "0.9"}), b"{}"),
        ("missing ce-source", ce_headers(**{"ce-source": None}), b"{}"),
        ("body is not JSON", ce_headers(), b"\xff\xfe{not json"),
        ("body is a list", ce_headers(), b"[1, 2, 3]"),
        ("body is empty", ce_headers(), b""),
    ],
)
def test_malformed_storage_events_never_earn_a_5xx(deployment, label, headers, body):
    """Issue 29 (tests that assert too little): refused or ignored, never a 5xx, and nothing happens: no event, no
    ledger record."""
    events = deployment.events()
    assert deployment.post("on_dataset_upload", (headers, body)) < 500, label
    assert events.drain() == [] and deployment.requests_held() == set()


@pytest.mark.parametrize(
    ("label", "name", "fields", "rejected"),
    [
        ("NUL in a shard name", "churn/x/part\x00.csv", {}, None),
        ("newline in a shard name", 'churn/x/part\n{"severity": "ERROR"}.csv', {}, None),
        ("unicode shard name", "churn/x/données-☃.csv", {}, None),
        ("size is not a number", "churn/x/_SUCCESS", {"size": "lots", "generation": "nope"}, "dataset.uri:"),
        ("generation is a list", "churn/x/part.csv", {"generation": [1]}, None),
        ("name is a number", 12, {}, None),
        ("a marker outside every rule", "elsewhere/_SUCCESS", {}, None),
    ],
)
def test_strange_object_names_are_ignored_or_rejected_cleanly(deployment, label, name, fields, rejected):
    """Issue 29 (tests that assert too little): a data shard or an object no rule watches is ignored (no event); a
    marker whose fields are junk is rejected naming the field; none reaches the ledger."""
    events = deployment.events()
    body = storage_body(deployment, name, **fields)
    assert deployment.post("on_dataset_upload", (ce_headers(), body)) == 200, label
    published = [(e.state, e.errors[0].split(" ")[0]) for e, _ in events.drain()]
    assert published == ([("rejected", rejected)] if rejected else []), label
    assert deployment.requests_held() == set()


def test_a_marker_whose_folder_climbs_out_is_rejected_naming_the_rule(deployment):
    events = deployment.events()
    body = storage_body(deployment, "churn/../_SUCCESS", generation="1700000000000002")
    assert deployment.post("on_dataset_upload", (ce_headers(), body)) == 200
    (rejected,) = [e for e, _ in events.drain() if e.state == "rejected" and e.trigger.generation == "1700000000000002"]
    assert any(e.startswith("dataset.uri: must not contain '.' or '..'") for e in rejected.errors)
    assert deployment.record(f"gcs:{deployment.data_bucket}/churn/../_SUCCESS#1700000000000002") is None


def _with(document: dict, **changes) -> bytes:
    return json.dumps(document | changes).encode()


def hostile_requests() -> list[tuple[str, bytes, str]]:
    """(label, message data, an error that must be named)."""
    good = fake_node_request("hostile-ok")
    return [
        ("not UTF-8", b"\xff\xfe\xfd", "not UTF-8"),
        ("YAML alias bomb", b"a: &a ['x','x']\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: [*c,*c]\n", "anchors"),
        ("JSON nested 10,000 deep", b"[" * 10_000 + b"]" * 10_000, "nested more than"),
        ("10 MB payload", json.dumps(good | {"display_name": "x" * 10_000_000}).encode(), "limit is 65536"),
        ("NUL in the display name", json.dumps(good | {"display_name": "a\x00b"}).encode(), "display_name:"),
        ("newline in a label", json.dumps(good | {"labels": {"team": "a\nb"}}).encode(), "labels.team:"),
        ("unicode label key", json.dumps(good | {"labels": {"équipe": "x"}}).encode(), "labels.équipe:"),
        ("'..' in the dataset", _with(good, dataset={"uri": "gs://b-1/a/../b", "target": "y"}), "dataset.uri:"),
        (
            "a number as a string",
            _with(good, resources={"machine_type": "g2-standard-24", "replica_count": "2"}),
            "resources.replica_count:",
        ),
        ("a string as a number", json.dumps(good | {"request_id": 42}).encode(), "request_id:"),
        ("an unknown field", json.dumps(good | {"priority": "high"}).encode(), "priority: unknown field"),
        ("a scalar document", b"42", "mapping"),
    ]  # fmt: skip


@pytest.mark.parametrize(("label", "data", "named"), hostile_requests(), ids=[c[0] for c in hostile_requests()])
def test_hostile_requests_are_rejected_with_2xx_and_never_reach_the_ledger(deployment, label, data, named):
    events = deployment.events()
    message_id = f"hostile-{uuid.uuid4().hex[:8]}"
    assert deployment.post("on_job_request", deployment.push_body(data, message_id), REQUEST_PATH) == 200
    (rejected,) = [e for e, _ in events.drain() if e.state == "rejected" and e.trigger.message_id == message_id]
    assert any(named in error for error in rejected.errors), rejected.errors
    assert deployment.requests_held() == set()


def test_data_that_is_not_base64_is_rejected(deployment):
    events = deployment.events()
    body = {
        "subscription": "projects/trainctl-local/subscriptions/it-requests",
        "message": {"data": "***not base64***", "messageId": "hostile-b64", "publishTime": "2030-01-01T00:00:00Z"},
    }
    push = ({"content-type": "application/json"}, json.dumps(body).encode())
    assert deployment.post("on_job_request", push, REQUEST_PATH) == 200
    (rejected,) = [e for e, _ in events.drain() if e.state == "rejected" and e.trigger.message_id == "hostile-b64"]
    assert rejected.errors == ["message.data: missing or not base64"]


def test_a_push_without_data_is_refused_by_the_framework_not_crashed_on(deployment):
    """Issue 29 (tests that assert too little): and nothing happens: no event, no ledger record."""
    events = deployment.events()
    body = {"message": {"attributes": {"a": "b"}, "messageId": "no-data"}}
    assert deployment.post("on_job_request", ({"content-type": "application/json"}, json.dumps(body).encode())) < 500
    assert events.drain() == [] and deployment.requests_held() == set()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    document=json_values
    | st.fixed_dictionaries(
        {"api_version": st.just("trainctl/v1")}, optional={"request_id": st.text(max_size=10), "resources": json_values}
    )
)
def test_generated_requests_never_crash_the_request_function(deployment, event_log, document):
    """None is a valid request (no dataset): each is answered 2xx with `rejected` and none reaches the ledger."""
    seen = len(event_log.drain())
    data = json.dumps(document).encode()
    assert deployment.post("on_job_request", deployment.push_body(data), REQUEST_PATH) == 200
    assert [e.state for e, _ in event_log.drain()[seen:]] == ["rejected"]
    assert deployment.requests_held() == set()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.dictionaries(st.sampled_from(["bucket", "name", "generation", "size", "metageneration"]), json_values))
def test_generated_storage_events_never_crash_the_upload_function(deployment, event_log, fields):
    """No generated event names a watched bucket: each is ignored, with no event and no ledger record."""
    seen = len(event_log.drain())
    body = json.dumps(fields).encode()
    assert deployment.post("on_dataset_upload", (ce_headers(), body)) < 500
    assert event_log.drain()[seen:] == [] and deployment.requests_held() == set()
