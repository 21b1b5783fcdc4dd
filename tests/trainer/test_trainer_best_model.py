"""A model worth keeping: the saved model is the epoch with the best validation metric, not the last one, and
--early-stopping-patience stops a run whose metric has not improved for that many epochs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import torch
from trainer_runs import model_weights, output_dirs, process_env, run


def noisy_labels(path: Path, rows: int = 400, seed: int = 5) -> None:
    """Labels that are mostly noise: a wide network overfits them, so validation accuracy wanders."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 6))
    y = ((x[:, 0] + 2.5 * rng.normal(size=rows)) > 0).astype(int)
    pa_csv.write_csv(pa.table({**{f"x{i}": x[:, i] for i in range(6)}, "y": y}), path)


def test_the_best_epoch_is_kept_and_patience_stops_the_run(tmp_path):
    """Guards issue 17 item 8: best model by validation accuracy (and which epoch), early stopping by patience."""
    data = tmp_path / "noisy.csv"
    noisy_labels(data)
    out = tmp_path / "out"
    args = ["--data", str(data), "--target", "y", "--epochs", "40", "--batch-size", "16", "--seed", "2",
            "--hidden-sizes", "256,256", "--dropout", "0", "--learning-rate", "1e-2",
            "--early-stopping-patience", "4", *output_dirs(out)]  # fmt: skip
    finished = run("trainer.train", args, process_env(), tmp_path / "run.log")

    assert finished.returncode == 0, finished.output[-4000:]
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    history = [json.loads(line) for line in (out / "model" / "metrics.jsonl").open()]
    accuracies = [r["val_accuracy"] for r in history]
    best = history[accuracies.index(max(accuracies))]  # the first epoch that reached the best accuracy
    assert metrics["best_epoch"] == best["epoch"] == metrics["epoch"]
    assert metrics["val_accuracy"] == best["val_accuracy"]
    assert metrics["stopped_early"] and metrics["epochs_trained"] == best["epoch"] + 4 < 40
    assert len(history) == metrics["epochs_trained"]
    assert finished.messages("stopped early")

    last_checkpoint = max((out / "checkpoints").glob("step-*"))
    state = torch.load(last_checkpoint / "state.pt", weights_only=True)
    saved = model_weights(out / "model")
    assert all(torch.equal(saved[k], v) for k, v in state["best"]["weights"].items())
    assert any(not torch.equal(saved[k], v) for k, v in state["model"].items()), "the last epoch's weights were saved"
