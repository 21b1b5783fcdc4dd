"""Fault injection through the local JobService's control API, as the controller's tests will use it:
failed creates with Vertex's codes and wording, preemption with and without restart, and jobs held in
JOB_STATE_QUEUED."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool, unique_value

from local.jobservice.client import JobServiceControl, wait_for_state
from local.processes import process_alive, wait_until

pytestmark = pytest.mark.integration


def create(client: JobServiceClient, job: dict):
    return client.create_custom_job(parent=PARENT, custom_job=job)


def jobs_labelled(client: JobServiceClient, run: str) -> list:
    return list(client.list_custom_jobs(request={"parent": PARENT, "filter": f"labels.run={run}"}))


@pytest.mark.parametrize(
    ("code", "exception", "wording"),
    [
        ("UNAVAILABLE", exceptions.ServiceUnavailable, "unavailable"),
        (
            "RESOURCE_EXHAUSTED",
            exceptions.ResourceExhausted,
            "The following quota metrics exceed quota limits: "
            "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus",
        ),
        ("INVALID_ARGUMENT", exceptions.InvalidArgument, "List of found errors"),
    ],
)
def test_the_next_creates_fail_with_the_chosen_code_and_then_succeed(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, code: str, exception, wording: str
):
    run = unique_value()
    jobservice_control.fail_next_creates(code, count=2)

    for _ in range(2):
        with pytest.raises(exception, match=wording):
            create(job_client, custom_job(pool(), labels={"run": run}))
    third = create(job_client, custom_job(pool(), labels={"run": run}))

    assert [job.name for job in jobs_labelled(job_client, run)] == [third.name]


def test_a_create_can_fail_after_the_job_was_made(job_client: JobServiceClient, jobservice_control: JobServiceControl):
    run = unique_value()
    jobservice_control.fail_next_creates("UNAVAILABLE", after_create=True)

    with pytest.raises(exceptions.ServiceUnavailable):
        create(job_client, custom_job(pool(), labels={"run": run}))

    assert len(jobs_labelled(job_client, run)) == 1


def test_a_preempted_job_restarts_when_restart_job_on_worker_restart_is_set(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, tmp_path: Path
):
    # First attempt: the node records its pid and sleeps; the restarted one finds the marker and exits 0.
    node = pool("--pid-dir", str(tmp_path), "--sleep-unless-exists", str(tmp_path / "first-attempt"))
    job = create(job_client, custom_job(node, restart_on_worker_restart=True))
    wait_for_state(job_client, job.name, [JobState.JOB_STATE_RUNNING])
    assert wait_until(lambda: (tmp_path / "first-attempt").exists(), 20)
    first_pid = int((tmp_path / "workerpool0-0.pid").read_text())

    jobservice_control.preempt(job.name)
    done = wait_for_state(job_client, job.name, timeout=30)

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert not process_alive(first_pid)
    assert "attempt 2" in Path(jobservice_control.replica_logs(job.name)["workerpool0-0"]).read_text()


def test_a_preempted_job_without_restart_fails_with_the_stockout_message(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    job = create(job_client, custom_job(pool("--sleep", "60")))
    wait_for_state(job_client, job.name, [JobState.JOB_STATE_RUNNING])

    jobservice_control.preempt(job.name)
    done = wait_for_state(job_client, job.name, timeout=15)

    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.message == (
        "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."
    )


def test_only_a_running_job_can_be_preempted(job_client: JobServiceClient, jobservice_control: JobServiceControl):
    done = wait_for_state(job_client, create(job_client, custom_job(pool())).name)

    with pytest.raises(grpc.RpcError) as error:
        jobservice_control.preempt(done.name)

    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_a_held_job_stays_queued_for_the_given_time_then_runs(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    jobservice_control.hold_next_in_queue(seconds=2)
    began = time.monotonic()
    job = create(job_client, custom_job(pool()))

    time.sleep(1)
    assert job_client.get_custom_job(name=job.name).state == JobState.JOB_STATE_QUEUED
    done = wait_for_state(job_client, job.name, timeout=20)

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert time.monotonic() - began >= 2
    assert (done.start_time - done.create_time).total_seconds() >= 2
