"""Checkpoints that survive preemption: a run stopped by SIGTERM, crashed, or left with a half-written
checkpoint resumes from its newest committed checkpoint and ends with weights bitwise identical to a run that
never stopped (same seed, same world size)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pyarrow.csv as pa_csv
import pytest
from trainer_runs import (
    Finished,
    assert_bitwise_equal,
    descendants,
    model_weights,
    output_dirs,
    process_env,
    run,
    signal_table,
    started,
    wait_for,
)

from trainer.checkpoints.committed import Checkpoints
from trainer.distributed.process_group import PREEMPTED_EXIT_CODE

pytestmark = pytest.mark.slow

CHECKPOINT_EVERY_STEPS = 20  # 50 steps per epoch, 4 epochs: 200 steps of at least 10 ms each
# The pace gives a test time to aim a signal at a step and a background upload time to commit before a crash;
# a run nothing is aimed at goes at full speed (the pace only sleeps: the weights are the same).
UNPACED = {"seconds_per_batch": 0}


def training_args(data: Path, out: Path, **model_kwargs) -> list[str]:
    kwargs = {"seconds_per_batch": 0.01, "hidden_sizes": [32, 16], "dropout": 0.2, **model_kwargs}
    return [
        "--data", str(data), "--target", "y", "--epochs", "4", "--batch-size", "16",
        "--seed", "3", "--checkpoint-every-steps", str(CHECKPOINT_EVERY_STEPS), "--log-every-steps", "10",
        "--model", "trainer_fixture_models:paced_mlp", "--model-kwargs", json.dumps(kwargs), *output_dirs(out),
    ]  # fmt: skip


def launch_args(data: Path, out: Path, max_restarts: int, **model_kwargs) -> list[str]:
    """trainer.launch with two processes on this node, then the training arguments."""
    return ["--nproc-per-node", "2", "--max-restarts", str(max_restarts), *training_args(data, out, **model_kwargs)]


def committed_steps(out: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*/COMMITTED"))


@pytest.fixture(scope="module")
def env():
    return process_env()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "signal.csv"
    pa_csv.write_csv(signal_table(rows=2000), path)
    return path


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data, env) -> dict:
    out = tmp_path_factory.mktemp("uninterrupted")
    finished = run("trainer.launch", launch_args(data, out, max_restarts=0, **UNPACED), env, out / "run.log")
    assert finished.returncode == 0, finished.output[-4000:]
    return model_weights(out / "model")


@dataclass(frozen=True)
class Interrupted:
    out: Path  # the run's folder: model, checkpoints, logs
    output: str  # what the run printed
    stopped_at: int  # the step both ranks stopped at

    def copy_to(self, folder: Path) -> int:
        """The stopped run's outputs, copied into `folder` for a test to resume from; returns the step."""
        shutil.copytree(self.out, folder, dirs_exist_ok=True)
        return self.stopped_at


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, data, env) -> Interrupted:
    """One run, SIGTERMed once a checkpoint is committed, with every checkpoint upload slowed by a second (a
    slow network: the stop's checkpoint is uploaded in the background while the ranks wait). The tests that
    resume a stopped run each resume a copy of it."""
    out = tmp_path_factory.mktemp("interrupted")
    args = launch_args(data, out, max_restarts=0, checkpoint_upload_seconds=1.0)
    with started("trainer.launch", args, env, out / "first.log") as r:
        wait_for(lambda: committed_steps(out), "the first committed checkpoint", running=r)
        os.kill(r.pid, signal.SIGTERM)
        first = r.wait()
    assert first.returncode == PREEMPTED_EXIT_CODE, first.output[-4000:]
    stops = first.messages("stopped by SIGTERM after a committed checkpoint")
    assert sorted(e["rank"] for e in stops) == [0, 1], first.output[-4000:]
    assert len({e["step"] for e in stops}) == 1, "ranks stopped at different steps"
    return Interrupted(out, first.output, stops[0]["step"])


def test_sigterm_stops_every_rank_at_one_step_after_committing_its_checkpoint(interrupted):
    """Guards issue 17 item 9 too: checkpoints upload in the background, and a SIGTERM's checkpoint is committed
    before the ranks say they stopped and exit, even when its upload is slow."""
    rank_zero = [e for e in Finished(0, interrupted.output).events if e.get("rank") == 0]
    stop = next(i for i, e in enumerate(rank_zero) if e["message"] == "stopped by SIGTERM after a committed checkpoint")
    committed = [i for i, e in enumerate(rank_zero)
                 if e["message"] == "checkpoint committed" and e["step"] == interrupted.stopped_at]  # fmt: skip
    assert committed and committed[0] < stop, [e["message"] for e in rank_zero[-6:]]
    assert committed_steps(interrupted.out)[-1] == interrupted.stopped_at
    assert not (interrupted.out / "model" / "_SUCCESS").exists()


