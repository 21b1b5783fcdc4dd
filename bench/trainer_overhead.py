"""What the trainer costs over a minimal hand-written DDP loop: same model, data, batch size and world size
(2 processes, gloo on CPU).

    .venv/bin/python bench/trainer_overhead.py [--rounds 41] [--rows 20000] [--epochs 1] [--processes 2]

`--processes 1` (a world of one, gloo) takes communication out of the picture, which leaves the harness's own
cost per step plainly visible in the CPU-time figures. Every process runs one intra-op thread (torchrun's
default for several processes per node), so the training thread's CPU time is the step's whole CPU cost.

All runs happen in the same two torchrun processes, one after another, a few seconds apart, so load from
elsewhere on a shared machine hits them alike (the method of Lightning Fabric's DDP parity test). The trainer
side is its own `train()` — what `python -m trainer.launch` runs in every process, with its default logging,
checkpoint cadence and stop/checkpoint coordination. The hand-written loop comes in two variants: DDP's
defaults, and `gradient_as_bucket_view=True` as the trainer uses it (so the harness's own cost is seen apart
from that option). Each round pairs the trainer with one variant in a balanced order (a crossover design:
within every four rounds each variant runs once before and once after the trainer), because a run's position
measurably shifts its speed; one warm-up round is discarded.

The hand-written loop takes its tensors from the trainer's own loading and preprocessing (so both see the same
numbers), then only seeds, wraps in DDP and loops: permute, slice, forward, loss, backward, step. Both time
each step from fetching the batch to the optimizer step on rank 0 and leave out the first 5 steps; the
trainer's evaluation and checkpoint pauses are outside its step timing (the hand-written loop has neither).

Reported: samples/s of each from the median step time (wall-clock, and CPU time of the training thread), the
trainer/hand-written throughput ratio over the rounds (geometric mean, median, quartiles), the share of step
time spent fetching the batch, and whether the final weights are bitwise identical in every round.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 5
SIDES = ("trainer", "hand", "hand_bucket_view")
SEED, BATCH_SIZE, HIDDEN, DROPOUT, LEARNING_RATE, WEIGHT_DECAY = 0, 64, [128, 64], 0.1, 1e-3, 0.01


def write_dataset(path: Path, rows: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, 10))
    colour = rng.choice(["red", "green", "blue", "grey"], size=rows)
    y = 2 * x[:, 0] - 3 * x[:, 1] + x[:, 2] * x[:, 3] + np.sin(2 * x[:, 4]) + (colour == "red")
    y += 0.1 * rng.normal(size=rows)
    pa_csv.write_csv(pa.table({**{f"x{i}": x[:, i] for i in range(10)}, "colour": colour, "y": y}), path)


def hand_written_loop(data: str, epochs: int, bucket_view: bool) -> tuple[dict, dict]:
    """The minimal DDP loop. Returns rank 0's timings and the final weights."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainer.data.preprocess import Combine, Preprocessor
    from trainer.data.tables import load_rank_data
    from trainer.model.network import mlp

    rank, world = dist.get_rank(), dist.get_world_size()
    rows = load_rank_data(data, "auto", SEED, 0.2)
    prep = Preprocessor.fit(rows.train, "y", "auto", Combine(across_ranks=False))
    inputs, targets = prep.features(rows.train), prep.targets(rows.train)

    torch.manual_seed(SEED)
    model = mlp(prep.num_features, 1, hidden_sizes=HIDDEN, dropout=DROPOUT)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    torch.manual_seed(SEED * 7919 + 1 + rank)  # each rank its own dropout masks, as the trainer does
    ddp = DDP(model, gradient_as_bucket_view=bucket_view)

    steps_per_epoch = math.ceil(math.ceil(len(inputs) / world) / BATCH_SIZE)
    step_seconds, cpu_seconds, data_seconds = [], [], []
    for epoch in range(epochs):
        order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(SEED * 1_000_003 + epoch))
        mine = order[rank::world]
        mine = mine.repeat(math.ceil(steps_per_epoch * BATCH_SIZE / len(mine)))
        for step in range(steps_per_epoch):
            started, cpu_started = time.perf_counter(), time.thread_time()
            batch = mine[step * BATCH_SIZE : (step + 1) * BATCH_SIZE]
            x, y = inputs[batch], targets[batch]
            fetched = time.perf_counter()
            loss = F.mse_loss(ddp(x).reshape(-1), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step_seconds.append(time.perf_counter() - started)
            cpu_seconds.append(time.thread_time() - cpu_started)
            data_seconds.append(fetched - started)

    def percentiles_ms(seconds: list[float]) -> dict[str, float]:
        deciles = statistics.quantiles(seconds[WARMUP_STEPS:], n=10)
        return {"p10": deciles[0] * 1000, "p50": deciles[4] * 1000, "p90": deciles[8] * 1000}

    timings = {
        "step_time_ms": percentiles_ms(step_seconds),
        "step_cpu_time_ms": percentiles_ms(cpu_seconds),
        "data_wait_fraction": sum(data_seconds[WARMUP_STEPS:]) / sum(step_seconds[WARMUP_STEPS:]),
        "timed_steps": len(step_seconds) - WARMUP_STEPS,
    }
    return timings, model.state_dict()


def trainer_run(data: str, epochs: int, out: Path) -> tuple[dict, dict]:
    """The trainer's train(), exactly as trainer.train's main() calls it in each process."""
    import torch

    from trainer.distributed.process_group import StopSignal
    from trainer.flags import parse_args
    from trainer.train import set_up, train

    args = parse_args([
        "--data", data, "--target", "y", "--epochs", str(epochs), "--batch-size", str(BATCH_SIZE),
        "--seed", str(SEED), "--hidden-sizes", ",".join(map(str, HIDDEN)), "--dropout", str(DROPOUT),
        "--learning-rate", str(LEARNING_RATE), "--weight-decay", str(WEIGHT_DECAY), "--validation-fraction", "0.2",
        "--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "checkpoints"),
        "--tensorboard-dir", str(out / "logs"),
    ])  # fmt: skip
    if train(set_up(args, torch.device("cpu")), StopSignal()) != 0:
        raise RuntimeError("the trainer did not finish")
    torch.distributed.barrier()  # rank 0 has written model.pt
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    # The last step's weights, as the hand-written loop ends with them: model.pt holds the best epoch's, which is
    # the last one only when validation keeps improving.
    last = max((out / "checkpoints").glob("step-*"))
    weights = torch.load(last / "state.pt", weights_only=True)["model"]
    return metrics, weights


def worker(data: str, epochs: int, rounds: int, out: str) -> None:
    """Runs in each torchrun process: a warm-up round, then `rounds` rounds alternating which side goes first."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    sides = {
        "trainer": lambda round_: trainer_run(data, epochs, Path(out) / f"round{round_}"),
        "hand": lambda round_: hand_written_loop(data, epochs, bucket_view=False),
        "hand_bucket_view": lambda round_: hand_written_loop(data, epochs, bucket_view=True),
    }
    results = []
    for round_ in range(rounds + 1):
        # A crossover design: each round pairs the trainer with one hand-written variant, and within every four
        # rounds each variant runs once before and once after the trainer, so position effects cancel.
        other = "hand" if (round_ // 2) % 2 == 0 else "hand_bucket_view"
        order = ["trainer", other] if round_ % 2 == 0 else [other, "trainer"]
        measured = {}
        for side in order:
            gc.collect()  # the previous side's DDP reducer goes now, not at a random later moment
            measured[side] = sides[side](round_)
        (trainer_metrics, trainer_weights), (other_metrics, other_weights) = measured["trainer"], measured[other]
        identical = trainer_weights.keys() == other_weights.keys() and all(
            torch.equal(trainer_weights[k], other_weights[k]) for k in other_weights
        )
        if round_ > 0:  # round 0 warms up the processes
            results.append({"order": order, "other": other, "trainer": trainer_metrics, other: other_metrics,
                            "identical": identical})  # fmt: skip
    if dist.get_rank() == 0:
        (Path(out) / "rounds.json").write_text(json.dumps(results))
    del measured
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def machine() -> str:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    return f"{os.cpu_count()} × {cpu}, Python {platform.python_version()}, torch {torch.__version__}"


def summarise(rounds: list[dict], args: argparse.Namespace) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    summary = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": commit.stdout.strip(),
        "machine": machine(),
        "load_average_1_5_15_min_at_end": [round(x, 2) for x in os.getloadavg()],
        "workload": f"{args.rows} rows (80% train), MLP {HIDDEN} dropout {DROPOUT}, batch {BATCH_SIZE}/process, "
        f"{args.epochs} epochs, world size {args.processes} (gloo), {rounds[0]['trainer']['timed_steps']} timed steps "
        "per run",
        "rounds": len(rounds),
    }

    # Throughput from each run's median step: wall-clock, and the training thread's CPU time (which load from
    # other programs changes less). A ratio is trainer/hand-written throughput within one round.
    def samples_per_second(side: str, measure: str) -> int:
        step_ms = statistics.median(r[side][measure]["p50"] for r in rounds if side in r)
        return round(BATCH_SIZE * args.processes * 1000 / step_ms)

    for measure, name in (("step_time_ms", "wall_clock"), ("step_cpu_time_ms", "cpu_time")):
        summary[f"samples_per_second_{name}"] = {side: samples_per_second(side, measure) for side in SIDES}
        for other in SIDES[1:]:
            ratios = [r[other][measure]["p50"] / r["trainer"][measure]["p50"] for r in rounds if r["other"] == other]
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            summary[f"ratio_vs_{other}_{name}"] = {
                "rounds": len(ratios),
                "geometric_mean": round(statistics.geometric_mean(ratios), 4),
                "median": round(statistics.median(ratios), 4),
                "quartiles": [round(quartiles[0], 4), round(quartiles[2], 4)],
            }
    summary["data_wait_fraction_median"] = {
        side: round(statistics.median(r[side]["data_wait_fraction"] for r in rounds if side in r), 4) for side in SIDES
    }
    summary["identical_final_weights_every_round"] = all(r["identical"] for r in rounds)
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--processes", type=int, default=2, help="world size (gloo on CPU)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.data, args.epochs, args.rounds, args.out)
        return

    with tempfile.TemporaryDirectory(prefix="trainer-overhead-") as tmp:
        data = Path(tmp) / "data.csv"
        write_dataset(data, args.rows)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(args.processes), __file__, "--worker", "--data", str(data),
                   "--epochs", str(args.epochs), "--rounds", str(args.rounds), "--out", tmp]  # fmt: skip
        log = Path(tmp) / "workers.log"
        with open(log, "wb") as f:
            env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
            result = subprocess.run(command, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        if result.returncode:
            sys.exit(f"the benchmark's workers failed (exit {result.returncode}):\n{log.read_text()[-4000:]}")
        rounds = json.loads((Path(tmp) / "rounds.json").read_text())

    for i, r in enumerate(rounds, 1):
        steps = ", ".join(
            f"{side} {r[side]['step_time_ms']['p50']:.3f} ms ({r[side]['step_cpu_time_ms']['p50']:.3f} ms CPU)"
            for side in r["order"]
        )
        print(f"round {i}: median step {steps}; identical weights {r['identical']}")
    summary = summarise(rounds, args)
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    if not summary["identical_final_weights_every_round"]:
        sys.exit("the trainer and the hand-written loop ended with different weights")


if __name__ == "__main__":
    main()
