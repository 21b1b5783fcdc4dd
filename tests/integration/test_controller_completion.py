"""Every state change reported exactly once, whichever path sees it first: `reconcile` alone, the log sink's
messages through `on_job_state`, or both; stuck jobs cancelled for quota or capacity; jobs Vertex restarts
itself kept as one attempt; jobs that fail after Vertex's own retries resubmitted."""

from __future__ import annotations

import json

import pytest
from google.cloud import pubsub_v1

from local.jobservice.client import wait_for_state
from local.names import LOCAL_PROJECT, Names
from local.pubsub_emulator import pull_now
from tests.integration.deployment import fake_node_request

METRICS = '{"val_accuracy": 0.91, "samples_per_second": 1234.5}'


def counts(events, request_id: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for state in events.states(request_id):
        found[state] = found.get(state, 0) + 1
    return found


def test_a_job_run_to_completion_is_reported_once_by_reconcile_alone(deployment, job_client):
    events = deployment.events()
    assert deployment.request(fake_node_request("complete-1", "--sleep", "1", "--metrics", METRICS)) == 200
    succeeded = events.wait_for("complete-1", "succeeded", act=deployment.reconcile)
    for _ in range(3):
        deployment.reconcile()  # later ticks change nothing
    assert counts(events, "complete-1") == {"accepted": 1, "submitted": 1, "running": 1, "succeeded": 1}
    assert succeeded.metrics == {"val_accuracy": 0.91, "samples_per_second": 1234.5}
    assert succeeded.artifacts.model_dir == f"gs://{deployment.control_bucket}/custom-runs/complete-1/model/"
    assert succeeded.job.console_url.startswith("https://console.cloud.google.com/vertex-ai/locations/us-central1/")
    assert succeeded.duration_seconds is not None and succeeded.cost.gpus == 2
    assert deployment.record("request:complete-1")["state"] == "succeeded"


def test_log_sink_messages_and_reconcile_together_report_each_state_once(deployment, job_client):
    """The local JobService announces state changes on the job-state topic in the log sink's shape; they are
    pushed to on_job_state while reconcile ticks too."""
    subscriber = pubsub_v1.SubscriberClient()
    topic = f"projects/{LOCAL_PROJECT}/topics/{Names(LOCAL_PROJECT).job_state_topic}"
    subscription = subscriber.subscription_path(LOCAL_PROJECT, "it-job-state-complete-2")
    subscriber.create_subscription(name=subscription, topic=topic)
    events = deployment.events()
    assert deployment.request(fake_node_request("complete-2", "--sleep", "1", "--metrics", METRICS)) == 200
    job_name = deployment.record("request:complete-2")["job_name"]
    wait_for_state(job_client, job_name)

    def sink_to_on_job_state() -> None:
        response = pull_now(subscriber, subscription, max_messages=100)  # polled between reconcile ticks
        for received in response.received_messages:
            entry = json.loads(received.message.data)
            if job_name.endswith("/" + entry["resource"]["labels"]["job_id"]):
                assert deployment.deliver("on_job_state", deployment.push_body(received.message.data)) == 200
            deployment.reconcile()
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])

    events.wait_for("complete-2", "succeeded", act=sink_to_on_job_state)
    sink_to_on_job_state()
    deployment.reconcile()
    assert counts(events, "complete-2") == {"accepted": 1, "submitted": 1, "running": 1, "succeeded": 1}
    subscriber.delete_subscription(subscription=subscription)


def test_a_log_line_about_a_job_trainctl_does_not_know_is_ignored(deployment):
    entry = {
        "resource": {"type": "ml_job", "labels": {"job_id": "999999999"}},
        "labels": {"ml.googleapis.com/job_state": "SUCCEEDED"},
    }
    """Issue 29 (tests that assert too little): a log line naming a job trainctl does not know, and one that is no
    log entry at all, are acknowledged (2xx, never redelivered) and change nothing: no event, no ledger write."""
    events, held = deployment.events(), deployment.requests_held()
    assert deployment.post("on_job_state", deployment.push_body(json.dumps(entry).encode())) == 200
    assert deployment.post("on_job_state", deployment.push_body(b"not a log entry")) == 200
    assert events.drain() == []
    assert deployment.requests_held() == held


