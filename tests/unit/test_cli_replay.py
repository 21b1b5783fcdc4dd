"""`trainctl replay --dry-run`: a recorded event through the real handlers, nothing leaving the process."""

import json
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


def test_a_day_of_markers_shows_what_the_rules_policies_would_have_started():
    """Issue 42, point 6: ten partitions in 30 s and three lone ones later, under a 20 s quiet window: the replay's
    clock follows the events, so the burst's window closes 20 s after its last marker and each lone marker's alone."""
    day = ROOT / "examples/events/day-of-markers.jsonl"
    result = replay(str(day), "--dry-run", "--rules", str(ROOT / "examples/policies/coalescing-rules.yaml"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "replayed 13 events under 1 trigger rule (dry run)"
    assert sum(line.endswith("  coalesced") for line in lines) == 13
    (burst,) = [line for line in lines if " 10 markers → one run " in line]
    assert burst.startswith("02:00:47  window of gs://trainctl-local-trainctl-data/churn/ closed")
    assert "on gs://trainctl-local-trainctl-data/churn/2026-11-21/part-09/ (submitted)" in burst
    assert [line[:8] for line in lines if "1 marker → one run" in line] == ["06:00:20", "12:00:20", "18:00:20"]
    assert lines[-1] == "13 markers → 4 runs (9 coalesced into 4 windows)"


def test_a_day_of_markers_under_rules_without_a_policy_starts_a_run_per_marker(tmp_path):
    rules = tmp_path / "rules.json"
    template = {"dataset": {"target": "y"}, "trainer": {"builtin": "tabular"}}
    template["resources"] = {"machine_type": "g2-standard-24"}
    rules.write_text(json.dumps({"gs://trainctl-local-trainctl-data/churn/": template}))
    result = replay(str(ROOT / "examples/events/day-of-markers.jsonl"), "--dry-run", "--rules", str(rules))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "13 markers → 13 runs (0 coalesced into 0 windows)"


def test_several_events_are_replayed_only_as_a_dry_run():
    result = replay(str(ROOT / "examples/events/day-of-markers.jsonl"))
    assert result.returncode != 0
    assert "replaying several events needs --dry-run" in result.stdout + result.stderr
