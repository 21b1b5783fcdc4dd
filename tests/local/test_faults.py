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


def wait_for_attempt(control: JobServiceControl, name: str, attempt: int, timeout: float = 30) -> None:
    """Until the primary's log shows that `attempt` of the job has started."""

    def started() -> bool:
        log = control.replica_logs(name).get("workerpool0-0")
        return log is not None and f"attempt {attempt}:" in Path(log).read_text()

    assert wait_until(started, timeout), f"attempt {attempt} of {name} did not start"


def preempt_every_attempt(client: JobServiceClient, control: JobServiceControl, name: str, attempts: int):
    """Preempt each of `attempts` attempts once it started, checking the job is still RUNNING (Vertex
    restarted it rather than failing it); then the job as it ended."""
    for attempt in range(1, attempts + 1):
        wait_for_attempt(control, name, attempt)
        assert client.get_custom_job(name=name).state == JobState.JOB_STATE_RUNNING
        control.preempt(name)
    return wait_for_state(client, name, timeout=30)


def wait_for_state_seen(client: JobServiceClient, name: str, state: JobState, timeout: float = 20) -> None:
    assert wait_until(lambda: client.get_custom_job(name=name).state == state, timeout), f"{name} never {state.name}"


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


def test_a_preempted_job_without_restart_fails_with_the_stockout_message_once_vertex_gave_up(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 12 point 4: a stockout is retried by Vertex 3 times before the job fails."""
    job = create(job_client, custom_job(pool("--sleep", "60")))
    wait_for_state(job_client, job.name, [JobState.JOB_STATE_RUNNING])

    done = preempt_every_attempt(job_client, jobservice_control, job.name, attempts=4)

    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 8
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
    job = create(job_client, custom_job(pool()))

    assert job_client.get_custom_job(name=job.name).state == JobState.JOB_STATE_QUEUED
    done = wait_for_state(job_client, job.name, timeout=20)

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    # It waited its hold in QUEUED: by the job's own times, not by the test's sleeps.
    assert (done.start_time - done.create_time).total_seconds() >= 2


def test_an_unknown_error_after_the_create_reads_as_a_broken_stream_and_the_job_exists(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 12 point 2: UNKNOWN on CreateCustomJob, with gRPC's broken-stream text, job made."""
    run = unique_value()
    jobservice_control.fail_next_creates("UNKNOWN", after_create=True)

    with pytest.raises(exceptions.Unknown, match="Stream removed"):
        create(job_client, custom_job(pool(), labels={"run": run}))

    assert len(jobs_labelled(job_client, run)) == 1


def test_reads_and_cancels_can_be_rate_limited_with_vertex_request_rate_text(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 12 point 2: RESOURCE_EXHAUSTED from Get/List/Cancel is the request-rate quota."""
    job = create(job_client, custom_job(pool("--sleep", "60")))
    jobservice_control.rate_limit_next_calls(2)

    with pytest.raises(exceptions.ResourceExhausted, match="Quota exceeded for quota metric") as get_error:
        job_client.get_custom_job(name=job.name)
    with pytest.raises(exceptions.ResourceExhausted, match="requests per minute"):
        list(job_client.list_custom_jobs(parent=PARENT))
    assert job_client.get_custom_job(name=job.name).name == job.name  # the burst is over

    jobservice_control.rate_limit_next_calls(1, methods=("CancelCustomJob",))
    assert job_client.get_custom_job(name=job.name).name == job.name  # not a limited method
    with pytest.raises(exceptions.ResourceExhausted):
        job_client.cancel_custom_job(name=job.name)
    job_client.cancel_custom_job(name=job.name)
    assert "aiplatform.googleapis.com" in get_error.value.message
    assert wait_for_state(job_client, job.name, timeout=20).state == JobState.JOB_STATE_CANCELLED


def test_calls_can_be_refused_with_iam_permission_denied_naming_the_permission(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 25 point 2: the controller's handling of PERMISSION_DENIED (grants still propagating) needs the
    local JobService to refuse List and Create as IAM does, with the permission named, and nothing created."""
    run = unique_value()
    jobservice_control.deny_next_calls(1, methods=("ListCustomJobs",))
    jobservice_control.deny_next_calls(1, methods=("CreateCustomJob",))
    with pytest.raises(exceptions.PermissionDenied, match=r"Permission 'aiplatform\.customJobs\.list' denied on"):
        list(job_client.list_custom_jobs(parent=PARENT))
    with pytest.raises(exceptions.PermissionDenied, match=r"'aiplatform\.customJobs\.create' denied on resource"):
        create(job_client, custom_job(pool("--sleep", "0"), labels={"run": run}))
    assert jobs_labelled(job_client, run) == []  # a refused create makes nothing
    job = create(job_client, custom_job(pool("--sleep", "0"), labels={"run": run}))
    assert [j.name for j in jobs_labelled(job_client, run)] == [job.name]


def test_a_job_can_fail_for_quota_with_code_8_naming_its_gpu_metric(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 12 point 3: the third quota outcome, FAILED with code 8 and the metric."""
    jobservice_control.fail_next_for_quota()
    job = create(job_client, custom_job(pool(accelerator="NVIDIA_L4", machine="g2-standard-8", count=1)))

    done = wait_for_state(job_client, job.name, timeout=20)

    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 8
    assert done.error.message == (
        "The following quota metrics exceed quota limits: "
        "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
    )
    assert "start_time" not in done  # it never ran


def test_a_job_held_in_pending_waits_there_and_can_be_cancelled(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 12 point 3: a capacity wait is PENDING, told apart from the quota wait in QUEUED."""
    jobservice_control.hold_next_in_pending(seconds=120)
    job = create(job_client, custom_job(pool()))

    wait_for_state_seen(job_client, job.name, JobState.JOB_STATE_PENDING)
    time.sleep(1)
    assert job_client.get_custom_job(name=job.name).state == JobState.JOB_STATE_PENDING
    job_client.cancel_custom_job(name=job.name)

    assert wait_for_state(job_client, job.name, timeout=20).state == JobState.JOB_STATE_CANCELLED
