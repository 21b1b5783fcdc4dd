"""The command line of `python -m trainer.train`: every setting of a training run, checked before anything
starts."""

from __future__ import annotations

import argparse
import json
import math
import os

from trainer.data.preprocess import TASKS
from trainer.data.tables import FORMATS
from trainer.model.network import BUILTIN_MLP
from trainer.request_defaults import DATASET, HYPERPARAMETERS

# Every training setting a request can carry defaults to the request's own default (schemas/request.py, generated
# into trainer/request_defaults.py), so that `python -m trainer.train` without flags trains as a request does.
HP = HYPERPARAMETERS

DESCRIPTION = "The per-process training program that torchrun starts on every rank."

# The model's decision rule (issue 38) is the controller's, which passes these only with a model block; these are
# the trainer's own defaults for a run without one, not a request's, so they live here.
CONFIDENCE = 0.95
MIN_CHAMPION_SKILL = -0.1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=DESCRIPTION)
    p.add_argument("--data", required=True, help="gs://…, /gcs/… or local path: a CSV/Parquet file or a folder of them")
    p.add_argument("--target", required=True, help="the column to predict")
    p.add_argument(
        "--format", default=DATASET["format"], choices=FORMATS, help="file format; auto goes by file extension"
    )
    p.add_argument(
        "--task",
        default=HP["task"],
        choices=TASKS,
        help="auto: classification for string/bool targets and integer targets with ≤ 32 values",
    )
    p.add_argument(
        "--features",
        type=lambda text: [c for c in text.split(",") if c],
        default=None,
        help="comma-separated feature columns (default: every column but the target)",
    )
    p.add_argument("--validation-fraction", type=float, default=DATASET["validation_fraction"])
    p.add_argument(
        "--memory-budget-mb",
        type=float,
        default=None,
        help="memory a rank may fill with its share of the data; a larger share is streamed (shards read in turn, "
        "shuffled in a bounded buffer). Default: half the node's memory over its ranks",
    )
    p.add_argument("--epochs", type=int, default=HP["epochs"])
    p.add_argument("--batch-size", type=int, default=HP["batch_size"], help="rows per micro-batch per process")
    p.add_argument(
        "--grad-accum-steps",
        type=int,
        default=HP["gradient_accumulation_steps"],
        help="micro-batches per optimizer step",
    )
    p.add_argument("--learning-rate", type=float, default=HP["learning_rate"])
    p.add_argument("--weight-decay", type=float, default=HP["weight_decay"])
    p.add_argument("--seed", type=int, default=HP["seed"])
    p.add_argument("--model", default=BUILTIN_MLP, help="module:factory returning an nn.Module (default: the MLP)")
    p.add_argument("--model-kwargs", default="{}", help="JSON object of extra arguments for the model factory")
    p.add_argument(
        "--hidden-sizes",
        default=",".join(map(str, HP["hidden_sizes"])),
        help="built-in MLP: comma-separated hidden layer widths",
    )
    p.add_argument("--dropout", type=float, default=HP["dropout"], help="built-in MLP: dropout after each hidden layer")
    p.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="DDP gradient bucket size (default: DDP's, with its small first bucket); 64 with Reduction Server",
    )
    p.add_argument(
        "--early-stopping-patience",
        type=int,
        default=HP["early_stopping_patience"],
        help="stop after this many epochs without a better validation metric (0: train every epoch)",
    )
    p.add_argument(
        "--deterministic",
        choices=("auto", "on", "off"),
        default="auto",
        help="bitwise-reproducible GPU kernels; auto: on for the built-in MLP, off for a custom --model "
        "(common ops such as index_add_ or scatter_ have no deterministic CUDA kernel and would raise)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model (worth it for larger models)")
    p.add_argument(
        "--checkpoint-every-steps",
        type=int,
        default=HP["checkpoint_every_steps"],
        help="0 turns step-based checkpoints off",
    )
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
    p.add_argument(
        "--champion-model-dir",
        default=None,
        help="the model in use (a folder holding its model.pt: gs://…, /gcs/… or local): the data's drift from its "
        "schema.json is measured before training, and after training it is scored on this run's own validation rows; "
        "the figures go to metrics.json",
    )
    p.add_argument(
        "--max-drift",
        type=float,
        default=None,
        help="with --champion-model-dir: stop before training when a feature's drift from the champion's data "
        "(population stability index) is above this; without it drift is only reported",
    )
    add_evidence_flags(p)
    p.add_argument("--model-dir", default=os.environ.get("AIP_MODEL_DIR") or "trainer_output/model")
    p.add_argument("--checkpoint-dir", default=os.environ.get("AIP_CHECKPOINT_DIR") or "trainer_output/checkpoints")
    p.add_argument("--tensorboard-dir", default=os.environ.get("AIP_TENSORBOARD_LOG_DIR") or "trainer_output/logs")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "grad_accum_steps", "log_every_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.memory_budget_mb is not None and not (math.isfinite(args.memory_budget_mb) and args.memory_budget_mb > 0):
        p.error("--memory-budget-mb must be a number above 0")
    if not 0 < args.validation_fraction < 1:
        p.error("--validation-fraction must be between 0 and 1")
    if args.max_drift is not None and not (math.isfinite(args.max_drift) and args.max_drift > 0):
        p.error("--max-drift must be a number above 0 (0.25 is a major shift; 0.1 a moderate one)")
    check_evidence_flags(p, args)
    return args


