"""Vertex AI's own clients on the local stack, from a shell that ran `eval "$(trainctl local env)"`: the stock
`gcloud ai custom-jobs` (create from `trainctl plan --gcloud`, describe, list --filter, cancel, stream-logs) and
the Vertex SDK example of examples/vertex_sdk/, with only `aiplatform.init` arguments added. Jobs they start
without trainctl's labels run like any job, and the controller leaves them alone."""

from __future__ import annotations

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from local.jobservice.client import job_service_client, wait_for_state
from local.names import LOCAL_PROJECT
from local.processes import wait_until
from tests.conftest import REPO_ROOT
from tests.docs import doc
from tests.e2e.running_stack import RunningStack
from tests.integration.deployment import FAKE_NODE_IMAGE, fake_node_request

pytestmark = pytest.mark.integration

SDK_EXAMPLE = REPO_ROOT / "examples" / "vertex_sdk" / "custom_job.py"
_CREATED = re.compile(r"CustomJob \[(projects/[^\]]+/customJobs/([0-9]+))\] is submitted successfully")


def created_job(output: str) -> tuple[str, str]:
    """(name, id) of the job `gcloud ai custom-jobs create` reports (on stderr)."""
    match = _CREATED.search(output)
    assert match, output
    return match[1], match[2]


def foreign_job_command(display_name: str, *args: str) -> str:
    """`gcloud ai custom-jobs create` with flags only: no trainctl labels, one node of the test image."""
    spec = f"machine-type=n1-standard-8,replica-count=1,container-image-uri={FAKE_NODE_IMAGE}:1"
    command = f'gcloud ai custom-jobs create --region="$TRAINCTL_REGION" --display-name={display_name} '
    command += f"--worker-pool-spec={spec}"
    return command + (f" --args={','.join(args)}" if args else "")


def test_gcloud_runs_the_planned_two_node_job_then_describes_lists_streams_and_cancels(
    stack: RunningStack, tmp_path: Path
):
    """Guards issue 13 acceptance (a), items 1 and 2: `trainctl plan --gcloud` then the stock `gcloud ai
    custom-jobs create --config` starts a 2-node job that succeeds; describe, list --filter, stream-logs and
    cancel work through the REST mapping and the Logging stand-in that `trainctl local env` points gcloud at."""
    request_id = f"gcloud-plan-{uuid.uuid4().hex[:8]}"
    request = fake_node_request(
        request_id, "--sleep", "0.5", resources={"machine_type": "g2-standard-24", "replica_count": 2}
    )
    (tmp_path / "request.json").write_text(json.dumps(request))

    planned = stack.shell(f"trainctl plan {tmp_path / 'request.json'} --gcloud {tmp_path / 'gcloud'}")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    submit = planned.stdout.split("submit it with:\n", 1)[1].strip()
    assert submit.startswith("gcloud ai custom-jobs create ")
    created = stack.shell(submit)  # the printed command, as a user would paste it
    assert created.returncode == 0, created.stdout + created.stderr
    name, job_id = created_job(created.stderr)
    client = job_service_client(stack.state.jobservice_address)
    assert wait_for_state(client, name, timeout=120).state.name == "JOB_STATE_SUCCEEDED"

    region = '--region="$TRAINCTL_REGION"'
    # gcloud's stream-logs reads the job once as it starts, then decides whether to go on every 10 s, the first
    # time that can stop it being at 10 s (command_lib/ai/log_util._CONTINUE_INTERVAL, api_lib/ai/custom_jobs/
    # client.CheckJobComplete): ~10 s even for an ended job. Started once the job has ended (else it would not
    # stop), it streams while the other commands run.
    with ThreadPoolExecutor(max_workers=1) as background:
        streaming = background.submit(
            stack.shell, f"gcloud ai custom-jobs stream-logs {job_id} {region} --polling-interval=1", timeout=120
        )

        described = stack.shell(f"gcloud ai custom-jobs describe {job_id} {region} --format=json")
        assert described.returncode == 0, described.stderr
        job = json.loads(described.stdout)
        assert job["state"] == "JOB_STATE_SUCCEEDED"
        assert [pool.get("replicaCount") for pool in job["jobSpec"]["workerPoolSpecs"][:2]] == ["1", "1"]
        assert job["labels"]["trainctl_request"] == request_id
        listed = stack.shell(
            f"gcloud ai custom-jobs list {region} --filter='labels.trainctl_request={request_id}' "
            "--format='value(name)'"
        )
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == [name]

        second = stack.shell(foreign_job_command("to-cancel", "--sleep", "120"))
        assert second.returncode == 0, second.stdout + second.stderr
        second_name, second_id = created_job(second.stderr)
        cancelled = stack.shell(f"gcloud ai custom-jobs cancel {second_id} {region}")
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert wait_for_state(client, second_name, timeout=60).state.name == "JOB_STATE_CANCELLED"
        again = stack.shell(f"gcloud ai custom-jobs cancel {second_id} {region}")
        assert again.returncode != 0
        assert "FAILED_PRECONDITION" in again.stderr

        streamed = streaming.result()
    assert streamed.returncode == 0, streamed.stderr
    rows = [line.split("\t") for line in streamed.stdout.splitlines()]
    printed = {(row[2], row[3]) for row in rows if len(row) == 4}
    for node in ("workerpool0-0", "workerpool1-0"):
        assert any(task == node and message.startswith(f"fake node {node} started") for task, message in printed), rows
    assert ("service", "JOB_STATE_SUCCEEDED") in printed