@pytest.mark.parametrize(
    ("hold", "vertex_state", "reason"),
    [("hold_next_in_queue", "JOB_STATE_QUEUED", "quota"), ("hold_next_in_pending", "JOB_STATE_PENDING", "capacity")],
)
def test_a_job_waiting_beyond_max_pending_is_cancelled_as_stuck_for_its_reason(
    deployment, jobservice_control, hold, vertex_state, reason
):
    """Guards issue 12 point 3: Vertex holds a job in QUEUED until GPU quota frees up (reason quota), in
    PENDING while it provisions machines (capacity); before, both were reported as short capacity."""
    events = deployment.events()
    getattr(jobservice_control, hold)(seconds=120)
    request_id = f"stuck-{reason}-1"
    # max_pending 1 s, the least a request may name: the job is held 120 s, so it waits past it either way.
    assert deployment.request(fake_node_request(request_id, scheduling={"max_pending": "1s"})) == 200
    stuck = events.wait_for(request_id, "stuck", act=deployment.reconcile)
    assert (stuck.reason, stuck.job_state) == (reason, vertex_state)
    assert stuck.max_pending_seconds == 1 and stuck.pending_seconds >= 1
    cancelled = events.wait_for(request_id, "cancelled", act=deployment.reconcile)
    assert cancelled.reason == reason and "max_pending" in cancelled.message
    assert counts(events, request_id) == {"accepted": 1, "submitted": 1, "stuck": 1, "cancelled": 1}


def test_a_job_vertex_fails_for_quota_is_reported_failed_for_quota_with_the_metric(deployment, jobservice_control):
    """Guards issue 12 point 3: FAILED with code 8 and Vertex's quota text is reason quota, the metric named,
    not resubmitted (more attempts would meet the same quota), with advice in the message."""
    events = deployment.events()
    jobservice_control.fail_next_for_quota()
    assert deployment.request(fake_node_request("quota-failed-1")) == 200
    failed = events.wait_for("quota-failed-1", "failed", act=deployment.reconcile)
    assert failed.reason == "quota"
    assert failed.quota_metric == "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"  # g2: L4
    assert "Ask for more of this quota" in failed.message
    assert "retrying" not in events.states("quota-failed-1")


def test_a_spot_job_vertex_restarts_after_a_preemption_is_one_attempt_that_succeeds(
    deployment, jobservice_control, job_client, tmp_path
):
    """Guards issue 12 point 4: Vertex restarts a preempted Spot job itself (the same job); trainctl reports
    no retry of its own and keeps attempt 1."""
    events = deployment.events()
    first_run = str(tmp_path / "first-run")  # the first run waits to be preempted, the restart finishes
    request = fake_node_request(
        "spot-restarted-1",
        *("--sleep-unless-exists", first_run, "--metrics", METRICS),
        scheduling={"strategy": "spot"},
    )
    assert deployment.request(request) == 200
    job = deployment.record("request:spot-restarted-1")["job_name"]
    events.wait_for("spot-restarted-1", "running", act=deployment.reconcile)
    jobservice_control.preempt(job)
    succeeded = events.wait_for("spot-restarted-1", "succeeded", act=deployment.reconcile)
    assert succeeded.attempt == 1 and succeeded.job.name == job
    assert events.states("spot-restarted-1") == ["accepted", "submitted", "running", "succeeded"]


def test_a_job_still_stocked_out_after_vertexs_retries_is_resubmitted_and_succeeds(
    deployment, jobservice_control, job_client
):
    """Vertex retries a stockout 3 times, then fails the job (code 8, its stockout text); that failure is
    trainctl's to retry: one `retrying` (capacity), attempt 2 into the same output directory."""
    events = deployment.events()
    jobservice_control.stock_out_next(count=4)
    assert deployment.request(fake_node_request("stocked-out-1", "--metrics", METRICS)) == 200
    first_job = deployment.record("request:stocked-out-1")["job_name"]
    retrying = events.wait_for("stocked-out-1", "retrying", act=deployment.reconcile)
    assert retrying.reason == "capacity" and retrying.attempt == 1
    assert "after Vertex's own retries" in retrying.message
    succeeded = events.wait_for("stocked-out-1", "succeeded", act=deployment.reconcile)
    assert succeeded.attempt == 2 and succeeded.job.name != first_job
    assert events.states("stocked-out-1") == [
        "accepted", "submitted", "retrying", "submitted", "running", "succeeded"
    ]  # fmt: skip
    second = job_client.get_custom_job(name=succeeded.job.name)
    assert second.labels["trainctl_attempt"] == "2"
    assert second.job_spec.base_output_directory.output_uri_prefix.endswith(
        "/custom-runs/stocked-out-1/"
    )  # resumes there


def test_a_failed_user_job_is_reported_failed_with_reason_user_and_not_retried(deployment, job_client):
    events = deployment.events()
    assert deployment.request(fake_node_request("user-error-1", "--exit-code", "3")) == 200
    failed = events.wait_for("user-error-1", "failed", act=deployment.reconcile)
    assert failed.reason == "user"
    assert "exited with a non-zero status of 3" in failed.message
    assert "retrying" not in events.states("user-error-1")
