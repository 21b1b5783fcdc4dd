"""`trainctl local up --allow-image-prefix` takes the same prefixes as the deployed controller, and says so
before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from local.stack_state import LOCAL_DIR_VAR
from tests.conftest import REPO_ROOT


def test_local_up_refuses_a_prefix_that_could_never_match_before_anything_starts(tmp_path: Path):
    """Guards issue 24, point 2 (local side): the mistake is named by `trainctl local up`, not by four functions
    failing to read their settings."""
    done = subprocess.run(
        [sys.executable, "-m", "trainctl", "local", "up", "--allow-image-prefix", "localhost/demo/*"],
        env={**os.environ, LOCAL_DIR_VAR: str(tmp_path / "local")},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--allow-image-prefix: 'localhost/demo/*' is not an image prefix" in done.stderr