def test_a_job_gcloud_starts_without_trainctl_labels_runs_and_the_controller_leaves_it_alone(stack: RunningStack):
    """Guards issue 13 item 4: a foreign job runs to success; on_job_state sees it and ignores it; it reaches
    neither the ledger nor the events."""
    with stack.watch() as watch:
        created = stack.shell(foreign_job_command("foreign", "--sleep", "0.2"))
        assert created.returncode == 0, created.stdout + created.stderr
        name, job_id = created_job(created.stderr)
        client = job_service_client(stack.state.jobservice_address)
        assert wait_for_state(client, name, timeout=120).state.name == "JOB_STATE_SUCCEEDED"

        def ignored() -> bool:
            return any(
                entry.get("job_id") == job_id and entry["message"] == "not a trainctl job; ignored"
                for entry in stack.log_entries("on_job_state")
            )

        assert wait_until(ignored, timeout=60), stack.log_entries("on_job_state")[-5:]

    assert not [event for event in watch.events if job_id in json.dumps(event)]
    bucket = ledger_bucket(stack)
    records = [blob.download_as_text() for blob in bucket.list_blobs(prefix="ledger/")]
    assert not [record for record in records if job_id in record]


def test_the_vertex_sdk_example_runs_to_succeeded_with_the_vertex_environment(stack: RunningStack, tmp_path: Path):
    """Guards issue 13 item 3 and acceptance (b): the SDK example with the documented `aiplatform.init`
    arguments runs to JOB_STATE_SUCCEEDED, its nodes see the Vertex environment, and docs/local.md shows it as is."""
    env_dir = tmp_path / "env"

    # Every node records its environment, then waits for the worker's record: the chief cannot end the job first.
    node_args = f"--record-env {env_dir} --until-file {env_dir / 'workerpool1-0.json'}"
    ran = stack.shell(f"python {SDK_EXAMPLE} {FAKE_NODE_IMAGE}:1 {node_args}", timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    name, state = ran.stdout.split()[-2:]
    assert state == "JOB_STATE_SUCCEEDED"
    nodes = {path.stem: json.loads(path.read_text()) for path in env_dir.glob("*.json")}
    assert set(nodes) == {"workerpool0-0", "workerpool1-0"}
    chief = nodes["workerpool0-0"]
    assert chief["WORLD_SIZE"] == "2" and chief["RANK"] == "0"
    assert chief["CLOUD_ML_JOB_ID"] == name.rsplit("/", 1)[1]
    control_bucket = stack.state.names["control_bucket"]
    assert chief["AIP_MODEL_DIR"].startswith(f"gs://{control_bucket}/aiplatform-custom-job-")
    assert json.loads(chief["CLUSTER_SPEC"])["cluster"]["workerpool1"]
    page = doc("local.md")  # "Using gcloud and the Vertex SDK locally"
    source = SDK_EXAMPLE.read_text()
    assert source[source.index("import os") :] in page  # the code docs/local.md shows is the code that ran


def ledger_bucket(stack: RunningStack) -> storage.Bucket:
    client = storage.Client(
        project=LOCAL_PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": stack.state.storage_url},
    )
    return client.bucket(stack.state.names["control_bucket"])
