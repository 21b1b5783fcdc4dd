"""The built-in trainer says which of its features look like an ID or a constant (issue 44, point 2): in metrics.json's
`data_warnings`, which the `succeeded` event carries, and in its log. It still trains on them: the request chose."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from trainer_runs import output_dirs, process_env, run


def test_id_like_and_constant_features_are_named_in_metrics_and_the_log(tmp_path):
    """Guards issue 44 point 2: an ID column of unique strings was used as a feature without a word. Fails when
    train.py's `**data_warnings(...)` entry of metrics.json is removed."""
    rows = 300
    rng = np.random.default_rng(3)
    x = rng.normal(size=rows)
    table = pa.table({
        "customer_id": [f"c{rng.integers(1 << 40):x}-{i}" for i in range(rows)],
        "row": np.arange(1000, 1000 + rows),
        "country": ["NL"] * rows,
        "x": x,
        "plan": rng.choice(["a", "b", "c"], size=rows),
        "age": rng.integers(18, 81, size=rows),  # whole numbers evenly spread, repeated: no ID
        "y": (x > 0).astype(int),
    })  # fmt: skip
    pa_csv.write_csv(table, tmp_path / "data.csv")
    out = tmp_path / "out"
    args = ["--data", str(tmp_path / "data.csv"), "--target", "y", "--epochs", "1", "--batch-size", "64",
            *output_dirs(out)]  # fmt: skip
    finished = run("trainer.train", args, process_env(), tmp_path / "run.log")

    assert finished.returncode == 0, finished.output[-4000:]
    warnings = json.loads((out / "model" / "metrics.json").read_text())["data_warnings"]
    flagged = {line.split(":", 1)[0] for line in warnings}
    assert flagged == {"customer_id", "row", "country"}, warnings
    assert any(w.startswith("customer_id: ID-like") for w in warnings)
    assert any(w.startswith("country: constant") for w in warnings)
    assert "features that look like no feature" in finished.output


def test_a_request_that_names_its_features_gets_no_warning_for_the_columns_it_left_out(tmp_path):
    rows = 200
    rng = np.random.default_rng(4)
    x = rng.normal(size=rows)
    table = pa.table({"id": [f"r{i}" for i in range(rows)], "x": x, "y": (x > 0).astype(int)})
    pa_csv.write_csv(table, tmp_path / "data.csv")
    out = tmp_path / "out"
    args = ["--data", str(tmp_path / "data.csv"), "--target", "y", "--features", "x", "--epochs", "1",
            *output_dirs(out)]  # fmt: skip
    finished = run("trainer.train", args, process_env(), tmp_path / "run.log")

    assert finished.returncode == 0, finished.output[-4000:]
    assert "data_warnings" not in json.loads((out / "model" / "metrics.json").read_text())
