"""`trainctl replay --dry-run`: a recorded event through the real handlers, nothing leaving the process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINCTL_", "PUBSUB_", "STORAGE_"))}


def replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainctl", "replay", *args], capture_output=True, text=True, env=ENV, timeout=60
    )


def test_a_recorded_request_shows_claim_plan_and_events_without_side_effects():
    result = replay(str(ROOT / "examples/events/request-push.json"), "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "into request" in out
    assert "claimed" in out
    assert "dry run: would publish trainctl.job.v1.accepted" in out
    assert "dry run: would create CustomJob" in out
    assert '"machine_type": "a2-highgpu-2g"' in out
    assert "dry run: would publish trainctl.job.v1.submitted" in out
    assert out.rstrip().endswith("outcome: submitted")


def test_a_recorded_invalid_request_is_rejected_with_its_fields(tmp_path):
    event = tmp_path / "bad.json"
    event.write_text(
        '{"message": {"data": "eyJhcGlfdmVyc2lvbiI6ICJ0cmFpbmN0bC92MSJ9", "messageId": "9", '
        '"publishTime": "2020-01-01T10:00:00Z"}}'
    )  # data: {"api_version": "trainctl/v1"}, recorded long ago
    result = replay(str(event), "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    assert "dry run: would publish trainctl.job.v1.rejected" in result.stdout
    assert "request_id: required field is missing" in result.stdout
    assert "would create" not in result.stdout
