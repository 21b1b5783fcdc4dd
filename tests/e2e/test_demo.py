"""`trainctl demo`, the flow `make demo` runs: exits 0 only when `succeeded` arrived and the model loads,
shows each event and the metrics against the baseline, and leaves no process behind."""

from __future__ import annotations

import re
import subprocess
import sys

from local.processes import leftover_processes
from local.stack_state import STACK_MARKER_VAR
from tests.e2e.running_stack import user_env


def test_the_demo_trains_a_two_node_job_from_a_dataset_upload_and_cleans_up(tmp_path):
    env = user_env(tmp_path / "local")
    result = subprocess.run(
        [sys.executable, "-m", "trainctl", "demo", "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    states = [
        line.split()[1] for line in out.splitlines() if line.startswith("    ") and line.split()[0].count(":") == 2
    ]
    assert states == ["accepted", "submitted", "running", "succeeded"], out
    assert "layout       2 nodes × 2 processes (world size 4)" in out
    accuracy, baseline = re.search(r"result +val_accuracy ([\d.]+) \(baseline ([\d.]+)\)", out).groups()
    assert float(accuracy) > float(baseline) + 0.2
    assert "(loaded; " in out
    assert (tmp_path / "out" / "loss-curve.png").stat().st_size > 1000
    # Guards issue 15 item 6: the demo ends with the report of what it ran, from the ledger.
    report = out[out.index("$ trainctl report --since 1h") :]
    assert "all: 1 requests  (succeeded 1  failed 0  cancelled 0  rejected 0)" in report, report
    assert "success rate     100%" in report
    stack_id = re.search(r"starting local stack (\w+)", out).group(1)
    assert leftover_processes(stack_id, var=STACK_MARKER_VAR) == []
