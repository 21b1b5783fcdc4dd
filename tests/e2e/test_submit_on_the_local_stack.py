"""`trainctl submit`, `status`, `local logs` and `cancel` against a running local stack: requests go through
the requests topic's push subscription to on_job_request, jobs run on the local JobService, and the
lifecycle events come back through the events topic."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.e2e.running_stack import RunningStack
from tests.integration.deployment import fake_node_request

pytestmark = pytest.mark.integration


def request_file(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / f"{document.get('request_id', 'request')}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_submit_wait_follows_a_request_until_it_succeeded(stack: RunningStack, tmp_path: Path):
    request_id = unique("submit-wait")
    path = request_file(tmp_path, fake_node_request(request_id, "--sleep", "0.5", "--metrics", '{"accuracy": 0.9}'))

    submitted = stack.trainctl("submit", str(path), "--wait", "--timeout", "150")

    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    lines = submitted.stdout.splitlines()
    assert lines[0].startswith(f"published {path} as message ")
    assert [line.split()[1] for line in lines[1:]] == ["accepted", "submitted", "running", "succeeded"]
    assert all(request_id in line for line in lines[1:])
    assert "accuracy 0.9" in lines[-1]  # the metrics the job wrote, shown with `succeeded`
    (job,) = stack.jobs_of(request_id)
    status = json.loads(stack.trainctl("status", request_id, "--json").stdout)
    assert status["state"] == "succeeded"
    assert status["job"] == job.name


def test_an_invalid_file_is_refused_before_anything_is_published(stack: RunningStack, tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "api_version: trainctl/v1\nrequest_id: Bad_ID\ndataset: {uri: 's3://elsewhere/data', target: y}\n"
        "trainer: {builtin: tabular}\nresources: {machine_type: a2-highgpu-2g, accelerator_count: 4}\n"
    )
    control_id = unique("after-refusal")
    with stack.watch() as watch:
        refused = stack.trainctl("submit", str(path), "--wait")
        # A valid request through the same topic: by the time it has run, a rejection of the refused file
        # (which takes the server a few milliseconds) would have been published long before.
        control = request_file(tmp_path, fake_node_request(control_id))
        assert stack.trainctl("submit", str(control)).returncode == 0
        watch.wait_for(lambda event: event["request_id"] == control_id and event["state"] == "succeeded")

    assert refused.returncode == 2
    assert refused.stdout.splitlines() == [
        f"{path}: invalid, not submitted",
        "  request_id: must be 1-128 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit, "
        "got 'Bad_ID'",
        "  dataset.uri: must be a gs://bucket/path URI, got 's3://elsewhere/data'",
        "  resources.accelerator_count: a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 4",
    ]
    # Nothing about the refused file; the stack is shared, so another module's late events are no concern here.
    assert not [event for event in watch.events if event["state"] == "rejected" or event["request_id"] == "Bad_ID"]


def test_with_no_validate_the_server_rejects_the_file_and_submit_shows_why(stack: RunningStack, tmp_path: Path):
    request_id = unique("server-side")
    document = fake_node_request(request_id, resources={"machine_type": "a2-highgpu-2g", "accelerator_count": 3})
    path = request_file(tmp_path, document)

    rejected = stack.trainctl("submit", str(path), "--no-validate", "--wait", "--timeout", "120")

    assert rejected.returncode == 2, rejected.stdout + rejected.stderr
    published, event, *errors = rejected.stdout.splitlines()
    assert published.startswith(f"published {path} as message ")
    assert event.split()[1:3] == ["rejected", request_id]
    assert errors == ["    resources.accelerator_count: a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 3"]
    assert stack.jobs_of(request_id) == []


def test_submit_wait_reports_its_own_outcome_when_someone_elses_document_names_its_request_id(
    stack: RunningStack, tmp_path: Path
):
    """Issue 38, attack 5: while the victim's `submit --wait` follows its request, an invalid document naming the same
    request_id is published; before, the victim printed `rejected` and exited 2 while its job went on to succeed. The
    forgery is published as its own delivery's rejection, marked, and the victim's wait ends with its own success."""
    request_id = unique("victim")
    release = tmp_path / "release"  # the victim's job runs until the forgery has been answered
    victim = request_file(tmp_path, fake_node_request(request_id, "--until-file", str(release)))
    invalid = fake_node_request(request_id, resources={"machine_type": "a2-highgpu-2g", "accelerator_count": 3})
    forged = tmp_path / "forged.yaml"
    forged.write_text(yaml.safe_dump(invalid))
    with stack.watch() as watch:
        waiting = subprocess.Popen(
            ["trainctl", "submit", str(victim), "--wait", "--timeout", "150"],
            env=stack.env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "running")
            assert stack.trainctl("submit", str(forged), "--no-validate").returncode == 0
            rejection = watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "rejected")
            release.touch()
            out, err = waiting.communicate(timeout=150)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.communicate()

    assert rejection["rejected_delivery"] == "unclaimed"
    assert rejection["request_key"] == f"pubsub:{rejection['delivery']}"
    assert waiting.returncode == 0, out + err
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["accepted", "submitted", "running", "succeeded"]
    status = json.loads(stack.trainctl("status", request_id, "--json").stdout)
    assert status["state"] == "succeeded"


def test_local_logs_prints_the_node_logs_of_a_job_by_request_id_or_job_id(stack: RunningStack, tmp_path: Path):
    request_id = unique("logs")
    path = request_file(tmp_path, fake_node_request(request_id, "--sleep", "0.1"))
    assert stack.trainctl("submit", str(path), "--wait", "--timeout", "150").returncode == 0
    (job,) = stack.jobs_of(request_id)

    by_request = stack.trainctl("local", "logs", request_id)
    by_job_id = stack.trainctl("local", "logs", job.name.rsplit("/", 1)[-1], "--node", "workerpool0-0")

    assert by_request.returncode == 0, by_request.stderr
    assert "==> service (" in by_request.stdout
    assert "JOB_STATE_SUCCEEDED" in by_request.stdout
    assert "fake node workerpool0-0 started with ['--sleep', '0.1']" in by_request.stdout
    assert by_job_id.stdout.splitlines()[0].startswith("==> workerpool0-0 (")
    assert "fake node workerpool0-0 started" in by_job_id.stdout
    assert "JOB_STATE_SUCCEEDED" not in by_job_id.stdout


def test_cancel_stops_a_running_job_and_cancelled_is_published(stack: RunningStack, tmp_path: Path):
    request_id = unique("cancel")
    path = request_file(tmp_path, fake_node_request(request_id, "--sleep", "600"))
    with stack.watch() as watch:
        assert stack.trainctl("submit", str(path)).returncode == 0
        watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "running")

        cancelled = stack.trainctl("cancel", request_id)
        watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "cancelled")

    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert cancelled.stdout.startswith("cancelling projects/")
    assert watch.states(request_id) == ["accepted", "submitted", "running", "cancelled"]
    (job,) = stack.jobs_of(request_id)
    assert job.state.name == "JOB_STATE_CANCELLED"
