"""Submitting exactly once when Vertex misbehaves: transient errors retried, permanent ones rejected, quota
reported as quota, and a crash between CreateCustomJob and the ledger update adopted, never duplicated."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cloudevents.http import CloudEvent

from functions import handlers
from functions.cloud.vertex import VertexJobs
from functions.controller import Controller
from functions.ledger.keys import key_hash
from functions.settings import Settings
from local.jobservice.client import wait_for_state
from tests.integration.deployment import DEAD_CLAIM_LEASE, Deployment, fake_node_request, serving
from tests.integration.test_controller_intake import jobs_with_key

# TRAINCTL_RETRY_PAUSE_SCALE: the functions retry Vertex's refusals with the same attempts, with a tenth of the pauses
# between them (three rate-limited reads sat out 3.5-7 s of backoff at 1).
RETRY_PAUSE_SCALE = 0.1


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(jobservice, log_dir, TRAINCTL_RETRY_PAUSE_SCALE=str(RETRY_PAUSE_SCALE)) as deployed:
        yield deployed


def test_create_failing_twice_with_unavailable_is_retried_and_submits_once(deployment, jobservice_control, job_client):
    events = deployment.events()
    jobservice_control.fail_next_creates("UNAVAILABLE", count=2)
    assert deployment.request(fake_node_request("flaky-create-1")) == 200
    assert events.states("flaky-create-1") == ["accepted", "submitted"]
    assert len(jobs_with_key(job_client, "request:flaky-create-1")) == 1


def test_a_lost_create_response_is_adopted_not_repeated(deployment, jobservice_control, job_client):
    jobservice_control.fail_next_creates("UNAVAILABLE", count=1, after_create=True)
    assert deployment.request(fake_node_request("lost-response-1")) == 200
    assert len(jobs_with_key(job_client, "request:lost-response-1")) == 1
    assert deployment.record("request:lost-response-1")["state"] == "submitted"


def test_unknown_from_a_create_that_took_effect_is_adopted_not_rejected(deployment, jobservice_control, job_client):
    """Guards issue 12 point 2: UNKNOWN (a broken stream) says nothing of whether the job exists; before, it
    was a permanent refusal and the request was rejected while its job ran."""
    events = deployment.events()
    jobservice_control.fail_next_creates("UNKNOWN", count=1, after_create=True)
    assert deployment.request(fake_node_request("broken-stream-1")) == 200
    assert len(jobs_with_key(job_client, "request:broken-stream-1")) == 1
    assert deployment.record("request:broken-stream-1")["state"] == "submitted"
    assert events.states("broken-stream-1") == ["accepted", "submitted"]


def test_a_burst_of_rate_limited_reads_is_retried_and_the_job_is_still_observed(
    deployment, jobservice_control, job_client
):
    """Guards issue 12 point 2: RESOURCE_EXHAUSTED from Get/List/Cancel is Vertex's request-rate limit, worth
    retrying with backoff; before, it was a quota refusal and the record's observation failed."""
    events = deployment.events()
    assert deployment.request(fake_node_request("rate-limited-1", "--sleep", "0.2")) == 200
    job = deployment.record("request:rate-limited-1")["job_name"]
    wait_for_state(job_client, job)
    jobservice_control.rate_limit_next_calls(count=3)
    summary = deployment.reconcile()
    assert summary["errors"] == 0
    assert events.of("rate-limited-1", "succeeded")


def test_invalid_argument_from_vertex_is_rejected_without_retry(deployment, jobservice_control, job_client):
    events = deployment.events()
    jobservice_control.fail_next_creates("INVALID_ARGUMENT", count=1, message="Field: job_spec; Message: no.")
    assert deployment.post("on_job_request", deployment.push_body(_json(fake_node_request("refused-1")))) == 200
    (rejected,) = events.of("refused-1", "rejected")
    assert rejected.reason == "invalid" and "no." in rejected.errors[0]
    assert jobs_with_key(job_client, "request:refused-1") == []
    assert deployment.record("request:refused-1")["state"] == "rejected"
    # A redelivery does not try again: the request is settled.
    assert deployment.request(fake_node_request("refused-1")) == 200
    assert jobs_with_key(job_client, "request:refused-1") == []
    assert events.of("refused-1", "duplicate")[0].existing_state == "rejected"


def test_quota_exhaustion_is_classified_as_quota_and_retried_later(deployment, jobservice_control, job_client):
    events = deployment.events()
    jobservice_control.fail_next_creates("RESOURCE_EXHAUSTED", count=1)
    assert deployment.request(fake_node_request("quota-1")) == 200
    (retrying,) = events.of("quota-1", "retrying")
    assert retrying.reason == "quota" and "quota metrics exceed" in retrying.message
    record = deployment.record("request:quota-1")
    assert record["state"] == "claimed" and record["attempt"] == 2 and "not_before" in record
    assert jobs_with_key(job_client, "request:quota-1") == []


