"""The local JobService keeps its jobs across restarts (state in --state-dir): after a crash the nodes
keep running and the restarted server adopts them, even those that ended while it was down; after a
clean stop the running jobs have failed and their nodes are gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1 import JobState
from google.rpc import code_pb2
from job_specs import PARENT, custom_job, pool

from functions.cloud.failures import classify_job_failure
from local.jobservice.client import wait_for_state
from local.jobservice.standalone import JobServiceProcess
from local.processes import process_alive, wait_until

pytestmark = pytest.mark.integration


def node_pid(pid_dir: Path) -> int:
    pid_file = pid_dir / "workerpool0-0.pid"
    assert wait_until(pid_file.exists, 20)
    return int(pid_file.read_text())


def test_after_a_crash_the_restarted_server_adopts_running_and_finished_nodes(
    private_jobservice: Callable[..., JobServiceProcess], tmp_path: Path
):
    service = private_jobservice()
    client = service.client()
    dirs = {name: tmp_path / name for name in ("keeps-running", "ends-while-down")}
    keeps_running = client.create_custom_job(
        parent=PARENT,
        custom_job=custom_job(pool("--pid-dir", str(dirs["keeps-running"]), "--until-file", str(tmp_path / "go-1"))),
    )
    ends_while_down = client.create_custom_job(
        parent=PARENT,
        custom_job=custom_job(
            pool("--pid-dir", str(dirs["ends-while-down"]), "--until-file", str(tmp_path / "go-2"), "--exit-code", "3")
        ),
    )
    for job in (keeps_running, ends_while_down):
        wait_for_state(client, job.name, [JobState.JOB_STATE_RUNNING])
    pids = {name: node_pid(path) for name, path in dirs.items()}

    service.control.crash()
    assert wait_until(lambda: not service.running(), 10)
    (tmp_path / "go-2").touch()
    assert wait_until(lambda: not process_alive(pids["ends-while-down"]), 10)
    assert process_alive(pids["keeps-running"])
    service.restart()
    client = service.client()

    assert wait_for_state(client, ends_while_down.name).error.message.startswith(
        "The replica workerpool0-0 exited with a non-zero status of 3."
    )
    assert client.get_custom_job(name=keeps_running.name).state == JobState.JOB_STATE_RUNNING
    (tmp_path / "go-1").touch()
    assert wait_for_state(client, keeps_running.name).state == JobState.JOB_STATE_SUCCEEDED


def test_a_job_held_in_queue_is_still_queued_after_a_restart(private_jobservice: Callable[..., JobServiceProcess]):
    service = private_jobservice()
    service.control.hold_next_in_queue(seconds=120)
    queued = service.client().create_custom_job(parent=PARENT, custom_job=custom_job(pool()))

    service.kill()
    service.restart()
    client = service.client()

    assert client.get_custom_job(name=queued.name).state == JobState.JOB_STATE_QUEUED
    client.cancel_custom_job(name=queued.name)
    assert wait_for_state(client, queued.name, timeout=10).state == JobState.JOB_STATE_CANCELLED


def test_a_clean_stop_fails_running_jobs_and_stops_their_nodes(
    private_jobservice: Callable[..., JobServiceProcess], tmp_path: Path
):
    service = private_jobservice()
    running = service.client().create_custom_job(
        parent=PARENT, custom_job=custom_job(pool("--pid-dir", str(tmp_path), "--sleep", "120"))
    )
    pid = node_pid(tmp_path)

    service.stop()
    assert not process_alive(pid)
    service.restart()

    stopped = service.client().get_custom_job(name=running.name)
    assert stopped.state == JobState.JOB_STATE_FAILED
    assert "stopped while the job was running" in stopped.error.message
    # As Vertex reports a job whose machines went away: an internal error, which the controller retries.
    assert stopped.error.code == code_pb2.INTERNAL
    assert stopped.error.message.startswith("Internal error occurred for the current attempt")
    assert classify_job_failure(stopped.error.code, stopped.error.message, started=True) == "internal"
