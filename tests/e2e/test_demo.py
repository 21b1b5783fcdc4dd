"""`trainctl demo`, the flow `make demo` runs: exits 0 only when every partition ended as its story says and the
champion loads, shows each event, the metrics against the baseline and the registry, and leaves no process
behind."""

from __future__ import annotations

import re
import subprocess
import sys

from local.processes import leftover_processes
from local.stack_state import STACK_MARKER_VAR
from tests.e2e.running_stack import user_env


def test_the_demo_trains_the_partitions_promotes_the_better_model_and_cleans_up(tmp_path):
    """Issue 26, demo: the loop of partitions — the first becomes the champion, the second (better on the model's
    reference set) is promoted, the last (worse) is held — each with its events, then the registry's view. Issue 27,
    demo: the third lost a column and is rejected at admission with reason `data`, naming it, before any job. Issue
    38, demo: the fourth's labels are inverted and the label check stops it before training, its reason in one
    line. Issue 41, demo: the first version takes the endpoint; the second is a canary that answers errors on live
    traffic and is rolled back by itself, the alias back on version 1; the sixth bakes cleanly and takes all the
    traffic."""
    env = user_env(tmp_path / "local")
    result = subprocess.run(
        [sys.executable, "-m", "trainctl", "demo", "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    lines = [line.split() for line in out.splitlines() if line.startswith("    ")]
    events = [words[1:3] for words in lines if words and words[0].count(":") == 2]
    by_request: dict[str, list[str]] = {}
    for state, request_id in events:
        by_request.setdefault(request_id, []).append(state)
    run = ["accepted", "submitted", "running", "succeeded", "registered"]
    started = ["accepted", "submitted", "running"]
    assert list(by_request.values()) == [
        [*run, "promoted", "deploying", "deployed"],
        [*run, "promoted", "deploying", "canary", "rolled_back"],
        ["rejected"],
        [*started, "failed"],
        [*run, "held"],
        [*run, "promoted", "deploying", "canary", "deployed"],
    ], out
    [rolled] = [line for line in out.splitlines() if re.match(r"    \S+ +rolled_back ", line)]
    assert "error rate" in rolled and "above max_error_rate" in rolled and "`champion` is on version 1" in rolled
    assert "dataset: column 'mean_radius' is missing (a feature of the champion)" in out
    [stopped] = [line for line in out.splitlines() if re.match(r"    \S+ +failed ", line)]
    assert "failed (data): The trainer reported: LabelsChanged: the champion scores" in stopped, stopped
    assert "the labels or their meaning changed" in stopped, stopped
    assert "layout       2 nodes × 2 processes (world size 4)" in out
    accuracy, baseline = re.search(r"result +val_accuracy ([\d.]+) \(baseline ([\d.]+)\)", out).groups()
    assert float(accuracy) > float(baseline) + 0.2
    assert "(loaded; " in out
    assert (tmp_path / "out" / "loss-curve.png").stat().st_size > 1000
    registry = out[out.index("$ .venv/bin/trainctl models show demo-breast-cancer") :]
    assert "champion -> version 4 (earlier: 1)" in registry, registry
    assert re.search(r"traffic: version 4 \(\d+\) 100 %", registry), registry
    # Guards issue 15 item 6: the demo ends with the report of what it ran, from the ledger.
    report = out[out.index("$ .venv/bin/trainctl report --since 1h") :]
    assert "all: 6 requests  (succeeded 4  failed 1  cancelled 0  rejected 1  skipped 0)" in report, report
    assert "data rejections  1, saving up to " in report
    assert "model demo-breast-cancer promoted 3, held 1; rollouts: deployed 2, rolled back 1" in report
    stack_id = re.search(r"starting local stack (\w+)", out).group(1)
    assert leftover_processes(stack_id, var=STACK_MARKER_VAR) == []
