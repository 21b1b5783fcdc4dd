"""The per-process training program that torchrun starts on every rank: `python -m trainer.train ARGS`.

Read top to bottom: configuration, data, model, resume, the training loop, outputs. Rank 0 logs progress and
writes checkpoints and outputs; nothing else differs between ranks. For a given seed and world size a run is
deterministic, and a run stopped by SIGTERM and resumed ends with the same weights as one that never stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer import collectives, logs
from trainer.batches import EpochBatches
from trainer.checkpoint import Checkpoints
from trainer.data import FORMATS, load_rank_data
from trainer.distributed import (
    PREEMPTED_EXIT_CODE,
    Coordination,
    StopSignal,
    process_group,
    stop_when_launcher_dies,
)
from trainer.model import BUILTIN_MLP, build_model
from trainer.objective import Objective
from trainer.outputs import report_failure, write_history, write_outputs
from trainer.preprocess import TASKS, Combine, Preprocessor, drop_unlabelled, keep_columns
from trainer.progress import ProgressRecord
from trainer.tensorboard import ScalarWriter
from trainer.throughput import Throughput

COORDINATE_EVERY_SECONDS = 0.5  # how often ranks agree on stopping and on a time-based checkpoint


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="gs://…, /gcs/… or local path: a CSV/Parquet file or a folder of them")
    p.add_argument("--target", required=True, help="the column to predict")
    p.add_argument("--format", default="auto", choices=FORMATS, help="file format; auto goes by file extension")
    p.add_argument(
        "--task",
        default="auto",
        choices=TASKS,
        help="auto: classification for string/bool targets and integer targets with ≤ 32 values",
    )
    p.add_argument(
        "--features",
        type=lambda text: [c for c in text.split(",") if c],
        default=None,
        help="comma-separated feature columns (default: every column but the target)",
    )
    p.add_argument("--validation-fraction", type=float, default=0.2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="rows per micro-batch per process")
    p.add_argument("--grad-accum-steps", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=BUILTIN_MLP, help="module:factory returning an nn.Module (default: the MLP)")
    p.add_argument("--model-kwargs", default="{}", help="JSON object of extra arguments for the model factory")
    p.add_argument("--hidden-sizes", default="128,64", help="built-in MLP: comma-separated hidden layer widths")
    p.add_argument("--dropout", type=float, default=0.1, help="built-in MLP: dropout after each hidden layer")
    p.add_argument(
        "--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size; 64 with Reduction Server"
    )
    p.add_argument("--checkpoint-every-steps", type=int, default=1000, help="0 turns step-based checkpoints off")
    p.add_argument("--checkpoint-every-seconds", type=float, default=600.0, help="0 turns time-based checkpoints off")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--log-every-steps", type=int, default=50)
    p.add_argument(
        "--init-timeout-seconds",
        type=float,
        default=1800.0,
        help="start-up, and waits for rank 0's downloads and uploads (on a gloo side group)",
    )
    p.add_argument(
        "--collective-timeout-seconds",
        type=float,
        default=45.0,
        help="after the first step, a collective waiting longer than this fails the rank (a dead or stuck peer)",
    )
    p.add_argument("--progress-every-seconds", type=float, default=60.0, help="how often rank 0 rewrites progress.json")
    p.add_argument("--model-dir", default=os.environ.get("AIP_MODEL_DIR") or "trainer_output/model")
    p.add_argument("--checkpoint-dir", default=os.environ.get("AIP_CHECKPOINT_DIR") or "trainer_output/checkpoints")
    p.add_argument("--tensorboard-dir", default=os.environ.get("AIP_TENSORBOARD_LOG_DIR") or "trainer_output/logs")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "grad_accum_steps", "log_every_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 < args.validation_fraction < 1:
        p.error("--validation-fraction must be between 0 and 1")
    return args


def model_spec(args: argparse.Namespace) -> dict:
    kwargs = json.loads(args.model_kwargs)
    if args.model == BUILTIN_MLP:
        kwargs = {
            "hidden_sizes": [int(h) for h in args.hidden_sizes.split(",") if h],
            "dropout": args.dropout,
            **kwargs,
        }
    return {"factory": args.model, "kwargs": kwargs}


def train_step(ddp, optimizer, objective, inputs, targets, order, first_micro_batch, args, device):
    """One optimizer step over `grad_accum_steps` micro-batches; gradients are all-reduced only on the last.
    Returns the step's mean loss (a tensor, so reading it does not wait for the device) and the seconds spent
    fetching batches."""
    on_gpu = device.type == "cuda"
    losses, data_seconds = [], 0.0
    for micro in range(args.grad_accum_steps):
        started = time.perf_counter()
        start = (first_micro_batch + micro) * args.batch_size
        rows = order[start : start + args.batch_size]
        x, y = inputs[rows], targets[rows]
        if on_gpu:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        data_seconds += time.perf_counter() - started
        last = micro == args.grad_accum_steps - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            # bf16 autocast on GPUs; on CPU even a disabled autocast context costs time every step.
            with torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else contextlib.nullcontext():
                loss = objective.loss(ddp(x), y)
            (loss / args.grad_accum_steps if args.grad_accum_steps > 1 else loss).backward()
        losses.append(loss.detach())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return (losses[0] if len(losses) == 1 else torch.stack(losses).mean()), data_seconds


def save_checkpoint(checkpoints, step, steps_per_epoch, model, optimizer, history, epoch_losses, device) -> None:
    """Every rank contributes its RNG state and running loss; rank 0 writes; everyone leaves together."""
    rank_state = {
        "cpu_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "epoch_loss": float(sum(epoch_losses)),  # losses of this epoch's steps so far, summed
    }
    rank_states = collectives.gather_objects(rank_state)
    if dist.get_rank() == 0:
        checkpoints.save(
            step,
            {
                "step": step,
                "epoch": step // steps_per_epoch,
                "step_in_epoch": step % steps_per_epoch,
                "steps_per_epoch": steps_per_epoch,
                "world_size": dist.get_world_size(),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rank_states": rank_states,
                "history": history,
            },
        )
    collectives.wait_for_all()


def resume(checkpoints, model, optimizer, steps_per_epoch, device) -> dict | None:
    """Load the newest committed checkpoint, or return None. Rank 0 reads and checks it once and hands it to
    the others: every rank resumes from the same step, and the folder need not be readable from every node."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    found = collectives.from_rank_zero(checkpoints.latest() if rank == 0 else None)
    if found is None:
        return None
    _, state = found
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if state["world_size"] == world_size and state["steps_per_epoch"] == steps_per_epoch:
        torch.set_rng_state(state["rank_states"][rank]["cpu_rng"])
        if device.type == "cuda" and state["rank_states"][rank]["cuda_rng"] is not None:
            torch.cuda.set_rng_state(state["rank_states"][rank]["cuda_rng"], device)
    else:
        logs.warning(
            "checkpoint was written with another world size or batch size; resuming, but not bit-for-bit",
            checkpoint_world_size=state["world_size"],
            world_size=world_size,
        )
    logs.log("resumed from checkpoint", step=state["step"], epoch=state["epoch"], uri=checkpoints.uri)
    return state