def test_resume_after_sigterm_skips_junk_checkpoints_and_matches_uninterrupted_run(
    tmp_path, data, env, uninterrupted, interrupted
):
    """The stopped run resumes from its SIGTERM checkpoint and ends bitwise identical to one that never stopped;
    a half-written and a corrupt checkpoint newer than it (a save cut short, a truncated upload) are passed over."""
    stopped_at = interrupted.copy_to(tmp_path)
    good = tmp_path / "checkpoints" / f"step-{stopped_at:09d}"
    state = (good / "state.pt").read_bytes()
    # A save cut short by the kill: half the state, no commit marker.
    half_written = tmp_path / "checkpoints" / f"step-{stopped_at + 5:09d}"
    half_written.mkdir()
    (half_written / "state.pt").write_bytes(state[: len(state) // 2])
    # A marker whose state does not match it (say, a truncated upload).
    corrupt = tmp_path / "checkpoints" / f"step-{stopped_at + 7:09d}"
    shutil.copytree(good, corrupt)
    (corrupt / "state.pt").write_bytes(state[:-100])

    second = run("trainer.launch", launch_args(data, tmp_path, max_restarts=0, **UNPACED), env, tmp_path / "2.log")

    assert second.returncode == 0, second.output[-4000:]
    assert [e["step"] for e in second.messages("skipping uncommitted checkpoint (no commit marker)")] == [
        stopped_at + 5
    ]
    assert [e["step"] for e in second.messages("skipping corrupt checkpoint")] == [stopped_at + 7]
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == stopped_at
    assert metrics["steps"] == 200
    assert [r["epoch"] for r in map(json.loads, (tmp_path / "model" / "metrics.jsonl").open())] == [1, 2, 3, 4]
    assert_bitwise_equal(model_weights(tmp_path / "model"), uninterrupted)
    assert len(committed_steps(tmp_path)) == 3  # the last three are kept, the junk is gone


def worker_pid(launcher_pid: int, rank: int) -> int | None:
    children = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
    for child in children:
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(child)
    return None


def test_a_sigterm_to_one_worker_then_a_sigkill_each_restart_the_group_which_resumes_bitwise(
    tmp_path, data, env, uninterrupted
):
    """One run, two interruptions (one launch instead of two: each costs three processes importing torch).
    First only rank 1 is told to stop (SIGTERM): rank 0 must stop at the same step, and torchrun restarts the
    group, which resumes. Then rank 1 of the restarted group dies abruptly (SIGKILL: the OOM killer, a lost host),
    so no signal handler runs: torchrun restarts the group again, and the ranks resume from the last committed
    checkpoint. The run ends bitwise identical to one that never stopped."""
    # A slower pace than the other runs' leaves the second kill time to land (the weights do not depend on it).
    args = launch_args(data, tmp_path, max_restarts=2, seconds_per_batch=0.015)
    with started("trainer.launch", args, env, tmp_path / "run.log") as r:
        wait_for(lambda: committed_steps(tmp_path), "the first committed checkpoint", running=r)
        os.kill(worker_pid(r.pid, rank=1), signal.SIGTERM)

        def stopped() -> list[dict]:
            return Finished(0, r.output()).messages("stopped by SIGTERM after a committed checkpoint")

        wait_for(lambda: len(stopped()) == 2, "both ranks to stop", running=r)
        stopped_at = max(e["step"] for e in stopped())
        wait_for(lambda: max(committed_steps(tmp_path)) > stopped_at, "the restarted group's checkpoint", running=r)
        workers = descendants(r.pid)
        assert len(workers) == 2
        rank_one = next(pid for pid in workers if b"\0RANK=1\0" in b"\0" + Path(f"/proc/{pid}/environ").read_bytes())
        committed_before_the_kill = max(committed_steps(tmp_path))
        os.kill(rank_one, signal.SIGKILL)
        finished = r.wait()

    assert finished.returncode == 0, finished.output[-4000:]
    stops = finished.messages("stopped by SIGTERM after a committed checkpoint")
    assert sorted(e["rank"] for e in stops) == [0, 1]
    assert len({e["step"] for e in stops}) == 1
    # The first attempt, the group restarted after the SIGTERM, and the one restarted after the SIGKILL.
    assert len(finished.messages("training starts")) == 3
    [after_sigterm, after_sigkill] = [e["step"] for e in finished.messages("resumed from checkpoint") if e["rank"] == 0]
    assert after_sigterm == stops[0]["step"]
    assert after_sigkill >= committed_before_the_kill and after_sigkill % CHECKPOINT_EVERY_STEPS == 0
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == after_sigkill
    assert_bitwise_equal(model_weights(tmp_path / "model"), uninterrupted)


def test_crashed_worker_group_is_restarted_and_resumes_bitwise(tmp_path, data, env, uninterrupted):
    """Issue 43 too: the restarted group runs again the steps after its last checkpoint, so metrics.json counts
    them among the steps run but not among the steps kept, and keeps the first process's first step."""
    args = launch_args(data, tmp_path, max_restarts=1, crash_at_batch=CHECKPOINT_EVERY_STEPS + 15)
    args += ["--progress-every-seconds", "0"]  # every step's count reaches progress.json before the crash
    finished = run("trainer.launch", args, env, tmp_path / "run.log")

    assert finished.returncode == 0, finished.output[-4000:]
    assert "deliberate crash at training batch 35" in finished.output
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == CHECKPOINT_EVERY_STEPS
    assert_bitwise_equal(model_weights(tmp_path / "model"), uninterrupted)
    # Rank 1 crashed in step 35's forward, so 34 steps ran before the crash; the restart ran 21..200 again.
    assert (metrics["steps_kept"], metrics["steps_run"]) == (200, 34 + 200 - CHECKPOINT_EVERY_STEPS)
    assert metrics["first_step"] < metrics["process_started"]  # the first process's, kept by the restarted one
    progress = json.loads((tmp_path / "checkpoints" / "progress.json").read_text())
    assert (progress["state"], progress["steps_run"], progress["first_step"]) == (
        "finished",
        metrics["steps_run"],
        metrics["first_step"],
    )


def test_restarts_are_bounded(tmp_path, data, env):
    # One process per node is enough to count the group's restarts (and starts half as many processes).
    args = ["--nproc-per-node", "1", "--max-restarts", "1",
            *training_args(data, tmp_path, crash_at_batch=5, crash_on_rank=0, crash_every_attempt=True)]  # fmt: skip
    finished = run("trainer.launch", args, env, tmp_path / "run.log")

    assert finished.returncode == 1
    assert len(finished.messages("training starts")) == 2  # the first attempt and one restart, no more
    assert finished.messages("workers failed after the allowed restarts")
    assert not (tmp_path / "model" / "_SUCCESS").exists()


def test_workers_checkpoint_and_stop_when_the_launcher_is_killed_outright(tmp_path, data, env):
    """SIGKILL cannot be forwarded; the workers learn of it from Linux (parent-death signal) and stop cleanly, as on
    any SIGTERM: the checkpoint of the step they stopped at is committed and loads. Resuming bitwise from a SIGTERM
    checkpoint is test_resume_after_sigterm_skips_junk_checkpoints_and_matches_uninterrupted_run's."""
    with started("trainer.launch", launch_args(data, tmp_path, max_restarts=0), env,
                 tmp_path / "first.log") as r:  # fmt: skip
        wait_for(lambda: committed_steps(tmp_path), "the first committed checkpoint", running=r)
        workers = descendants(r.pid)
        assert len(workers) == 2
        os.kill(r.pid, signal.SIGKILL)
        r.wait()
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), "the workers to exit")
        output = r.output()

    stops = [e for e in Finished(0, output).events if e["message"] == "stopped by SIGTERM after a committed checkpoint"]
    assert sorted(e["rank"] for e in stops) == [0, 1], output[-4000:]
    assert len({e["step"] for e in stops}) == 1, "ranks stopped at different steps"
    latest = Checkpoints(str(tmp_path / "checkpoints")).latest()
    assert latest is not None and latest[0] == stops[0]["step"] and latest[1]["step"] == stops[0]["step"]