def add_evidence_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the evidence the challenger does not choose (trainer/judging/evidence.py)."""
    p.add_argument(
        "--reference-data",
        default=None,
        help="the model's reference rows, every column (a CSV/Parquet file or folder, read like --data, at most "
        "100,000 rows): the champion is scored on them before training and this run's model after it",
    )
    p.add_argument(
        "--write-reference-rows",
        action="store_true",
        help="write a sample of this run's validation rows (at most 20,000, every column) as reference.parquet "
        "beside the model: the controller asks for it while the model has no reference set",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=CONFIDENCE,
        help="level of the paired bootstrap interval of the improvement on the reference rows (0.5 < C < 1)",
    )
    p.add_argument(
        "--min-champion-skill",
        type=float,
        default=MIN_CHAMPION_SKILL,
        help="with --champion-model-dir: stop before training when the champion's skill on these rows is below "
        "this while it has skill on its reference set (1 perfect, 0 no better than the most frequent class or mean)",
    )
    p.add_argument(
        "--max-target-drift",
        type=float,
        default=None,
        help="with --champion-model-dir: stop before training when the target's drift from the champion's data "
        "(population stability index) is above this; without it the target's drift is only reported",
    )


def check_evidence_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not (math.isfinite(args.confidence) and 0.5 < args.confidence < 1):
        p.error("--confidence must be above 0.5 and below 1 (0.95: a 95% interval)")
    if not (math.isfinite(args.min_champion_skill) and args.min_champion_skill <= 1):
        p.error("--min-champion-skill must be a number of at most 1 (1 is a perfect score, 0 the trivial one)")
    if args.max_target_drift is not None and not (math.isfinite(args.max_target_drift) and args.max_target_drift > 0):
        p.error("--max-target-drift must be a number above 0 (0.25 is a major shift; 0.1 a moderate one)")


def model_spec(args: argparse.Namespace) -> dict:
    kwargs = json.loads(args.model_kwargs)
    if args.model == BUILTIN_MLP:
        kwargs = {
            "hidden_sizes": [int(h) for h in args.hidden_sizes.split(",") if h],
            "dropout": args.dropout,
            **kwargs,
        }
    return {"factory": args.model, "kwargs": kwargs}


def wants_determinism(args: argparse.Namespace) -> bool:
    """Whether GPU runs use deterministic algorithms: asked for, or by default for the built-in MLP only."""
    if args.deterministic != "auto":
        return args.deterministic == "on"
    return args.model == BUILTIN_MLP
