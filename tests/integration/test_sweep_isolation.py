"""One bad record never stops the sweep (issue 12 point 1): reconcile catches whatever goes wrong with a
record, counts it, logs it, and brings every other record up to date; a cancel of a job that has already
ended (FAILED_PRECONDITION at Vertex) is not an error."""

from __future__ import annotations

import json
import time

from google.cloud.aiplatform_v1.types import JobState

from functions.cloud.vertex import VertexJobs
from functions.ledger.keys import key_hash
from functions.settings import Settings
from tests.integration.deployment import fake_node_request
from tests.integration.test_controller_intake import jobs_with_key


def test_a_corrupt_record_is_counted_and_every_other_record_is_reconciled(deployment, job_client, tmp_path):
    """Guards issue 12 point 1: before, the corrupt record's error escaped, the tick answered 500 and the
    records listed after it were not reconciled."""
    events = deployment.events()
    hold = tmp_path / "never"
    assert deployment.request(fake_node_request("corrupt-1", "--until-file", str(hold))) == 200
    assert deployment.request(fake_node_request("healthy-1", "--sleep", "0.2")) == 200
    corrupt = (
        deployment.storage().bucket(deployment.control_bucket).blob(f"ledger/{key_hash('request:corrupt-1')}.json")
    )
    corrupt.upload_from_string(b'{"key": "request:corrupt-1", "truncated')
    _wait_until_ended(job_client, "request:healthy-1")

    summary = deployment.reconcile()  # an HTTPError (500) before the fix

    assert summary["errors"] == 1
    assert summary["succeeded"] == 1
    assert [e.state for e in events.of("healthy-1", "succeeded")] == ["succeeded"]

    # The same record reached through the log sink: logged and acked, not a 500 that Eventarc would redeliver
    # for a day (before the fix the error escaped on_job_state too).
    [job] = jobs_with_key(job_client, "request:corrupt-1")
    line = {"resource": {"type": "ml_job", "labels": {"job_id": job.name.rsplit("/", 1)[-1], "task_name": "service"}}}
    assert deployment.post("on_job_state", deployment.push_body(json.dumps(line).encode())) == 200
    hold.touch()  # let corrupt-1's job end


def test_cancelling_a_job_that_has_already_ended_is_not_an_error(deployment, job_client, jobservice_control):
    """Guards issue 12 point 1: Vertex answers FAILED_PRECONDITION to cancelling an ended job. Issue 29: the cancel
    does reach the JobService (one CancelCustomJob, refused there), and the job stays as it ended."""
    assert deployment.request(fake_node_request("sweep-ended-1", "--sleep", "0.2")) == 200
    [job] = _wait_until_ended(job_client, "request:sweep-ended-1")
    settings = Settings.from_env(deployment.settings_env())
    cancels = jobservice_control.call_counts().get("CancelCustomJob", 0)

    VertexJobs(settings.project, settings.region, settings.vertex_endpoint).cancel(job.name)  # no CallRejected

    assert jobservice_control.call_counts().get("CancelCustomJob", 0) == cancels + 1
    assert job_client.get_custom_job(name=job.name).state == job.state == JobState.JOB_STATE_SUCCEEDED


def _wait_until_ended(job_client, request_key: str) -> list:
    for _ in range(240):
        jobs = jobs_with_key(job_client, request_key)
        if jobs and all(j.state.name in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") for j in jobs):
            return jobs
        time.sleep(0.5)
    raise AssertionError(f"the job of {request_key} did not end")


def test_a_concurrent_sweep_reports_each_state_change_once(deployment, job_client):
    """Issue 16 item 6: a tick observes records side by side (settings.reconcile_concurrency); every request
    whose job ended in between still gets exactly one `running` and one `succeeded`."""
    events = deployment.events()
    ids = [f"swept-{i}" for i in range(6)]
    for request_id in ids:
        assert deployment.request(fake_node_request(request_id, "--sleep", "0.2")) == 200
    for request_id in ids:
        _wait_until_ended(job_client, f"request:{request_id}")
    for _ in range(2):
        deployment.reconcile()
    for request_id in ids:
        assert events.states(request_id) == ["accepted", "submitted", "running", "succeeded"], request_id