@pytest.fixture(scope="module")
def alone(tmp_path_factory, data, env, interrupted) -> tuple[Path, int, Finished]:
    """One process (a world of one) resuming a copy of the stopped two-process run, checkpointing by the clock
    alone (no step cadence): one run that two tests read, each for its own claim. Returns the run's folder, the
    step the stopped run was resumed from, and what the run printed."""
    out = tmp_path_factory.mktemp("alone")
    stopped_at = interrupted.copy_to(out)
    # argparse keeps the last --checkpoint-every-steps: none, only every 0.3 s.
    args = [*training_args(data, out, seconds_per_batch=0.004), "--checkpoint-every-steps", "0",
            "--checkpoint-every-seconds", "0.3"]  # fmt: skip
    finished = run("trainer.train", args, env, out / "alone.log")  # ~370 steps of at least 4 ms each
    assert finished.returncode == 0, finished.output[-4000:]
    return out, stopped_at, finished


def test_a_checkpoint_resumes_under_another_world_size_with_a_warning(alone):
    out, stopped_at, finished = alone
    [warning] = finished.messages(
        "checkpoint was written with another world size or batch size; resuming, but not bit-for-bit"
    )
    assert warning["checkpoint_world_size"] == 2 and warning["world_size"] == 1
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == stopped_at and metrics["world_size"] == 1


def test_time_based_checkpoints_are_taken_without_a_step_cadence(alone):
    _, _, finished = alone
    steps = [e["step"] for e in finished.messages("checkpoint committed")]
    assert steps[-1] == 400 and len(steps) >= 3, steps  # some by the clock, then the last step's