def test_a_crash_after_create_is_adopted_by_the_redelivery(deployment, job_client):
    """The first delivery dies right after CreateCustomJob, before the ledger says so; once its lease has
    expired, the redelivered event finds the labelled job and adopts it."""
    events = deployment.events()
    settings = Settings.from_env(deployment.settings_env(TRAINCTL_LEASE=DEAD_CLAIM_LEASE))
    vertex = VertexJobs(settings.project, settings.region, settings.vertex_endpoint)

    class Crash(BaseException):
        pass

    class CrashingVertex(VertexJobs):
        def __init__(self):
            self.__dict__ = vertex.__dict__

        def find_or_create(self, *args, **kwargs):
            vertex.find_or_create(*args, **kwargs)
            raise Crash("the function process died here")

    crashing = Controller.from_settings(settings, vertex_factory=CrashingVertex)
    push_headers, push_body = deployment.push_body(_json(fake_node_request("crash-1")), "msg-crash-1")
    event = CloudEvent(
        {
            "type": "google.cloud.pubsub.topic.v1.messagePublished",
            "source": "//pubsub.googleapis.com/test",
            "id": "msg-crash-1",
        },
        json.loads(push_body),
    )
    with pytest.raises(Crash):
        handlers.job_request(event, crashing)
    assert len(jobs_with_key(job_client, "request:crash-1")) == 1
    assert deployment.record("request:crash-1")["state"] == "claimed"
    time.sleep(settings.lease + 0.5)  # the dead delivery's lease runs out
    assert deployment.post("on_job_request", (push_headers, push_body)) == 200
    assert len(jobs_with_key(job_client, "request:crash-1")) == 1
    record = deployment.record("request:crash-1")
    assert record["state"] == "submitted" and record["job_name"] == jobs_with_key(job_client, "request:crash-1")[0].name
    assert events.states("crash-1") == ["accepted", "submitted"]


def _controller_at(deployment, now: list[datetime]) -> Controller:
    """The deployment's controller in this process, on a clock the test moves forward."""
    settings = Settings.from_env(deployment.settings_env())
    return dataclasses.replace(Controller.from_settings(settings), clock=lambda: now[0])


def test_permission_denied_while_grants_propagate_is_tried_again_until_the_job_is_created(
    deployment, jobservice_control, job_client
):
    """Guards issue 25 point 2: PERMISSION_DENIED from ListCustomJobs or CreateCustomJob (fresh IAM grants take
    minutes to reach Vertex, as does an API just enabled) was a final `rejected` (reason invalid) that spent the
    request id. Now the delivery is acked, the claim let go, and the next tries go on until the job is created."""
    events = deployment.events()
    jobservice_control.deny_next_calls(1, methods=("ListCustomJobs",))
    assert deployment.request(fake_node_request("iam-propagating-1")) == 200  # acked: no redelivery loop
    record = deployment.record("request:iam-propagating-1")
    assert record["state"] == "claimed" and record["permission_denied_since"] and "owner" not in record
    assert "aiplatform.customJobs.list" in record["message"]
    assert events.states("iam-propagating-1") == ["accepted"]

    now = [datetime.now(UTC) + timedelta(minutes=2)]
    controller = _controller_at(deployment, now)
    khash = key_hash("request:iam-propagating-1")
    jobservice_control.deny_next_calls(1, methods=("CreateCustomJob",))
    assert controller.observe_record(khash) == "waiting"  # reconcile's visit: refused again, at create now
    assert jobs_with_key(job_client, "request:iam-propagating-1") == []
    now[0] += timedelta(minutes=2)
    assert controller.observe_record(khash) == "submitted"
    assert len(jobs_with_key(job_client, "request:iam-propagating-1")) == 1
    assert "permission_denied_since" not in deployment.record("request:iam-propagating-1")
    assert events.states("iam-propagating-1") == ["accepted", "submitted"]


def test_permission_still_denied_after_the_wait_fails_the_request_saying_what_to_fix(
    deployment, jobservice_control, job_client
):
    """Guards issue 25 point 2: a refusal that outlasts `permission_wait` ends the request with reason
    `permission` (not `invalid`), naming the permission Vertex refused and the grants that give it."""
    events = deployment.events()
    jobservice_control.deny_next_calls(2, methods=("CreateCustomJob",))
    now = [datetime.now(UTC)]
    controller = _controller_at(deployment, now)
    _, push_body = deployment.push_body(_json(fake_node_request("iam-missing-1")), "msg-iam-missing-1")
    event = CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "//pubsub.googleapis.com/t", "id": "i"},
        json.loads(push_body),
    )
    assert handlers.job_request(event, controller) == "waiting"
    now[0] += timedelta(seconds=controller.settings.permission_wait + 1)
    assert controller.observe_record(key_hash("request:iam-missing-1")) == "failed"
    (failed,) = events.of("iam-missing-1", "failed")
    assert failed.reason == "permission"
    assert "aiplatform.customJobs.create" in failed.message and "roles/aiplatform.user" in failed.message
    assert events.of("iam-missing-1", "rejected") == []
    assert jobs_with_key(job_client, "request:iam-missing-1") == []
    assert deployment.record("request:iam-missing-1")["state"] == "failed"


def _json(document) -> bytes:
    return json.dumps(document).encode()
