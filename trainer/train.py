"""The per-process training program that torchrun starts on every rank: `python -m trainer.train ARGS`.

Read top to bottom: `set_up` (data, the champion and the label check — trainer/judging/evidence.py — model, resume:
everything decided once), `train_step` (one optimizer step), `train` (the loop: steps, agreement between ranks,
evaluation, checkpoints), `finish` (outputs). Rank 0 logs progress and writes checkpoints and outputs; nothing else
differs between ranks. For a given seed and world size a run is deterministic, and a run stopped by SIGTERM and
resumed ends with the same weights as one that never stopped. Flags: `trainer/flags.py`; what a checkpoint
holds: `trainer/checkpoints/state.py`.
"""

from __future__ import annotations

import gc

gc.disable()  # over the imports, on again below them: trainer/collector.py says why

import argparse
import contextlib
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer import collector, logs
from trainer.checkpoints.committed import Checkpoints
from trainer.checkpoints.state import StepLosses, TrainState
from trainer.data import memory_budget, streaming
from trainer.data.batches import EpochBatches
from trainer.data.column_flags import feature_warnings
from trainer.data.preprocess import Combine, FitAccumulator, Preprocessor, drop_unlabelled, keep_columns
from trainer.data.schema import DataDescription, describe, description_of, merge_types, schema_bytes
from trainer.data.streaming import WindowedStream, numeric_columns
from trainer.data.tables import Shard, concat_tables, list_shards, load_rank_data
from trainer.distributed import collectives, net_plugin
from trainer.distributed.process_group import (
    PREEMPTED_EXIT_CODE,
    Coordination,
    StopSignal,
    process_group,
    stop_when_launcher_dies,
)
from trainer.flags import model_spec, parse_args, wants_determinism
from trainer.judging.drift import drift_against_champion, refused_by_earlier_attempt
from trainer.judging.evidence import Evidence, after_training, before_training
from trainer.judging.label_check import LabelsChanged
from trainer.judging.reference_set import parquet_bytes, validation_sample
from trainer.model import gpu_feeding
from trainer.model.network import BUILTIN_MLP, build_model
from trainer.model.objective import Objective
from trainer.outputs.model_folder import RunRefused, report_failure, write_history, write_outputs
from trainer.outputs.progress import ProgressRecord
from trainer.outputs.tensorboard import DiscardedScalars, ScalarWriter
from trainer.outputs.throughput import Throughput
from trainer.storage.folders import size_of

gc.enable()

PROCESS_STARTED = time.time()  # the process's start, near enough: its imports take most of the time before set_up
COORDINATE_EVERY_SECONDS = 0.5  # how often ranks agree on stopping and on a time-based checkpoint


@dataclass
class Tables:
    """This rank's rows as tensors, preprocessed with statistics every rank shares."""

    inputs: torch.Tensor
    targets: torch.Tensor
    val_inputs: torch.Tensor
    val_targets: torch.Tensor
    prep: Preprocessor
    sharded: bool
    description: DataDescription  # what the data look like: schema.json
    drift: dict  # the drift entries of metrics.json ({} without a champion)
    champion_rows: pa.Table | None = None  # the rows of val_inputs with every column, to score a champion on
    stream: WindowedStream | None = None  # training rows streamed (inputs and targets then empty)
    reference_sample: pa.Table | None = None  # rank 0, without --reference-data: reference.parquet's rows

    @property
    def train_rows(self) -> int:
        return self.stream.rows if self.stream is not None else len(self.inputs)


@dataclass
class Run:
    """Everything `set_up` decides once and the loop reads."""

    args: argparse.Namespace
    device: torch.device
    tables: Tables
    batches: EpochBatches
    objective: Objective
    spec: dict
    ddp: DDP
    forward: Callable[..., torch.Tensor]  # the DDP module, compiled with --compile
    bf16: bool  # autocast on GPUs that run bf16 natively
    state: TrainState
    checkpoints: Checkpoints
    started: float
    evidence: (
        Evidence  # the champion's figures, the label check's verdict, the reference rows (trainer/judging/evidence.py)
    )

    @property
    def is_main(self) -> bool:
        return dist.get_rank() == 0

    @property
    def total_steps(self) -> int:
        return self.args.epochs * self.batches.steps_per_epoch

    @property
    def samples_per_step(self) -> int:
        return self.args.batch_size * self.args.grad_accum_steps * dist.get_world_size()


