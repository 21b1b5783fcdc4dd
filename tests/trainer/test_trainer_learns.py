"""A 2-process gloo run learns: on the demo's real dataset and on a 20k-row dataset with a known signal, the
validation metric beats the trivial baseline by a stated margin."""

from __future__ import annotations

import json

from trainer_runs import output_dirs, process_env, run, signal_table, write_shards

# Majority class is right ~63% of the time on breast cancer; a working MLP gets 95%+.
ACCURACY_MARGIN_OVER_MAJORITY = 0.25
# The signal explains all but 0.1² of the variance; a working MLP cuts the mean-predictor's RMSE by far more.
RMSE_FRACTION_OF_MEAN_BASELINE = 0.15


def test_two_process_run_beats_majority_class_on_breast_cancer(breast_cancer_csv_shards, tmp_path):
    out = tmp_path / "out"
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(breast_cancer_csv_shards), "--target", "target",
         "--epochs", "20", "--batch-size", "16", "--seed", "1", "--early-stopping-patience", "0",  # all 380 steps
         *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["task"] == "classification"
    assert metrics["world_size"] == 2
    assert metrics["validation_rows"] + metrics["train_rows"] == 569
    assert metrics["val_accuracy"] >= metrics["baseline_accuracy"] + ACCURACY_MARGIN_OVER_MAJORITY, metrics
    progress = finished.messages("progress")  # every 50 of 380 steps, from rank 0 only
    assert [e["step"] for e in progress] == list(range(50, 381, 50))
    assert {e["rank"] for e in progress} == {0}
    assert all({"loss", "samples_per_second", "eta_seconds", "severity"} <= e.keys() for e in progress)
    record = json.loads((out / "checkpoints" / "progress.json").read_text())  # issue 16 item 5's heartbeat
    assert (record["step"], record["total_steps"], record["state"]) == (380, 380, "finished")


def test_two_process_run_finds_known_signal_in_20k_rows(tmp_path):
    data = tmp_path / "signal"
    write_shards(signal_table(rows=20_000), data, shards=4, file_format="parquet")
    out = tmp_path / "out"
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(data), "--target", "y", "--epochs", "6", "--batch-size", "64",
         "--learning-rate", "3e-3", "--dropout", "0",
         *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["task"] == "regression"
    assert [e["mode"] for e in finished.messages("dataset loaded")] == ["sharded", "sharded"]
    assert metrics["val_rmse"] <= RMSE_FRACTION_OF_MEAN_BASELINE * metrics["baseline_rmse"], metrics
