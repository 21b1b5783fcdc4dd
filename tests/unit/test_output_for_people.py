"""What the command line prints for people: `status` in words, readable numbers, plurals, validation errors
reported all at once, and YAML syntax errors with their line and column (issue 28, point 5)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from functions.untrusted.documents import DocumentInvalid, load_document
from schemas.errors import RequestInvalid, parse_request
from schemas.events import Trigger
from tests.unit.conftest import BASE_REQUEST, make_record
from trainctl.eventstream import headline_metrics, readable
from trainctl.jobs import status_lines, summary
from trainctl.report import _lines

ROOT = Path(__file__).parents[2]


def test_status_says_the_trigger_cost_and_artifacts_in_words_not_json():
    """Guards issue 28, point 5: `trainctl status` printed the trigger, cost and artifacts as raw JSON."""
    trigger = Trigger(kind="gcs", bucket="data", object="churn/day-1/_SUCCESS", generation="17")
    lines = status_lines(summary(make_record(trigger=trigger)))
    text = "\n".join(lines)

    assert "{" not in text and '"' not in text, text
    cost = "2 GPUs on 1 node, about $1.00/h, at most $24.00 if it runs its whole timeout"
    trigger_words = ["trigger", "marker", "gs://data/churn/day-1/_SUCCESS", "(generation", "17)"]
    assert any(line.split() == trigger_words for line in lines), text
    assert any(line.startswith("cost ") and cost in line for line in lines), text
    assert any(line.split()[:3] == ["artifacts", "model", "gs://c/runs/r1/model/"] for line in lines), text
    assert any(line.split()[:2] == ["TensorBoard", "gs://c/runs/r1/logs/"] for line in lines), text
    assert any(line.startswith("created") and line.endswith("2026-11-22 12:00:00 UTC") for line in lines)


def test_numbers_read_as_people_write_them():
    """Guards issue 28, point 5: the demo summary printed `1.808e+04`."""
    assert readable(18080.4) == "18,080"
    assert readable(0.83412) == "0.8341"
    assert readable(12) == "12"
    assert readable(0.0000123) == "1.23e-05"
    assert headline_metrics({"val_rmse": 18080.4, "baseline_rmse": 23011.0}) == "val_rmse 18,080 (baseline 23,011)"


def test_the_report_counts_one_request_in_the_singular():
    """Guards issue 28, point 5: the report said `1 requests`."""
    figures = {
        "requests": 1,
        "by_state": {"succeeded": 1},
        "failures_by_reason": {},
        "success_rate": 1.0,
        "time_to_start_seconds": {"p50": 3, "p95": 3},
        "run_time_seconds": {"p50": 9, "p95": 9},
        "gpu_hours": 0.01,
        "estimated_cost_usd": 0.1,
    }
    first = _lines("all", figures)[0]
    assert first.startswith("all: 1 request  (")


def test_an_unknown_field_does_not_hide_the_other_problems():
    """Guards issue 28, point 5: validation errors arrived in layers — an unknown field hid the check of a
    machine's GPUs until it was removed."""
    doc = copy.deepcopy(BASE_REQUEST)
    doc["priority"] = "high"
    doc["resources"] = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100",
                        "accelerator_count": 3, "gpus": 2}  # fmt: skip

    with pytest.raises(RequestInvalid) as caught:
        parse_request(doc)

    paths = [error.path for error in caught.value.errors]
    assert "priority" in paths and "resources.gpus" in paths
    assert "resources.accelerator_count" in paths, [str(e) for e in caught.value.errors]


def test_a_yaml_syntax_error_names_its_line_and_column():
    """Guards issue 28, point 5: a YAML syntax error had no line and column."""
    with pytest.raises(DocumentInvalid) as caught:
        load_document("api_version: trainctl/v1\ndataset:\n  uri: gs://b/d/\n  target: [y\nresources: {}\n")
    assert "line 5, column 10" in str(caught.value), str(caught.value)


def test_validate_with_a_shell_glob_skips_the_folders_and_checks_the_files():
    """Guards issue 28, point 3: `trainctl validate examples/*` exited 2 because examples/ holds folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}
    names = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "trainctl", "validate", *names], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "examples/events/: a folder, skipped" in done.stdout
    assert "examples/tabular-2xa100.yaml: ok" in done.stdout
