"""Stopping the local stack leaves no process behind: the Pub/Sub emulator's Java child, fake-gcs-server,
the JobService and every node of a job that was still running. (tests/conftest.py also checks, after
the whole session, that nothing the session started is left.)"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1 import JobState
from job_specs import PARENT, custom_job, pool

from local.fake_gcs import start_fake_gcs
from local.jobservice.client import wait_for_state
from local.jobservice.standalone import start_jobservice_process
from local.processes import SESSION_MARKER_VAR, leftover_processes, wait_until
from local.pubsub_emulator import start_pubsub_emulator

pytestmark = pytest.mark.integration


def test_stopping_the_stack_leaves_no_emulator_server_or_job_process(tmp_path: Path):
    marker = uuid.uuid4().hex
    env = {**os.environ, SESSION_MARKER_VAR: marker}
    pubsub = start_pubsub_emulator("cleanup-test", tmp_path / "pubsub", env=env)
    gcs = start_fake_gcs(tmp_path / "gcs", pubsub=pubsub, env=env)
    jobservice = start_jobservice_process(
        tmp_path / "jobservice", env=env, extra_args=["--workdir", str(Path(__file__).parents[2])]
    )
    job = custom_job(
        pool("--sleep", "120", command=["python", "tests/local/programs/fake_node.py"]),
        pool("--sleep", "120", command=["python", "tests/local/programs/fake_node.py"]),
    )
    client = jobservice.client()
    running = client.create_custom_job(parent=PARENT, custom_job=job)
    wait_for_state(client, running.name, [JobState.JOB_STATE_RUNNING])
    commands = " ".join(leftover.command for leftover in leftover_processes(marker))
    assert "java" in commands and "fake-gcs-server" in commands and "node_agent.py" in commands

    jobservice.stop()
    gcs.stop()
    pubsub.stop()

    assert wait_until(lambda: not leftover_processes(marker), 5), leftover_processes(marker)
