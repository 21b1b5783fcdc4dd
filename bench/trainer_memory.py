"""How a rank's memory grows with its share of the data (issue 30, point 1), and the samples/s it trains at.

    .venv/bin/python bench/trainer_memory.py [--rows 1000000,4000000,16000000] [--processes 2] [--batch-size 256]
                                             [-- EXTRA TRAINER FLAGS, e.g. --memory-budget-mb 200]

For each size a dataset of 20 float32 features and a float32 regression target is written as Parquet in 4
shards (so with 2 processes each rank reads its own two), and the real trainer (`python -m trainer.train`
under torchrun, gloo on CPU, one intra-op thread) trains 1 epoch on it. Peak RSS is the largest rank's VmHWM:
`ru_maxrss` of torchrun's waited-for children, as `wait4` reports it for the whole tree below the bench (which
writes each dataset in a child process and holds nothing large itself: a process started by a parent inherits
the parent's peak as its own). The rank 0 peak when the training loop starts (data loaded) is shown beside it.

The goal is a slope, not a level: between two sizes, how much more peak RSS a rank needs per raw byte added to
its share (84 bytes a row: 21 float32 values), so the interpreter's and torch's fixed footprint does not count.
Goal: at most 2.5 × (issue 30). Samples/s and the data-wait share come from the run's metrics.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FEATURES, SHARDS = 20, 4
RAW_BYTES_PER_ROW = (FEATURES + 1) * 4  # float32 features and target
SLOPE_GOAL = 2.5


def write_dataset(folder: Path, rows: int) -> int:
    """4 Parquet shards, written one at a time so the bench itself stays small. Returns the bytes on disk."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    weights = rng.normal(size=FEATURES).astype(np.float32)
    per_shard = -(-rows // SHARDS)
    for shard in range(SHARDS):
        n = min(per_shard, rows - shard * per_shard)
        x = rng.normal(size=(n, FEATURES)).astype(np.float32)
        y = x @ weights + 0.1 * rng.normal(size=n).astype(np.float32)
        columns = {f"x{i}": x[:, i] for i in range(FEATURES)} | {"y": y}
        pq.write_table(pa.table(columns), folder / f"part-{shard:05d}.parquet", row_group_size=256_000)
        del x, y, columns
    return sum(f.stat().st_size for f in folder.iterdir())


def run_trainer(data: Path, out: Path, processes: int, batch_size: int, extra: list[str]) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
               "-m", "trainer.train", "--data", str(data), "--target", "y", "--task", "regression", "--epochs", "1",
               "--batch-size", str(batch_size), "--checkpoint-every-steps", "0", "--checkpoint-every-seconds", "0",
               "--log-every-steps", "1000", "--model-dir", str(out / "model"), "--checkpoint-dir",
               str(out / "checkpoints"), "--tensorboard-dir", str(out / "logs"), *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    with open(out / "workers.log", "wb") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"the trainer failed:\n{(out / 'workers.log').read_text()[-4000:]}")
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    loaded = [
        json.loads(line) for line in (out / "workers.log").read_text().splitlines() if "training loop starts" in line
    ]
    return {
        "loaded_peak_rss_bytes": int(loaded[0]["peak_rss_mb"] * 2**20) if loaded else None,
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # kilobytes on Linux
        "seconds": round(time.monotonic() - started, 1),
        "samples_per_second": metrics["samples_per_second"],
        "data_wait_fraction": metrics["data_wait_fraction"],
        "validation": {k: metrics.get(k) for k in ("rmse", "loss", "r2") if k in metrics},
    }


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--write"]:
        write_dataset(Path(argv[1]), int(argv[2]))
        return
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1000000,4000000,16000000")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    sizes = [int(r) for r in args.rows.split(",")]
    load_before = os.getloadavg()
    results = []
    for rows in sizes:
        with tempfile.TemporaryDirectory(prefix="trainer-memory-") as tmp:
            # Written by a child process: forked from a parent that had just held the data, torchrun would
            # inherit the parent's peak as its own (Linux carries the peak RSS across exec).
            subprocess.run([sys.executable, __file__, "--write", str(Path(tmp) / "data"), str(rows)], check=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
            on_disk = sum(f.stat().st_size for f in (Path(tmp) / "data").iterdir())
            figures = run_trainer(Path(tmp) / "data", Path(tmp), args.processes, args.batch_size, extra)
        figures |= {"rows": rows, "data_on_disk_bytes": on_disk, "rank_rows": rows // args.processes}
        results.append(figures)
        print(json.dumps(figures), flush=True)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True)
    print(f"\n- command: .venv/bin/python bench/trainer_memory.py {' '.join(argv)}")
    print(f"- date: {datetime.now(UTC):%Y-%m-%d}; commit {commit.stdout.strip()}{' + changes' if dirty.stdout else ''}")
    print(f"- machine: {os.cpu_count()} cores, Python {platform.python_version()}; {args.processes} processes, "
          f"batch {args.batch_size}/process, 1 epoch, 20 float32 features, Parquet in 4 shards")  # fmt: skip
    print(f"- load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")  # fmt: skip
    print("| rows | data on disk | rank's raw bytes | peak RSS (largest rank) | rank 0 peak, data loaded | samples/s "
          "| data wait |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in results:
        raw = r["rank_rows"] * RAW_BYTES_PER_ROW
        print(f"| {r['rows']:,} | {r['data_on_disk_bytes'] / 1e6:.0f} MB | {raw / 1e6:.0f} MB | "
              f"{r['peak_rss_bytes'] / 1e9:.2f} GB | {(r['loaded_peak_rss_bytes'] or 0) / 1e9:.2f} GB | "
              f"{r['samples_per_second']:,.0f} | "
              f"{r['data_wait_fraction']:.3f} |")  # fmt: skip
    for a, b in itertools.pairwise(results):
        added = (b["rank_rows"] - a["rank_rows"]) * RAW_BYTES_PER_ROW
        slope = (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / added
        met = "yes" if slope <= SLOPE_GOAL else "no"
        print(f"\nslope {a['rows']:,} → {b['rows']:,} rows: {slope:.2f} × the raw bytes added "
              f"(goal ≤ {SLOPE_GOAL}: {met})")  # fmt: skip
        if a["loaded_peak_rss_bytes"] and b["loaded_peak_rss_bytes"]:
            loaded = (b["loaded_peak_rss_bytes"] - a["loaded_peak_rss_bytes"]) / added
            print(f"  rank 0 with its data loaded: {loaded:.2f} ×")


if __name__ == "__main__":
    main()
