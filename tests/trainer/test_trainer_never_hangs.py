"""A trainer that never hangs: when any rank of a two-node run dies, at any point, every node's launcher ends
or its worker group restarts and finishes. The test kills one rank at a moment of the run chosen by the
repetition (start-up, the training loop's start, or a given step) and polls (with a generous limit, not a
timing goal) until both launchers have exited."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pyarrow.csv as pa_csv
import pytest
from trainer_runs import descendants, free_port, output_dirs, process_env, signal_table, started

pytestmark = pytest.mark.slow

# One random kill per `make test` (each run picks new moments, so CI runs add up); a dedicated run takes more:
# TRAINCTL_HANG_REPETITIONS=30 .venv/bin/pytest tests/trainer/test_trainer_never_hangs.py
REPETITIONS = int(os.environ.get("TRAINCTL_HANG_REPETITIONS", "1"))
ENDED_WITHIN_SECONDS = 180  # a polling limit far above the trainer's bound (60 s), never a timing goal


def node_env(port: int, rank: int, out: Path) -> dict[str, str]:
    return process_env(WORLD_SIZE="2", RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       TRAINCTL_LOCAL_PROCS_PER_NODE="1", CLOUD_ML_JOB_ID=f"hang-{port}")  # fmt: skip


def training_args(data: Path, out: Path) -> list[str]:
    kwargs = {"seconds_per_batch": 0.05, "hidden_sizes": [16]}  # 50 steps of at least 50 ms: time to aim
    return ["--data", str(data), "--target", "y", "--epochs", "2", "--batch-size", "16", "--seed", "1",
            "--checkpoint-every-steps", "20", "--log-every-steps", "5", "--model", "trainer_fixture_models:paced_mlp",
            "--model-kwargs", json.dumps(kwargs), *output_dirs(out)]  # fmt: skip


def workers_of(launcher_pid: int) -> list[int]:
    return [pid for pid in descendants(launcher_pid) if b"LOCAL_RANK=" in _environ(pid)]


# When the victim dies: as soon as its worker exists, when the loop starts, or once rank 0 reports a step
# (checkpoints are taken at steps 20 and 40).
MOMENTS: list[str | int] = ["start-up", "training loop starts", 5, 20, 25, 40]


def reached(moment: str | int, rank0_log: str) -> bool:
    if moment == "start-up":
        return True
    events = [json.loads(line) for line in rank0_log.splitlines() if line.startswith("{")]
    if moment == "training loop starts":
        return any(e.get("message") == moment for e in events)
    return any(e.get("message") == "progress" and e["step"] >= moment for e in events)


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("repetition", range(REPETITIONS))
def test_killing_one_rank_of_two_nodes_at_a_random_moment_ends_or_restarts_every_node(tmp_path, repetition):
    """Guards issue 16 item 5: the death of any rank ends or restarts the worker group on every node."""
    chance = random.Random(repetition)
    data = tmp_path / "signal.csv"
    pa_csv.write_csv(signal_table(rows=800), data)
    port = free_port()
    args = training_args(data, tmp_path / "out")
    with (
        started("trainer.launch", args, node_env(port, 0, tmp_path), tmp_path / "node0.log") as node0,
        started("trainer.launch", args, node_env(port, 1, tmp_path), tmp_path / "node1.log") as node1,
    ):
        victim_node, moment = chance.choice([node0, node1]), chance.choice(MOMENTS)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (workers_of(victim_node.pid) and reached(moment, node0.output())):
            time.sleep(0.02)
        victims = workers_of(victim_node.pid)
        assert victims, f"the run ended before the kill at {moment!r}:\n{victim_node.output()[-3000:]}"
        os.kill(victims[0], signal.SIGKILL)
        deadline = time.monotonic() + ENDED_WITHIN_SECONDS
        while time.monotonic() < deadline and (node0.process.poll() is None or node1.process.poll() is None):
            time.sleep(0.2)
        still_running = [n.log_path.name for n in (node0, node1) if n.process.poll() is None]
        # Either way is fine — ended (non-zero) or restarted and finished (0) — but nothing may be left running.
        assert not still_running, f"{still_running} still running:\n" + "\n".join(
            n.output()[-3000:] for n in (node0, node1)
        )


def test_a_rank_stuck_for_good_after_start_up_fails_the_run_after_the_collective_timeout(tmp_path):
    """Guards issue 17 item 5 and issue 16 item 5: after the first step the main group's timeout is
    --collective-timeout-seconds, not the 30-minute start-up timeout, so the ranks waiting for a stuck one fail
    and the launcher ends the group. (Without it the run would wait out the start-up timeout.)"""
    data = tmp_path / "signal.csv"
    pa_csv.write_csv(signal_table(rows=800), data)
    kwargs = {"seconds_per_batch": 0.005, "hidden_sizes": [16], "hang_at_batch": 30}
    args = ["--nproc-per-node", "2", "--max-restarts", "0", "--data", str(data), "--target", "y",
            "--epochs", "2", "--batch-size", "16", "--collective-timeout-seconds", "3", "--progress-every-seconds", "0",
            "--model", "trainer_fixture_models:paced_mlp", "--model-kwargs", json.dumps(kwargs),
            *output_dirs(tmp_path / "out")]  # fmt: skip
    with started("trainer.launch", args, process_env(), tmp_path / "run.log") as run:
        finished = run.wait(timeout=ENDED_WITHIN_SECONDS)

    assert finished.returncode == 1, finished.output[-4000:]
    assert finished.messages("workers failed after the allowed restarts")
    failures = [e["message"] for e in finished.messages_starting("training failed")]
    assert any("timed out" in m.lower() or "timeout" in m.lower() for m in failures), finished.output[-4000:]
    assert not (tmp_path / "out" / "model" / "_SUCCESS").exists()
    # The heartbeat stopped where training did: a controller reading it sees a silent job.
    record = json.loads((tmp_path / "out" / "checkpoints" / "progress.json").read_text())
    assert record["state"] == "training" and record["step"] < record["total_steps"]


def test_the_finished_watch_reads_the_checkpoint_folder_and_ignores_an_earlier_runs_record(tmp_path):
    """Guards issue 16 item 5: the launcher's watch finds progress.json where trainer.train writes it, and only a
    `finished` record counts."""
    from trainer.outputs.finished_watch import checkpoint_dir, finished_at

    assert checkpoint_dir(["--data", "d", "--checkpoint-dir", "gs://b/c/"], {}) == "gs://b/c/"
    assert checkpoint_dir(["--checkpoint-dir=/x"], {"AIP_CHECKPOINT_DIR": "gs://b/y/"}) == "/x"
    assert checkpoint_dir([], {"AIP_CHECKPOINT_DIR": "gs://b/y/"}) == "gs://b/y/"
    assert finished_at(str(tmp_path)) is None
    (tmp_path / "progress.json").write_text(json.dumps({"state": "training", "time": 5.0}))
    assert finished_at(str(tmp_path)) is None
    (tmp_path / "progress.json").write_text(json.dumps({"state": "finished", "time": 7.5}))
    assert finished_at(str(tmp_path)) == 7.5
