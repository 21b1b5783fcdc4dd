"""The heartbeat's figures for time to first step and runtime goodput (issue 43, trainer/outputs/progress.py):
steps run carried across the processes of a run, the first step kept within one job and not across jobs, and an
earlier record that is not the trainer's ignored rather than trusted or fatal. No process group: pure file work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.outputs.progress import PROGRESS_FILE, ProgressRecord


def record(folder: Path, enabled: bool = True) -> ProgressRecord:
    return ProgressRecord(str(folder), every_seconds=0, total_steps=10, enabled=enabled, process_started=1000.0)


def written(folder: Path) -> dict:
    return json.loads((folder / PROGRESS_FILE).read_text())


def test_first_step_is_recorded_once_and_steps_are_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOUD_ML_JOB_ID", "job-1")
    progress = record(tmp_path)
    progress.write(0, 0, state="starting", force=True)
    assert written(tmp_path)["first_step"] is None
    progress.stepped(1, 0)
    first = written(tmp_path)["first_step"]
    assert first is not None and first >= 1000.0
    progress.stepped(2, 0)
    assert written(tmp_path) | {"time": 0} == {
        "step": 2, "total_steps": 10, "epoch": 0, "time": 0, "attempt": 0, "state": "training",
        "job": "job-1", "started": 1000.0, "first_step": first, "steps_run": 2,
    }  # fmt: skip
    assert progress.figures() == {"process_started": 1000.0, "first_step": first, "steps_run": 2}


def test_a_restarted_process_of_the_same_job_keeps_the_first_step_and_adds_its_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOUD_ML_JOB_ID", "job-1")
    before = record(tmp_path)
    for step in range(1, 6):
        before.stepped(step, 0)
    first = written(tmp_path)["first_step"]
    after = record(tmp_path)  # resumed from step 3: steps 4 and 5 run again
    for step in range(4, 8):
        after.stepped(step, 0)
    assert (written(tmp_path)["steps_run"], written(tmp_path)["first_step"]) == (5 + 4, first)


def test_a_new_job_counts_on_but_records_its_own_first_step(tmp_path, monkeypatch):
    (tmp_path / PROGRESS_FILE).write_text(json.dumps({"job": "job-1", "first_step": 5.0, "steps_run": 7}))
    monkeypatch.setenv("CLOUD_ML_JOB_ID", "job-2")
    progress = record(tmp_path)
    assert progress.first_step is None
    progress.stepped(1, 0)
    assert written(tmp_path)["steps_run"] == 8 and written(tmp_path)["first_step"] > 5.0


NOT_THE_TRAINERS = [
    b"not json",
    b"[1, 2]",
    json.dumps({"steps_run": -4, "first_step": "soon"}).encode(),
    json.dumps({"steps_run": True, "first_step": True}).encode(),
]


@pytest.mark.parametrize("earlier", NOT_THE_TRAINERS)
def test_an_earlier_record_that_is_not_the_trainers_counts_for_nothing(tmp_path, monkeypatch, earlier):
    monkeypatch.delenv("CLOUD_ML_JOB_ID", raising=False)
    (tmp_path / PROGRESS_FILE).write_bytes(earlier)
    progress = record(tmp_path)
    progress.stepped(1, 0)
    assert written(tmp_path)["steps_run"] == 1 and written(tmp_path)["first_step"] >= 1000.0


def test_ranks_other_than_zero_write_and_read_nothing(tmp_path):
    (tmp_path / PROGRESS_FILE).write_text(json.dumps({"job": "", "first_step": 5.0, "steps_run": 7}))
    progress = record(tmp_path, enabled=False)
    progress.stepped(1, 0)
    assert progress.total_steps_run == 1 and json.loads((tmp_path / PROGRESS_FILE).read_text())["steps_run"] == 7
