"""Helpers for the trainer's tests: datasets, and running `trainer.launch` / `trainer.predict` as real
processes whose JSON log lines can be read back. Every process started here is in its own session and is
killed (by its process group id) if it is still running when the test leaves."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import torch

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUN_TIMEOUT_SECONDS = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_breast_cancer_shards(folder: Path, shards: int) -> None:
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    columns = {name: bunch.data[:, i] for i, name in enumerate(bunch.feature_names)}
    table = pa.table({**columns, "target": bunch.target})
    for i, part in enumerate(np.array_split(np.arange(table.num_rows), shards)):
        pa_csv.write_csv(table.take(part), folder / f"part-{i:05d}.csv")
    (folder / "_SUCCESS").write_bytes(b"")


def signal_table(rows: int, seed: int = 7) -> pa.Table:
    """A regression target that is a known function of five numbers and a string column, plus small noise;
    two more columns are pure noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 7))
    colour = rng.choice(["red", "green", "blue", "grey"], size=rows)
    effect = {"red": 1.5, "green": -1.0, "blue": 0.5, "grey": 0.0}
    y = 2 * x[:, 0] - 3 * x[:, 1] + x[:, 2] * x[:, 3] + np.sin(2 * x[:, 4]) + np.vectorize(effect.get)(colour)
    y = y + 0.1 * rng.normal(size=rows)
    return pa.table({**{f"x{i}": x[:, i] for i in range(7)}, "colour": colour, "y": y})


def write_shards(table: pa.Table, folder: Path, shards: int, file_format: str = "parquet") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(table.num_rows), shards)):
        if file_format == "parquet":
            pq.write_table(table.take(part), folder / f"part-{i:05d}.parquet")
        else:
            pa_csv.write_csv(table.take(part), folder / f"part-{i:05d}.csv")


def table_bytes(table: pa.Table, file_format: str) -> bytes:
    buffer = io.BytesIO()
    if file_format == "parquet":
        pq.write_table(table, buffer)
    else:
        pa_csv.write_csv(table, buffer)
    return buffer.getvalue()


def output_dirs(out: Path) -> list[str]:
    """The three output flags of trainer.train, pointing below `out`."""
    return ["--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "checkpoints"),
            "--tensorboard-dir", str(out / "logs")]  # fmt: skip


def process_env(**extra: str) -> dict[str, str]:
    """This process's environment without Vertex, torchrun or emulator variables leaking in from outside, plus
    what a trainer process needs to import the project and the tests' model factories, plus `extra`."""
    drop = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CLUSTER_SPEC", "STORAGE_EMULATOR_HOST")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("AIP_", "TRAINCTL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


@dataclass
class Finished:
    returncode: int
    output: str

    @property
    def events(self) -> list[dict]:
        """The JSON log lines, in order; torchrun's own plain-text lines are left out."""
        events = []
        for line in self.output.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    events.append(json.loads(line))
        return events

    def messages(self, message: str) -> list[dict]:
        return [e for e in self.events if e.get("message") == message]

    def messages_starting(self, prefix: str) -> list[dict]:
        return [e for e in self.events if str(e.get("message", "")).startswith(prefix)]


class Running:
    def __init__(self, module: str, args: list[str], env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 — closed in wait()/kill()
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args], env=env, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = RUN_TIMEOUT_SECONDS) -> Finished:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.process.args} still running after {timeout}s:\n{self.output()[-4000:]}"
            ) from None
        self._log.close()
        return Finished(code, self.output())

    def kill(self) -> None:
        """SIGKILL the process and everything below it. torchrun starts each worker in a session of its own, so
        the tree is walked (before anyone dies and the orphans move to init) rather than one group killed."""
        if self.process.poll() is None:
            for pid in [*descendants(self.process.pid), self.process.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait()
        self._log.close()


def descendants(pid: int) -> list[int]:
    found = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        found += [child, *descendants(child)]
    return found


@contextlib.contextmanager
def started(module: str, args: list[str], env: dict[str, str], log_path: Path) -> Iterator[Running]:
    running = Running(module, args, env, log_path)
    try:
        yield running
    finally:
        running.kill()


def run(module: str, args: list[str], env: dict[str, str], log_path: Path) -> Finished:
    with started(module, args, env, log_path) as running:
        return running.wait()


def wait_for(condition, what: str, timeout: float = RUN_TIMEOUT_SECONDS, running: Running | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if running is not None and running.process.poll() is not None:
            raise AssertionError(f"process ended before {what}:\n{running.output()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def model_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / "model.pt", map_location="cpu", weights_only=True)["state_dict"]


def assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, f"weights differ in {different}"