def train(args: argparse.Namespace, device: torch.device, stop: StopSignal) -> int:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    is_main = rank == 0
    started = time.monotonic()
    if device.type == "cuda":
        # Same seed and world size → same weights on GPUs too (cuBLAS needs a fixed workspace for that).
        # The CPU kernels used here are deterministic already, and the switch would slow them.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if is_main:
        logs.log("training starts", world_size=world_size, device=str(device), args=vars(args))

    # Data: this rank's rows, turned into tensors with preprocessing statistics that every rank shares.
    data = load_rank_data(args.data, args.format, args.seed, args.validation_fraction)
    train_rows = keep_columns(drop_unlabelled(data.train, args.target), args.target, args.features)
    validation_rows = keep_columns(drop_unlabelled(data.validation, args.target), args.target, args.features)
    prep = Preprocessor.fit(train_rows, args.target, args.task, Combine(across_ranks=data.sharded))
    inputs, targets = prep.features(train_rows), prep.targets(train_rows)
    val_inputs, val_targets = prep.features(validation_rows), prep.targets(validation_rows)
    if not data.sharded:  # every rank holds all validation rows: each evaluates its own slice
        val_inputs, val_targets = val_inputs[rank::world_size], val_targets[rank::world_size]
    if device.type == "cuda":
        inputs, targets = inputs.pin_memory(), targets.pin_memory()
    largest_rank_rows = (
        collectives.max_across_ranks(len(inputs)) if data.sharded else math.ceil(len(inputs) / world_size)
    )
    batches = EpochBatches(
        len(inputs),
        args.batch_size,
        args.grad_accum_steps,
        args.seed,
        rank,
        world_size,
        data.sharded,
        largest_rank_rows,
    )
    steps_per_epoch = batches.steps_per_epoch
    total_steps = args.epochs * steps_per_epoch
    samples_per_step = args.batch_size * args.grad_accum_steps * world_size

    # Model: the same initial weights on every rank; then each rank draws its own dropout masks.
    spec = model_spec(args)
    torch.manual_seed(args.seed)
    model = build_model(spec["factory"], prep.num_features, prep.num_outputs, spec["kwargs"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    torch.manual_seed(args.seed * 7919 + 1 + rank)
    objective = Objective(prep)

    # Resume before DDP wraps the model, so its initial broadcast already carries the restored weights.
    checkpoints = Checkpoints(args.checkpoint_dir, args.keep_checkpoints)
    restored = resume(checkpoints, model, optimizer, steps_per_epoch, device)
    step = restored["step"] if restored else 0
    history: list[dict] = restored["history"] if restored else []
    # Step losses stay tensors until they are reported; a list append is the cheapest way to keep them.
    same_world = restored and len(restored["rank_states"]) == world_size
    epoch_losses = [torch.tensor(restored["rank_states"][rank]["epoch_loss"], device=device)] if same_world else []
    ddp = DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=True,
    )
    ddp.train()

    tensorboard = ScalarWriter(args.tensorboard_dir) if is_main else None
    throughput = Throughput()
    last_checkpoint = last_log = time.monotonic()
    log_losses: list[torch.Tensor] = []
    if is_main:
        logs.log(
            "training loop starts",
            step=step,
            total_steps=total_steps,
            steps_per_epoch=steps_per_epoch,
            global_batch_size=samples_per_step,
            train_rows=len(inputs),
        )
    progress = ProgressRecord(args.checkpoint_dir, args.progress_every_seconds, total_steps, enabled=is_main)
    progress.write(step, step // steps_per_epoch, state="starting", force=True)
    first_step_of_this_process = step + 1
    coordination = Coordination(COORDINATE_EVERY_SECONDS, first_step=step)
    if coordination.agree(step, stop.requested, False, None)[0]:
        logs.warning("stopping before the first step (SIGTERM)", step=step)
        return PREEMPTED_EXIT_CODE

    for epoch in range(step // steps_per_epoch, args.epochs):
        order = batches.order(epoch)
        for step_in_epoch in range(step % steps_per_epoch, steps_per_epoch):
            step_started, step_cpu_started = time.perf_counter(), time.thread_time()
            loss, data_seconds = train_step(
                ddp, optimizer, objective, inputs, targets, order, step_in_epoch * args.grad_accum_steps, args, device
            )
            step += 1
            epoch_losses.append(loss)
            log_losses.append(loss)
            if step == first_step_of_this_process:
                collectives.shorten_timeout(args.collective_timeout_seconds)
            progress.write(step, epoch)

            stop_now = time_due = False
            if coordination.due(step):
                time_due = is_main and 0 < args.checkpoint_every_seconds < time.monotonic() - last_checkpoint
                stop_now, time_due = coordination.agree(step, stop.requested, time_due, throughput.typical_step)

            if is_main and step % args.log_every_steps == 0:
                now = time.monotonic()
                rate = len(log_losses) * samples_per_step / (now - last_log)
                mean_loss = torch.stack(log_losses).mean().item()
                logs.log(
                    "progress",
                    step=step,
                    total_steps=total_steps,
                    epoch=epoch + 1,
                    loss=round(mean_loss, 6),
                    samples_per_second=round(rate, 1),
                    eta_seconds=round((total_steps - step) * samples_per_step / rate, 1),
                )
                tensorboard.add_scalars(step, {"train/loss": mean_loss, "train/samples_per_second": rate})
                last_log, log_losses = now, []
            throughput.add(samples_per_step, time.perf_counter() - step_started, time.thread_time() - step_cpu_started,
                           data_seconds)  # fmt: skip

            if step_in_epoch == steps_per_epoch - 1:
                epoch_loss = collectives.all_reduce(torch.stack(epoch_losses).sum())
                record = {
                    "epoch": epoch + 1,
                    "step": step,
                    "train_loss": epoch_loss.item() / steps_per_epoch / world_size,
                    **objective.evaluate(ddp.module, val_inputs, val_targets, device),
                }
                epoch_losses = []
                history.append(record)
                if is_main:
                    logs.log("evaluation", **record)
                    tensorboard.add_scalars(step, {f"val/{k}": v for k, v in record.items() if k != "epoch"})
                    tensorboard.flush()
                    write_history(args.model_dir, history)

            every_steps = args.checkpoint_every_steps and step % args.checkpoint_every_steps == 0
            if stop_now or time_due or every_steps or step == total_steps:
                save_checkpoint(
                    checkpoints, step, steps_per_epoch, ddp.module, optimizer, history, epoch_losses, device
                )
                last_checkpoint = time.monotonic()
                if is_main:
                    tensorboard.flush()
            if stop_now:
                logs.warning("stopped by SIGTERM after a committed checkpoint", step=step)
                return PREEMPTED_EXIT_CODE

    metrics = {
        "task": prep.task,
        "target": args.target,
        "metric": objective.metric,
        **(history[-1] if history else {}),
        **throughput.summary(),
        "world_size": world_size,
        "resumed_from_step": restored["step"] if restored else None,
        "steps": step,
        "global_batch_size": samples_per_step,
        "train_rows": collectives.sum_across_ranks(len(inputs)) if data.sharded else len(inputs),
        "validation_rows": collectives.sum_across_ranks(len(val_inputs)),
        "seed": args.seed,
        "elapsed_seconds": round(time.monotonic() - started, 3),
    }
    if is_main:
        tensorboard.flush()
        write_outputs(args.model_dir, ddp.module, spec, prep, metrics, history)
        progress.write(step, args.epochs, state="finished", force=True)
        logs.log("training finished", **metrics)
    collectives.wait_for_all()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopSignal()
    stop_when_launcher_dies()
    with process_group(args.init_timeout_seconds) as device:
        try:
            return train(args, device, stop)
        except Exception as e:
            logs.error(f"training failed: {type(e).__name__}: {e}")
            report_failure(args.model_dir, e)
            raise


if __name__ == "__main__":
    sys.exit(main())
