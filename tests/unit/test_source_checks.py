"""`submit --source` and `validate --source` read the packed folder as Vertex's nodes will install it (issue 40,
points 9 and 10): what pip installs with it, what of the executor's torch and CUDA that would replace, and code the
executor's Python 3.10 cannot run, refused (before any upload) naming the file and the line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.executors import EXECUTORS
from trainctl.source_package import build_source_archive, inspect_source

ROOT = Path(__file__).parents[2]
REQUEST = {
    "api_version": "trainctl/v1",
    "request_id": "own-code",
    "dataset": {"uri": "gs://data-bucket/d/", "target": "y"},
    "trainer": {"python_package": {"module": "newpy.train", "executor": "pytorch-2.4"}},
    "resources": {"machine_type": "g2-standard-24"},
}


def folder(root: Path, train: str, dependencies: list[str]) -> Path:
    (root / "newpy").mkdir(parents=True)
    (root / "newpy" / "__init__.py").write_text("")
    (root / "newpy" / "train.py").write_text(train)
    listed = ", ".join(f'"{d}"' for d in dependencies)
    (root / "pyproject.toml").write_text(f'[project]\nname = "newpy"\nversion = "1"\ndependencies = [{listed}]\n')
    return root


def trainctl(*args: str) -> subprocess.CompletedProcess:
    """trainctl with a deployment's settings (TRAINCTL_*) and no network to reach: what it says before uploading."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")} | {
        "TRAINCTL_PROJECT": "p",
        "TRAINCTL_CONTROL_BUCKET": "c",
        "TRAINCTL_EVENTS_TOPIC": "e",
        "TRAINCTL_TRAINER_IMAGE": "us-docker.pkg.dev/p/t/trainer:1",
        # A name that never resolves (RFC 2606): an upload would fail loudly. Not a closed port on this machine: that
        # is a stopped local stack's, which trainctl says before anything else (issue 44).
        "STORAGE_EMULATOR_HOST": "http://storage.invalid:9",
        "TRAINCTL_ALLOW_PYTHON_PACKAGES": "true",
    }
    return subprocess.run(
        [sys.executable, "-m", "trainctl", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_the_report_lists_what_pip_installs_and_what_would_replace_the_executors_torch(tmp_path: Path):
    source = folder(tmp_path / "src", "import json\n", ["einops>=0.8", "torch>=2.6", "torchvision"])
    report = inspect_source(build_source_archive(source), EXECUTORS["pytorch-2.4"])
    assert report.problems == []
    assert report.lines == [
        "newpy-1.tar.gz: pip installs it on every node with its requirements (pyproject.toml [project] dependencies): "
        "einops>=0.8, torch>=2.6, torchvision; what the executor holds at a fitting version is kept, the rest is "
        "fetched from PyPI",
        "  warning: torch>=2.6: the executor pytorch-2.4 holds PyTorch 2.4 (CUDA 12.x); pip on every node replaces it "
        "with PyPI's torch, whose CUDA build may not match the machine's driver. Leave the version open to the "
        "executor's (or choose an executor that has it)",
    ]


def test_submit_source_refuses_code_the_executors_python_cannot_run_before_uploading_it(tmp_path: Path):
    """The refusal names the file and the line; nothing is uploaded (the storage endpoint is a closed port, which
    an upload attempt would report instead)."""
    source = folder(tmp_path / "src", "import tomllib\ntry:\n    pass\nexcept* ValueError:\n    pass\n", ["einops"])
    request = tmp_path / "request.json"
    request.write_text(json.dumps(REQUEST))

    result = trainctl("submit", str(request), "--source", str(source))

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{source}: newpy/train.py, line 5: Exception groups are only supported in Python 3.11 and greater (the "
        "executor runs Python 3.10)",
        f"{source}: the executor cannot run this code, not submitted",
    ]
    assert "newpy-1.tar.gz: pip installs it on every node with its requirements" in result.stderr
    assert "newpy/train.py, line 1: tomllib is new in Python 3.11" in result.stderr


@pytest.mark.parametrize(
    ("train", "code", "said"),
    [
        ("print('fine')\n", 0, "request.json: ok, with"),
        ("def f[T](x: T) -> T:\n    return x\n", 2, "newpy/train.py, line 1: expected '('"),
    ],
)
def test_validate_source_checks_the_package_without_uploading_it(tmp_path: Path, train: str, code: int, said: str):
    source = folder(tmp_path / "src", train, [])
    request = tmp_path / "request.json"
    request.write_text(json.dumps(REQUEST))

    result = trainctl("validate", str(request), "--source", str(source))

    assert result.returncode == code, result.stdout
    assert "newpy-1.tar.gz: no requirements (pyproject.toml [project] dependencies)" in result.stdout
    assert said in result.stdout
