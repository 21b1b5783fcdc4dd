"""trainer/Dockerfile cannot be built here (no Docker engine), so it is linted with hadolint and checked for
what Vertex needs: a CUDA PyTorch base of the pinned release, the Reduction Server plugin, the entry point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "trainer" / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


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