def memory_budget_bytes(args: argparse.Namespace) -> int:
    if args.memory_budget_mb is not None:
        return int(args.memory_budget_mb * 2**20)
    return memory_budget.default_budget_bytes(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def load_tables(args: argparse.Namespace, device: torch.device) -> Tables:
    """This rank's rows — held in memory, or streamed when the rank's share does not fit its memory budget (every
    rank streams when one must) — described (schema.json) and, with a champion, compared with its data before
    anything else is done with them, so drifted data stop the run (DataDrift, on every rank) before the first
    epoch."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shards = list_shards(args.data, args.format)
    mine = shards[rank::world_size] if len(shards) >= world_size else shards
    budget = memory_budget_bytes(args)
    if collectives.max_across_ranks(int(memory_budget.must_stream([(size_of(s.uri), s.format) for s in mine], budget))):
        return load_streamed(args, shards, budget, device)
    data = load_rank_data(args.data, args.format, args.seed, args.validation_fraction)
    combine = Combine(across_ranks=data.sharded)
    rows = data.rows
    description = describe(rows, args.target, args.features, data.data_format, combine, args.seed)
    drift = {}
    if args.champion_model_dir:
        drift = drift_against_champion(args.champion_model_dir, rows, description, combine, args.max_drift)
    del rows
    labelled_validation = drop_unlabelled(data.validation, args.target)
    validation_rows = keep_columns(labelled_validation, args.target, args.features)
    train_parts = [keep_columns(drop_unlabelled(p, args.target), args.target, args.features) for p in data.train_parts]
    data.train_parts, data.validation = [], pa.table({})  # the Arrow rows live on only in these lists
    prep = Preprocessor.fit(concat_tables(train_parts), args.target, args.task, combine)
    val_inputs, val_targets = prep.features(validation_rows), prep.targets(validation_rows)
    del validation_rows
    if not data.sharded:  # every rank holds all validation rows: each evaluates its own slice
        val_inputs, val_targets = val_inputs[rank::world_size], val_targets[rank::world_size]
        if args.champion_model_dir or args.write_reference_rows:
            labelled_validation = labelled_validation.take(np.arange(rank, labelled_validation.num_rows, world_size))
    # A champion reads the same rows through its own preprocessing, so it gets them with every column: it may
    # need a column this run's --features leaves out. reference.parquet keeps every column too.
    champion_rows = labelled_validation if args.champion_model_dir else None
    sample = validation_sample(labelled_validation) if args.write_reference_rows else None
    del labelled_validation
    # Converted part by part, each part's Arrow rows released as soon as its tensors are filled.
    inputs, targets = prep.tensors_of_parts(train_parts)
    return Tables(inputs, targets, val_inputs, val_targets, prep, data.sharded, description, drift, champion_rows,
                  reference_sample=sample)  # fmt: skip


def load_streamed(args: argparse.Namespace, shards: list[Shard], budget: int, device: torch.device) -> Tables:
    """The streamed path (trainer/data/streaming.py): one statistics pass over the rank's blocks, validation rows kept,
    training rows read window by window while training."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    sharded = len(shards) >= world_size
    files = streaming.open_files(list(enumerate(shards))[rank::world_size] if sharded else list(enumerate(shards)),
                                 streaming.default_cache())  # fmt: skip
    for file in files:
        file.validation = streaming.validation_mask(file.rows, file.shard, args.seed, args.validation_fraction)
    blocks = [b for f in files for b in f.blocks]
    mine = set(blocks if sharded else blocks[rank::world_size])
    combine = Combine(across_ranks=True)  # ranks read different blocks
    seen = combine.gather(([f.schema for f in files], sum(b.rows for b in mine)))
    schemas = [schema for rank_schemas, _ in seen for schema in rank_schemas]
    types = merge_types(schemas)
    if args.target not in types:
        raise ValueError(f"--target {args.target!r} is not a column of the data; columns are {list(types)}")
    features = [c for c in (args.features or types) if c != args.target]
    missing = [c for c in features if c not in types]
    if missing:
        raise ValueError(f"--features {missing} are not columns of the data; columns are {list(types)}")
    with_target = [s for s in schemas if args.target in s.names]
    target_type = pa.unify_schemas([pa.schema([s.field(args.target)]) for s in with_target],
                                   promote_options="permissive").field(args.target).type  # fmt: skip
    accumulator = FitAccumulator(args.target, features, numeric_columns(types, schemas, features), target_type)
    streaming.log_layout(files, mine, 0, budget)
    found = streaming.statistics_pass(files, mine, types, accumulator, args.target, args.features, args.seed)
    description = description_of(sum(n for _, n in seen), types, found.summaries, args.target, args.features,
                                 files[0].format, combine)  # fmt: skip
    labelled_validation = concat_tables(found.validation)
    drift = {}
    if args.champion_model_dir:  # measured on the validation rows: a seeded sample of every row
        drift = drift_against_champion(args.champion_model_dir, labelled_validation, description, combine,
                                       args.max_drift)  # fmt: skip
    prep = accumulator.finish(args.task, combine)
    validation_rows = keep_columns(labelled_validation, args.target, args.features)
    val_inputs, val_targets = prep.features(validation_rows), prep.targets(validation_rows)
    window_rows = max(streaming.window_rows_for(budget, prep), args.batch_size * args.grad_accum_steps)
    stream = streaming.WindowedStream(files, found.train_rows, prep, args.target, args.features, window_rows,
                                      args.seed, rank, device)  # fmt: skip
    if rank == 0:
        logs.log("training rows streamed", window_rows=window_rows, train_rows=stream.rows)
    empty = torch.zeros(0)
    champion_rows = labelled_validation if args.champion_model_dir else None
    sample = validation_sample(labelled_validation) if args.write_reference_rows else None
    return Tables(empty, empty, val_inputs, val_targets, prep, True, description, drift, champion_rows, stream,
                  sample)  # fmt: skip


def data_warnings(description: DataDescription) -> dict[str, list[str]]:
    """metrics.json's `data_warnings` (so the `succeeded` event carries them): the features that look like an ID or a
    constant over every row read, which a request's `dataset.features` should leave out (issue 44); {} when none."""
    found = feature_warnings(description.columns, description.rows)
    return {"data_warnings": found} if found else {}


def set_up(args: argparse.Namespace, device: torch.device) -> Run:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    started = time.monotonic()
    if device.type == "cuda" and wants_determinism(args):
        # Same seed and world size → same weights on GPUs too (cuBLAS needs a fixed workspace for that).
        # The CPU kernels used here are deterministic already, and the switch would slow them.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if rank == 0:
        logs.log("training starts", world_size=world_size, device=str(device), args=vars(args))

    bf16 = gpu_feeding.configure(device)
    if args.champion_model_dir:
        refused = refused_by_earlier_attempt(args.model_dir, kinds=(LabelsChanged,))
        if refused is not None:
            raise refused
    tables = load_tables(args, device)
    if (warned := data_warnings(tables.description)) and dist.get_rank() == 0:
        logs.warning("features that look like no feature (an ID or a constant): still used", **warned)
    # The champion is scored and the labels checked before anything is built: a refusal stops every rank here.
    factories = {BUILTIN_MLP, args.model}  # the only code this run already trusts
    evidence = before_training(args, tables.champion_rows, tables.prep, tables.drift, factories, device)
    tables.champion_rows = None
    # The tables go to the device once; batches are then gathered there, not copied over every step.
    tables.inputs, tables.targets = tables.inputs.to(device), tables.targets.to(device)
    rows = tables.train_rows
    largest_rank_rows = collectives.max_across_ranks(rows) if tables.sharded else math.ceil(rows / world_size)
    batches = EpochBatches(rows, args.batch_size, args.grad_accum_steps, args.seed, rank, world_size,
                           tables.sharded, largest_rank_rows)  # fmt: skip

    # Model: the same initial weights on every rank; then each rank draws its own dropout masks.
    spec = model_spec(args)
    torch.manual_seed(args.seed)
    model = build_model(spec["factory"], tables.prep.num_features, tables.prep.num_outputs, spec["kwargs"])
    model = model.to(device)
    optimizer = gpu_feeding.make_optimizer(model, args, device)
    torch.manual_seed(args.seed * 7919 + 1 + rank)
    state = TrainState(model, optimizer, batches.steps_per_epoch, world_size)

    # Resume before DDP wraps the model, so its initial broadcast already carries the restored weights.
    checkpoints = Checkpoints(args.checkpoint_dir, args.keep_checkpoints)
    resume(checkpoints, state, device)
    ddp = gpu_feeding.wrap(model, device, args.bucket_cap_mb)
    ddp.train()
    forward = gpu_feeding.forward_of(ddp, args.compile)
    return Run(args, device, tables, batches, Objective(tables.prep), spec, ddp, forward, bf16, state, checkpoints,
               started, evidence)  # fmt: skip


def resume(checkpoints: Checkpoints, state: TrainState, device: torch.device) -> None:
    """Load the newest committed checkpoint, if any. Rank 0 reads and checks it once and hands it to the others:
    every rank resumes from the same step, and the folder need not be readable from every node."""
    found = collectives.from_rank_zero(checkpoints.latest() if dist.get_rank() == 0 else None)
    if found is None:
        return
    _, saved = found
    state.load_state_dict(saved, dist.get_rank(), device)
    logs.log("resumed from checkpoint", step=state.step, epoch=state.epoch, uri=checkpoints.uri)


def save_checkpoint(run: Run) -> None:
    """Every rank contributes its RNG state and running loss; rank 0 copies the state and uploads the copy in
    the background (after waiting for its previous upload); everyone leaves together, on the side group."""
    rank_states = collectives.gather_objects(run.state.rank_state(run.device))
    if run.is_main:
        run.checkpoints.start_save(run.state.step, run.state.state_dict(rank_states))
    collectives.wait_for_all()


def wait_for_checkpoint(run: Run) -> None:
    """Before the process ends: every rank waits, on the side group, until rank 0's upload is committed — a rank
    that left earlier would have torchrun stop the group and kill rank 0 mid-upload."""
    if run.is_main:
        run.checkpoints.wait()
    collectives.wait_for_all()


def train_step(run: Run, order: torch.Tensor | None, step_in_epoch: int, epoch: int) -> tuple[torch.Tensor, float]:
    """One optimizer step over `grad_accum_steps` micro-batches; gradients are all-reduced only on the last.
    Returns the step's mean loss (a tensor, so reading it does not wait for the device) and the seconds spent
    fetching batches."""
    args, tables = run.args, run.tables
    losses, data_seconds = [], 0.0
    for micro in range(args.grad_accum_steps):
        started = time.perf_counter()
        start = (step_in_epoch * args.grad_accum_steps + micro) * args.batch_size
        if order is None:  # streamed: the rows at these positions of the epoch's stream
            assert tables.stream is not None
            x, y = tables.stream.micro_batch(epoch, start, args.batch_size)
        else:
            rows = order[start : start + args.batch_size]
            x, y = tables.inputs[rows], tables.targets[rows]
        data_seconds += time.perf_counter() - started
        last = micro == args.grad_accum_steps - 1
        with contextlib.nullcontext() if last else run.ddp.no_sync():
            # Only an enabled autocast is entered: on CPU even a disabled context costs time every step.
            with torch.autocast("cuda", dtype=torch.bfloat16) if run.bf16 else contextlib.nullcontext():
                loss = run.objective.loss(run.forward(x), y)
            (loss / args.grad_accum_steps if args.grad_accum_steps > 1 else loss).backward()
        losses.append(loss.detach())
    run.state.optimizer.step()
    run.state.optimizer.zero_grad(set_to_none=True)
    return (losses[0] if len(losses) == 1 else torch.stack(losses).mean()), data_seconds


def evaluate(run: Run, epoch: int, tensorboard: ScalarWriter | DiscardedScalars) -> None:
    """End of an epoch: the mean training loss over every rank and the validation metrics, recorded; the model
    is kept when its validation metric is the best so far. Every rank sees the same all-reduced numbers, so every
    rank keeps the same epoch and agrees on stopping early."""
    state = run.state
    epoch_loss = collectives.all_reduce(state.epoch_losses.tensor().sum())
    record = {
        "epoch": epoch + 1,
        "step": state.step,
        "train_loss": epoch_loss.item() / state.steps_per_epoch / dist.get_world_size(),
        **run.objective.evaluate(run.ddp.module, run.tables.val_inputs, run.tables.val_targets, run.device),
    }
    state.epoch_losses.clear()
    state.history.append(record)
    state.keep_if_best(record, run.objective.better)
    if run.is_main:
        logs.log("evaluation", **record)
        tensorboard.add_scalars(state.step, {f"val/{k}": v for k, v in record.items() if k != "epoch"})
        tensorboard.flush()
        write_history(run.args.model_dir, state.history)


def train(run: Run, stop: StopSignal) -> int:
    args, state = run.args, run.state
    steps_per_epoch, total_steps = state.steps_per_epoch, run.total_steps
    tensorboard = ScalarWriter(args.tensorboard_dir) if run.is_main else DiscardedScalars()
    progress = ProgressRecord(args.checkpoint_dir, args.progress_every_seconds, total_steps, enabled=run.is_main,
                              process_started=PROCESS_STARTED)  # fmt: skip
    throughput = Throughput()
    coordination = Coordination(COORDINATE_EVERY_SECONDS, first_step=state.step)
    first_step_of_this_process = state.step + 1
    last_checkpoint = last_log = time.monotonic()
    log_losses = StepLosses(args.log_every_steps)
    if run.is_main:
        logs.log("training loop starts", step=state.step, total_steps=total_steps, steps_per_epoch=steps_per_epoch,
                 global_batch_size=run.samples_per_step, train_rows=run.tables.train_rows,
                 peak_rss_mb=peak_rss_mb())  # fmt: skip
    progress.write(state.step, state.epoch, state="starting", force=True)
    if coordination.agree(state.step, stop.requested, False, None)[0]:
        logs.warning("stopping before the first step (SIGTERM)", step=state.step)
        return PREEMPTED_EXIT_CODE

    for epoch in range(state.epoch, args.epochs):
        if stopping_early(run):
            break
        order = run.batches.order(epoch).to(run.device) if run.tables.stream is None else None
        for step_in_epoch in range(state.step % steps_per_epoch, steps_per_epoch):
            step_started, step_cpu_started = time.perf_counter(), time.thread_time()
            loss, data_seconds = train_step(run, order, step_in_epoch, epoch)
            state.step += 1
            state.epoch_losses.append(loss)
            if run.is_main:  # only rank 0 logs them (and empties it when it does)
                log_losses.append(loss)
            if state.step == first_step_of_this_process:
                collectives.shorten_timeout(args.collective_timeout_seconds)
                if run.device.type == "cuda" and os.environ.get("LOCAL_RANK", "0") == "0":
                    net_plugin.report_loaded(os.environ)  # NCCL has started by now: one line per node
            progress.stepped(state.step, epoch)

            # Every rank checks at the same steps whether any rank got SIGTERM or rank 0's clock wants a checkpoint.
            stop_now = time_due = False
            if coordination.due(state.step):
                time_due = run.is_main and 0 < args.checkpoint_every_seconds < time.monotonic() - last_checkpoint
                stop_now, time_due = coordination.agree(state.step, stop.requested, time_due, throughput.typical_step)

            if run.is_main and state.step % args.log_every_steps == 0:
                now = time.monotonic()
                rate = len(log_losses) * run.samples_per_step / (now - last_log)
                mean_loss = log_losses.tensor().mean().item()
                logs.log("progress", step=state.step, total_steps=total_steps, epoch=epoch + 1,
                         loss=round(mean_loss, 6), samples_per_second=round(rate, 1),
                         eta_seconds=round((total_steps - state.step) * run.samples_per_step / rate, 1))  # fmt: skip
                tensorboard.add_scalars(state.step, {"train/loss": mean_loss, "train/samples_per_second": rate})
                last_log = now
                log_losses.clear()
            throughput.add(run.samples_per_step, time.perf_counter() - step_started,
                           time.thread_time() - step_cpu_started, data_seconds)  # fmt: skip

            if step_in_epoch == steps_per_epoch - 1:
                evaluate(run, epoch, tensorboard)

            every_steps = args.checkpoint_every_steps and state.step % args.checkpoint_every_steps == 0
            last = state.step == total_steps or (step_in_epoch == steps_per_epoch - 1 and stopping_early(run))
            if stop_now or time_due or every_steps or last:
                save_checkpoint(run)
                last_checkpoint = time.monotonic()
                if run.is_main:
                    tensorboard.flush()
            if stop_now:
                progress.write(state.step, epoch, force=True)  # the steps this process ran, for the next one
                wait_for_checkpoint(run)
                logs.warning("stopped by SIGTERM after a committed checkpoint", step=state.step)
                return PREEMPTED_EXIT_CODE

    wait_for_checkpoint(run)
    finish(run, throughput, tensorboard, progress)
    progress.write(state.step, state.epoch, state="finished", force=True)
    collectives.wait_for_all()
    return 0


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def stopping_early(run: Run) -> bool:
    """--early-stopping-patience epochs have passed without a better validation metric."""
    patience = run.args.early_stopping_patience
    return patience > 0 and run.state.epochs_without_improvement() >= patience


def finish(
    run: Run, throughput: Throughput, tensorboard: ScalarWriter | DiscardedScalars, progress: ProgressRecord
) -> None:
    """The final metrics (with the champion's, scored on the same validation rows before training, when there is
    one), and on rank 0 the figures on the reference rows (trainer/judging/evidence.py) and the model and metrics files
    (`_SUCCESS` last)."""
    args, state, tables = run.args, run.state, run.tables
    rows = tables.train_rows
    if run.is_main and stopping_early(run) and state.best_record is not None:
        logs.log("stopped early", epoch=state.history[-1]["epoch"], best_epoch=state.best_record["epoch"],
                 patience=args.early_stopping_patience)  # fmt: skip
    metrics = {
        "task": tables.prep.task,
        "target": args.target,
        "metric": run.objective.metric,
        **(state.best_record or {}),  # the kept model's evaluation; `epoch` says which one it was
        "best_epoch": state.best_record["epoch"] if state.best_record else None,
        "epochs_trained": state.history[-1]["epoch"] if state.history else 0,
        "stopped_early": stopping_early(run),
        **throughput.summary(),
        "world_size": dist.get_world_size(),
        "resumed_from_step": state.resumed_from_step,
        "steps": state.step,
        # Time to first step and runtime goodput (issue 43; trainer/outputs/progress.py): rank 0's figures.
        **progress.figures(),
        "steps_kept": state.step,
        "global_batch_size": run.samples_per_step,
        "train_rows": collectives.sum_across_ranks(rows) if tables.sharded else rows,
        "validation_rows": collectives.sum_across_ranks(len(tables.val_inputs)),
        "seed": args.seed,
        "elapsed_seconds": round(time.monotonic() - run.started, 3),
        "peak_rss_mb": peak_rss_mb(),  # rank 0's: how near its share came to the node's memory
        **tables.drift,
        **data_warnings(tables.description),
        **run.evidence.metrics,  # the champion's figures on these rows, measured before training
    }
    if run.is_main:
        tensorboard.flush()
        model = run.ddp.module
        if state.best_weights is not None:  # the best epoch's weights, not the last epoch's
            model.load_state_dict(state.best_weights)
        metrics |= after_training(run.evidence, model, tables.prep, args.confidence, run.device)
        prep = tables.prep
        classes = dict(zip(prep.classes, prep.class_counts, strict=True)) if prep.task == "classification" else None
        schema = schema_bytes(tables.description.document(task=prep.task, class_counts=classes))
        sample = tables.reference_sample
        reference = parquet_bytes(sample) if sample is not None else None
        write_outputs(args.model_dir, model, run.spec, prep, metrics, state.history, schema, reference)
        logs.log("training finished", **metrics)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopSignal()
    stop_when_launcher_dies()
    with process_group(args.init_timeout_seconds) as device:
        try:
            with collector.paused():
                run = set_up(args, device)
            return train(run, stop)
        except RunRefused as e:  # every rank stops here together: one log line, one note
            if dist.get_rank() == 0:
                logs.error(f"training refused: {e}", reason=e.reason)
                report_failure(args.model_dir, e)
            # No rank leaves before the note is written: torchrun ends the whole group when the first one exits.
            collectives.wait_for_all()
            return 1
        except Exception as e:
            logs.error(f"training failed: {type(e).__name__}: {e}")
            report_failure(args.model_dir, e)
            raise


if __name__ == "__main__":
    sys.exit(main())
