"""trainer/Dockerfile cannot be built here (no Docker engine), so it is linted with hadolint and checked for
what Vertex needs: a CUDA PyTorch base of the pinned release, the Reduction Server plugin, the entry point; and its
COPY lines are played into a folder, from which every module of the trainer, its subpackages' included, imports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "trainer" / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")  # .dockerignore's patterns that a trainer/ file can match


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(HADOLINT), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_dockerfile_passes_hadolint():
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_read_our_rules(tmp_path):
    """Without the documented exception the unpinned apt package is reported, so the lint above is real."""
    stripped = tmp_path / "Dockerfile"
    stripped.write_text(DOCKERFILE.read_text().replace("# hadolint ignore=DL3008\n", ""))
    result = hadolint(stripped)
    assert result.returncode != 0 and "DL3008" in result.stdout


def test_image_is_cuda_pytorch_of_the_pinned_release_with_reduction_server_and_launch_entrypoint():
    text = DOCKERFILE.read_text()
    pinned = re.search(r"^torch==([\d.]+)$", (REPO / "trainer" / "requirements.txt").read_text(), re.M).group(1)
    assert re.search(rf"^FROM pytorch/pytorch:{re.escape(pinned)}-cuda[\d.]+-cudnn\d+-runtime$", text, re.M)
    assert "apt-get install -y --no-install-recommends google-reduction-server" in text
    assert "packages.cloud.google.com/apt google-fast-socket main" in text
    assert text.rstrip().endswith('ENTRYPOINT ["python", "-m", "trainer.launch"]')


def copy_as_the_image_does(workdir: Path) -> None:
    """What the Dockerfile's COPY lines put under its WORKDIR, taken from the repository root (the build context)."""
    copies = re.findall(r"^COPY (\S+) (\S+)$", DOCKERFILE.read_text(), re.M)
    assert copies, "the Dockerfile copies nothing"
    for source, target in copies:
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, workdir / target, ignore=IGNORED, dirs_exist_ok=True)
        else:
            (workdir / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / source, workdir / target)


def test_the_image_carries_every_trainer_module_and_each_imports_from_it(tmp_path):
    """Issue 39, point 6: the trainer has subpackages now. The image's /app is rebuilt from the COPY lines, and
    every module of the trainer (the entry points `python -m trainer.launch`, `.train`, `.serve`, `.predict` among
    them) is imported from there alone: each must be found in the copy, none in the repository."""
    app = tmp_path / "app"
    copy_as_the_image_does(app)
    python_files = {str(p.relative_to(REPO)) for p in (REPO / "trainer").rglob("*.py")}
    assert {str(p.relative_to(app)) for p in (app / "trainer").rglob("*.py")} == python_files
    names = sorted(".".join(Path(f).with_suffix("").parts).removesuffix(".__init__") for f in python_files)
    assert {"trainer.launch", "trainer.train", "trainer.serve", "trainer.predict"} <= set(names)
    script = (
        "import importlib, json, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps({n: m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'trainer'}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the working directory, as in the image
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, cwd=app, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert set(loaded) == set(names)
    assert {n: f for n, f in loaded.items() if not Path(f).is_relative_to(app)} == {}
