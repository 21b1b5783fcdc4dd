"""Your own code without an image (issue 31, acceptance): `trainctl submit --source` of the two-node DDP package in
examples/ on the local stack, and the stock `gcloud ai custom-jobs create --config` with the pythonPackageSpec that
`trainctl plan --gcloud` exports."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path

import pytest
import yaml

from local.processes import wait_until
from tests.e2e.running_stack import RunningStack
from tests.integration.deployment import SHARED_DATASET

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "examples" / "ddp-package"


def package_request(tmp_path: Path, request_id: str, uris: list[str] | None = None) -> Path:
    document = yaml.safe_load((PACKAGE / "request.yaml").read_text())
    document["request_id"] = request_id
    document["dataset"]["uri"] = SHARED_DATASET
    document["trainer"]["args"] = ["--epochs", "3"]
    if uris is not None:
        document["trainer"]["python_package"]["uris"] = uris
    path = tmp_path / f"{request_id}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_submit_source_runs_a_two_node_ddp_package_and_reuses_the_upload(stack: RunningStack, tmp_path: Path):
    """Issue 31, points 2, 3 and 5: the folder becomes a content-addressed sdist, the package is installed per job
    without network and runs on two nodes with Vertex's environment; its metrics.json reaches `succeeded`, the code's
    digest is in `accepted` and `submitted`; a resubmission of the same code reuses the uploaded object."""
    first_id = f"own-code-{uuid.uuid4().hex[:8]}"
    first = stack.trainctl("submit", str(package_request(tmp_path, first_id)), "--source", str(PACKAGE),
                           "--wait", "--json", "--timeout", "170", timeout=200)  # fmt: skip

    assert first.returncode == 0, first.stdout + first.stderr
    uploaded = first.stdout.splitlines()[0]
    assert uploaded.startswith(f"uploaded {PACKAGE} as gs://"), uploaded
    uri = uploaded.split(" as ", 1)[1]
    digest = uri.split("/sha256-", 1)[1].split("/", 1)[0]
    events = {event["state"]: event for event in map(json.loads, first.stdout.splitlines()[2:])}
    assert list(events) == ["accepted", "submitted", "running", "succeeded"]
    assert events["accepted"]["code_digest"] == events["submitted"]["code_digest"] == f"sha256:{digest}"
    metrics = events["succeeded"]["metrics"]
    assert metrics["world_size"] == 2 and metrics["epochs"] == 3  # two nodes, one DDP process each
    assert "custom-runs/" in events["succeeded"]["artifacts"]["model_dir"]

    assert upload_only(stack, tmp_path) == uri  # the same code: the same object, not uploaded again


def upload_only(stack: RunningStack, tmp_path: Path) -> str:
    """`submit --source` with a request refused after the upload (an id no request may have): the package's URI,
    and no job to wait for."""
    refused = stack.trainctl("submit", str(package_request(tmp_path, "Not_An_Id")), "--source", str(PACKAGE))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    reused = refused.stdout.splitlines()[0]
    assert reused.startswith(f"{PACKAGE} is unchanged: reusing gs://") or reused.startswith(f"uploaded {PACKAGE}")
    return reused.rsplit(" ", 1)[1]


def test_gcloud_runs_the_exported_python_package_spec(stack: RunningStack, tmp_path: Path):
    """Issue 31, point 1 (acceptance): `trainctl plan --gcloud` exports pythonPackageSpec, and the stock gcloud
    creates the job from it unchanged; the local JobService installs and runs the package to SUCCEEDED."""
    path = package_request(tmp_path, f"own-code-gcloud-{uuid.uuid4().hex[:8]}", [upload_only(stack, tmp_path)])

    printed = stack.trainctl("plan", str(path), "--gcloud", str(tmp_path / "gcloud"))
    assert printed.returncode == 0, printed.stdout + printed.stderr
    config = yaml.safe_load((tmp_path / "gcloud" / "config.yaml").read_text())
    assert all("pythonPackageSpec" in pool for pool in config["workerPoolSpecs"])
    command = printed.stdout.strip().splitlines()[-1]
    created = stack.shell(f"{command} --format=json")
    assert created.returncode == 0, created.stdout + created.stderr
    name = json.loads(created.stdout)["name"]

    def job():
        return next(job for job in stack.jobs() if job.name == name)

    ends = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")
    assert wait_until(lambda: job().state.name in ends, timeout=170, interval=1.0)
    assert job().state.name == "JOB_STATE_SUCCEEDED", job().error.message
    assert shlex.split(command)[:4] == ["gcloud", "ai", "custom-jobs", "create"]
