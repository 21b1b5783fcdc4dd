"""Checkpoint storage on a local folder and on Cloud Storage (fake-gcs-server): commit markers, skipping what
is not committed or does not match its marker, keeping the last K."""

from __future__ import annotations

import json

import pytest
import torch

from trainer.checkpoint import Checkpoints
from trainer.storage import open_folder


@pytest.fixture(params=["local", "gcs"])
def checkpoint_uri(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"gs://{bucket}/run/checkpoints/"


def state(step: int) -> dict:
    return {"step": step, "weights": torch.full((3,), float(step)), "rng": torch.get_rng_state()}


def warnings(capsys) -> list[dict]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [e for e in lines if e["severity"] == "WARNING"]


def test_newest_committed_checkpoint_is_loaded_exactly(checkpoint_uri):
    checkpoints = Checkpoints(checkpoint_uri, keep=3)
    for step in (10, 20):
        checkpoints.save(step, state(step))
    step, loaded = checkpoints.latest()
    assert step == 20
    assert torch.equal(loaded["weights"], torch.full((3,), 20.0))
    assert torch.equal(loaded["rng"], torch.get_rng_state())


def test_no_checkpoint_means_a_fresh_start(checkpoint_uri):
    assert Checkpoints(checkpoint_uri).latest() is None


def test_uncommitted_and_corrupt_checkpoints_are_skipped_with_a_log_line(checkpoint_uri, capsys):
    checkpoints = Checkpoints(checkpoint_uri, keep=5)
    checkpoints.save(10, state(10))
    checkpoints.save(20, state(20))
    folder = open_folder(checkpoint_uri)
    folder.write_bytes("step-000000030/state.pt", b"half a checkpoint")  # a save cut short: no marker
    folder.write_bytes("step-000000020/state.pt", folder.read_bytes("step-000000010/state.pt"))  # marker mismatch
    capsys.readouterr()

    step, loaded = checkpoints.latest()

    assert step == 10 and loaded["step"] == 10
    skipped = warnings(capsys)
    assert [(e["message"], e["step"]) for e in skipped] == [
        ("skipping uncommitted checkpoint (no commit marker)", 30),
        ("skipping corrupt checkpoint", 20),
    ]
    assert "do not match its commit marker" in skipped[1]["reason"]


def test_only_the_last_k_committed_checkpoints_are_kept_and_leftovers_are_removed(checkpoint_uri):
    checkpoints = Checkpoints(checkpoint_uri, keep=2)
    folder = open_folder(checkpoint_uri)
    folder.write_bytes("step-000000015/state.pt", b"left by an interrupted save")
    for step in (10, 20, 30, 40):
        checkpoints.save(step, state(step))
    assert folder.list() == [
        "step-000000030/COMMITTED", "step-000000030/state.pt", "step-000000040/COMMITTED", "step-000000040/state.pt"
    ]  # fmt: skip


def test_keeping_fewer_than_one_checkpoint_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        Checkpoints(str(tmp_path), keep=0)
