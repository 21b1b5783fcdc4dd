"""Can a checkpoint of a large state be taken inside a Spot VM's 30 s notice (issue 17 item 9)? A generated
state of `--gigabytes` (a stack of square Linear layers, on the CPU) is saved with the trainer's `Checkpoints`
to a local folder and to fake-gcs-server (a gs:// folder: the parallel composite upload), and, for comparison,
the way the trainer saved before: serialise into memory, hash, upload in one stream while training waits.

    python bench/checkpoint_time.py [--gigabytes 2] [--rounds 3] [--targets local,gcs]

Per target, the median over the rounds (for the trainer's save, over the rounds after the first, whose copy
allocates its buffers; its figures are shown apart) of: the time until training may go on (the copy of the
state), the time until the checkpoint is committed (marker written), the previous implementation's time (all of
it blocking training), and the extra memory each held at its peak (resident set size above the level before the save,
sampled every 10 ms). fake-gcs-server runs on this machine with its filesystem backend, so the gs:// figures
measure the client's side (serialising, hashing, HTTP on loopback, composing) and not Google's network.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Figure, load_average, record

NOTICE_SECONDS = 30.0
BUDGET_SECONDS = 25.0  # torchrun's own 30 s SIGTERM→SIGKILL window starts with the notice (reference/ddp.md §3.2)
LAYER_WIDTH = 8192  # one 8192 × 8192 fp32 weight is 256 MiB


def generated_state(gigabytes: float) -> dict:
    import torch

    wanted = gigabytes * 2**30 / 4  # fp32 numbers
    width = min(LAYER_WIDTH, int(wanted**0.5))  # a smaller state (the smoke test): one narrower layer
    layers = max(1, round(wanted / (width * width)))
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    return {"step": 1, "model": model.state_dict(), "history": [{"epoch": 1, "val_loss": 0.5}]}


def state_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t in state["model"].values())


class PeakMemory:
    """The largest resident set size above the level at entry, sampled in a thread while the block runs."""

    def __enter__(self) -> PeakMemory:
        self.start = self.peak = _rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def extra_gib(self) -> float:
        return (self.peak - self.start) / 2**30


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def save_now(checkpoints, step: int, state: dict) -> dict:
    """The trainer's checkpoint: time until training may go on, time until committed, peak extra memory."""
    with PeakMemory() as memory:
        started = time.perf_counter()
        checkpoints.start_save(step, state)
        returned = time.perf_counter()
        checkpoints.wait()
        committed = time.perf_counter()
    return {"return": returned - started, "commit": committed - started, "memory": memory.extra_gib}


