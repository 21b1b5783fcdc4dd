"""When the trainer stops without training (issue 29, point 7): SIGTERM before the first step, and a resumed run whose
early-stopping patience had already run out. Each runs trainer.train in this process, one rank on CPU (no launch)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from test_trainer_best_model import noisy_labels
from trainer_runs import output_dirs

from trainer import train
from trainer.distributed.process_group import PREEMPTED_EXIT_CODE


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "noisy.csv"
    noisy_labels(path)
    return path


def arguments(data: Path, out: Path, *extra: str) -> list[str]:
    return ["--data", str(data), "--target", "y", "--batch-size", "16", "--seed", "2", "--hidden-sizes", "64",
            "--dropout", "0", "--learning-rate", "1e-2", *extra, *output_dirs(out)]  # fmt: skip


def test_sigterm_before_the_first_step_stops_at_once_with_nothing_to_save(tmp_path, data, monkeypatch, capsys):
    """Issue 29, point 7: SIGTERM arrives while the run is still setting up (a preemption right after the start):
    the run ends at once, as preempted, before any step, and commits no checkpoint (there is nothing to keep).
    Without the check before the loop it would take a step and commit that step's checkpoint first."""
    out = tmp_path / "out"
    # SIGTERM to this process just after the trainer's handler is in place (a real signal, a real handler).
    monkeypatch.setattr(train, "stop_when_launcher_dies", lambda: os.kill(os.getpid(), signal.SIGTERM))
    handler = signal.getsignal(signal.SIGTERM)
    try:
        returncode = train.main(arguments(data, out, "--epochs", "3"))
    finally:
        signal.signal(signal.SIGTERM, handler)

    assert returncode == PREEMPTED_EXIT_CODE
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [e["step"] for e in lines if e["message"] == "stopping before the first step (SIGTERM)"] == [0]
    assert not [e for e in lines if e["message"] == "progress"]
    assert not list((out / "checkpoints").glob("step-*")), "a checkpoint was committed"
    assert not (out / "model" / "_SUCCESS").exists()


def test_a_run_resumed_after_its_patience_ran_out_stops_at_once(tmp_path, data):
    """Issue 29, point 7: a run stopped early (patience 2) is resumed from its last checkpoint, as after a crash
    between that checkpoint and the model's files. It must not train on: it writes the same model and metrics at
    once (same epochs, same steps, stopped_early), resumed from the step it stopped at."""
    out = tmp_path / "out"
    args = arguments(data, out, "--epochs", "40", "--early-stopping-patience", "2")
    assert train.main(args) == 0
    first = json.loads((out / "model" / "metrics.json").read_text())
    assert first["stopped_early"] and first["epochs_trained"] < 40, first
    history = (out / "model" / "metrics.jsonl").read_text()
    shutil.rmtree(out / "model")  # the crash came before the model's files were written

    assert train.main(args) == 0

    again = json.loads((out / "model" / "metrics.json").read_text())
    assert again["resumed_from_step"] == first["steps"]
    assert (again["steps"], again["epochs_trained"], again["best_epoch"]) == (
        first["steps"],
        first["epochs_trained"],
        first["best_epoch"],
    )
    assert again["stopped_early"] and again["val_accuracy"] == first["val_accuracy"]
    assert (out / "model" / "metrics.jsonl").read_text() == history
