"""A real PyTorch DDP program (gloo) run by the local JobService as 2 nodes × 2 processes: each node
runs torchrun from the Vertex environment alone, and the 4 ranks all-reduce across both nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import DDP_PROGRAM, PARENT, custom_job, pool

from local.jobservice.client import JobServiceControl, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_nodes_of_two_processes_all_reduce_across_four_ranks(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, tmp_path: Path
):
    node = pool(command=["python", DDP_PROGRAM, str(tmp_path)], image="localhost/tests/ddp:latest", count=2)
    created = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(node, node))

    done = wait_for_state(job_client, created.name, timeout=240)

    logs = jobservice_control.replica_logs(created.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, Path(logs["workerpool0-0"]).read_text()[-3000:]
    results = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank-*.json"))]
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert {r["world_size"] for r in results} == {4}
    assert {r["sum"] for r in results} == {1.0 + 2.0 + 3.0 + 4.0}