def save_as_before(uri: str, step: int, state: dict) -> dict:
    """The save this replaces (trainer/checkpoints/committed.py before issue 17 item 9), all of it while training
    waits."""
    import torch

    from trainer.storage.folders import open_folder

    folder = open_folder(uri)
    with PeakMemory() as memory:
        started = time.perf_counter()
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        folder.write_bytes(f"before-{step:09d}/state.pt", data)
        marker = {"step": step, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        folder.write_bytes(f"before-{step:09d}/COMMITTED", json.dumps(marker).encode())
        done = time.perf_counter() - started
        del buffer, data
    folder.delete(f"before-{step:09d}")
    return {"return": done, "commit": done, "memory": memory.extra_gib}


def measure(target: str, uri: str, state: dict, rounds: int) -> list[Figure]:
    from trainer.checkpoints.committed import Checkpoints

    # One Checkpoints for the whole run, as in training: the first save allocates the CPU copy's buffers, every
    # later one copies into them.
    checkpoints = Checkpoints(uri, keep=1)
    runs: dict[str, list[dict]] = {"now": [], "before": []}
    savers: dict[str, Callable[[int], dict]] = {
        "now": lambda step: save_now(checkpoints, step, state),
        "before": lambda step: save_as_before(uri, step, state),
    }
    for step in range(1, rounds + 1):
        for side in ("now", "before") if step % 2 else ("before", "now"):  # alternate who goes first
            try:
                runs[side].append(savers[side](step))
            except Exception as e:  # a save that fails (say, an upload timing out) is a result too
                runs[side].append({"failed": f"{type(e).__name__}: {e}"[:160]})
            print(f"{target} round {step} {side}: {runs[side][-1]}", flush=True)

    def median(side: str, key: str) -> float:
        later = runs[side][1:] if side == "now" and len(runs[side]) > 1 else runs[side]
        done = [r[key] for r in later if "failed" not in r]
        return statistics.median(done) if done else math.inf

    commit = median("now", "commit")

    def shown(side: str, key: str, unit: str) -> str:
        failed = [r["failed"] for r in runs[side] if "failed" in r]
        value = f"{median(side, key):.2f} {unit}" if median(side, key) < math.inf else "no run finished"
        return value + (f", {len(failed)} of {len(runs[side])} failed ({failed[0]})" if failed else "")

    def both(key: str, unit: str) -> str:
        return f"{shown('now', key, unit)} (before: {shown('before', key, unit)})"

    first = runs["now"][0]
    first_value = first.get("failed") or (
        f"{first['return']:.2f} s until training goes on, {first['commit']:.2f} s until committed"
    )
    return [
        Figure(f"{target}: time until training goes on", both("return", "s")),
        Figure(f"{target}: the first save (allocating the copy's buffers)", first_value),
        Figure(
            f"{target}: time until the checkpoint is committed",
            both("commit", "s"),
            f"≤ {BUDGET_SECONDS:.0f} s",
            commit <= BUDGET_SECONDS,
        ),
        Figure(f"{target}: extra memory at the peak of a save", both("memory", "GiB")),
    ]


def run(args: argparse.Namespace, gcs_url: str | None) -> tuple[list[Figure], list[str]]:
    """Measure each target; gs:// goes to the fake-gcs-server at `gcs_url`."""
    import os

    from trainer.storage import folders

    state = generated_state(args.gigabytes)
    width = state["model"]["0.weight"].shape[0]
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as tmp:
        for target in args.targets:
            if target == "local":
                uri = str(Path(tmp) / "checkpoints")
            else:
                if gcs_url is None:
                    raise ValueError("the gcs target needs a fake-gcs-server")
                os.environ["STORAGE_EMULATOR_HOST"] = gcs_url
                folders.gcs_client.cache_clear()
                # Unversioned: fake-gcs-server's filesystem backend (objects on disk, not in its memory) has no
                # versioning; the bucket's versioning does not change how an upload goes.
                folders.gcs_client().create_bucket("checkpoint-bench")
                uri = "gs://checkpoint-bench/run/checkpoints"
            figures += measure(target, uri, state, args.rounds)
    notes = [
        f"state: {state_bytes(state) / 2**30:.2f} GiB of fp32 weights ({len(state['model']) // 2} Linear layers of "
        f"{width}×{width}), on the CPU; {args.rounds} rounds, each side going first in turn",
        "local: a temporary folder on this machine's disk; gcs: fake-gcs-server on loopback, filesystem backend",
        "extra memory is above the level just before the save: the trainer's CPU copy (one copy of the state) is "
        "allocated by the first save and held from then on, so later saves add only the upload's parts in flight",
    ]
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gigabytes", type=float, default=2.0, help="size of the generated state")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--targets", type=lambda s: s.split(","), default=["local", "gcs"], help="local,gcs")
    p.add_argument("--results", type=Path, default=None, help="where to append the figures (bench/RESULTS.md)")
    return p.parse_args(argv)


def main() -> None:
    from bench.report import RESULTS
    from local.fake_gcs import start_fake_gcs

    args = parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-gcs-") as work:
        root = Path(work) / "objects"
        root.mkdir()
        server = start_fake_gcs(Path(work), filesystem_root=root) if "gcs" in args.targets else None
        try:
            figures, notes = run(args, server.url if server else None)
        finally:
            if server:
                server.stop()
    record("checkpoint_time", figures, load_before, notes, args.results or RESULTS)


if __name__ == "__main__":
    main()
