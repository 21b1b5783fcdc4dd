"""Vertex's own restarts, as the local JobService imitates them (local/jobservice/vertex_retries.py):
Spot preemption up to 6 times, stockouts up to 3, SIGABRT/SIGSEGV exits up to 3, none with
`scheduling.disable_retries`. A restart keeps the job's name and its RUNNING state."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool
from test_faults import preempt_every_attempt, wait_for_attempt

from local.jobservice.client import JobServiceControl, wait_for_state

pytestmark = pytest.mark.integration

STOCKOUT = "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."


def create(client: JobServiceClient, job: dict):
    return client.create_custom_job(parent=PARENT, custom_job=job)


def runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_preempted_spot_job_is_restarted_by_vertex_six_times_then_fails(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 12 point 4: Spot preemption restarts the same job (RUNNING, not FAILED) up to 6 times."""
    job = create(job_client, custom_job(pool("--sleep", "120"), strategy="SPOT"))
    wait_for_state(job_client, job.name, [JobState.JOB_STATE_RUNNING])

    done = preempt_every_attempt(job_client, jobservice_control, job.name, attempts=7)

    assert done.name == job.name
    assert done.state == JobState.JOB_STATE_FAILED
    assert (done.error.code, done.error.message) == (8, STOCKOUT)


@pytest.mark.parametrize(("stockouts", "state"), [(3, JobState.JOB_STATE_SUCCEEDED), (4, JobState.JOB_STATE_FAILED)])
def test_vertex_retries_three_stockouts_and_fails_the_job_on_the_fourth(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, stockouts: int, state: JobState
):
    """Guards issue 12 point 4: up to 3 stockouts are retried by Vertex and the job then runs; a fourth
    ends it FAILED with code 8 and the stockout text, no node ever started."""
    jobservice_control.stock_out_next(count=stockouts)
    job = create(job_client, custom_job(pool()))

    done = wait_for_state(job_client, job.name, timeout=30)

    assert done.state == state
    logs = jobservice_control.replica_logs(job.name)
    assert Path(logs["service"]).read_text().count("stockout while provisioning; Vertex restarts the job") == 3
    if state == JobState.JOB_STATE_FAILED:
        assert (done.error.code, done.error.message) == (8, STOCKOUT)
        assert "workerpool0-0" not in logs


@pytest.mark.parametrize(
    ("how", "status"), [(["--signal", str(int(signal.SIGABRT))], 134), (["--exit-code", "139"], 139)]
)
def test_sigabrt_and_sigsegv_exits_restart_the_job_up_to_three_times(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, tmp_path: Path, how: list[str], status: int
):
    """Guards issue 12 point 4: exits 134 (SIGABRT) and 139 (SIGSEGV) restart the job, 3 times at most."""
    recovers, keeps_crashing = tmp_path / "recovers", tmp_path / "keeps-crashing"
    recovering = create(job_client, custom_job(pool("--runs-file", str(recovers), "--fail-first", "3", *how)))
    crashing = create(job_client, custom_job(pool("--runs-file", str(keeps_crashing), *how)))

    assert wait_for_state(job_client, recovering.name, timeout=60).state == JobState.JOB_STATE_SUCCEEDED
    failed = wait_for_state(job_client, crashing.name, timeout=60)

    assert runs(recovers) == 4
    assert runs(keeps_crashing) == 4
    assert failed.state == JobState.JOB_STATE_FAILED
    assert failed.error.message.startswith(f"The replica workerpool0-0 exited with a non-zero status of {status}.")


def test_other_non_zero_exits_are_not_retried(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, tmp_path: Path
):
    """Guards issue 12 point 4: only the crash statuses Vertex lists are retried."""
    job = create(job_client, custom_job(pool("--runs-file", str(tmp_path / "runs"), "--exit-code", "1")))

    assert wait_for_state(job_client, job.name, timeout=30).state == JobState.JOB_STATE_FAILED
    assert runs(tmp_path / "runs") == 1


def test_disable_retries_turns_off_vertex_restarts(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, tmp_path: Path
):
    """Guards issue 12 point 4: with scheduling.disable_retries no preemption, crash or stockout is retried,
    and restart_job_on_worker_restart is overridden."""
    spot = create(
        job_client,
        custom_job(pool("--sleep", "120"), strategy="SPOT", disable_retries=True, restart_on_worker_restart=True),
    )
    crash = create(
        job_client, custom_job(pool("--runs-file", str(tmp_path / "runs"), "--exit-code", "134"), disable_retries=True)
    )
    jobservice_control.stock_out_next(count=1)
    stockout = create(job_client, custom_job(pool(), disable_retries=True))

    wait_for_state(job_client, spot.name, [JobState.JOB_STATE_RUNNING])
    wait_for_attempt(jobservice_control, spot.name, 1)
    jobservice_control.preempt(spot.name)

    for job in (spot, stockout):
        done = wait_for_state(job_client, job.name, timeout=30)
        assert (done.state, done.error.code, done.error.message) == (JobState.JOB_STATE_FAILED, 8, STOCKOUT)
    assert wait_for_state(job_client, crash.name, timeout=30).state == JobState.JOB_STATE_FAILED
    assert runs(tmp_path / "runs") == 1
