"""The command line of `python -m trainer.train`: every setting of a training run, checked before anything
starts."""

from __future__ import annotations

import argparse
import json
import math
import os

from trainer.data import FORMATS
from trainer.model import BUILTIN_MLP
from trainer.preprocess import TASKS

DESCRIPTION = "The per-process training program that torchrun starts on every rank."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=DESCRIPTION)
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
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="DDP gradient bucket size (default: DDP's, with its small first bucket); 64 with Reduction Server",
    )
    p.add_argument(
        "--early-stopping-patience",
        type=int,
        default=0,
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
    p.add_argument("--model-dir", default=os.environ.get("AIP_MODEL_DIR") or "trainer_output/model")
    p.add_argument("--checkpoint-dir", default=os.environ.get("AIP_CHECKPOINT_DIR") or "trainer_output/checkpoints")
    p.add_argument("--tensorboard-dir", default=os.environ.get("AIP_TENSORBOARD_LOG_DIR") or "trainer_output/logs")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "grad_accum_steps", "log_every_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 < args.validation_fraction < 1:
        p.error("--validation-fraction must be between 0 and 1")
    if args.max_drift is not None and not (math.isfinite(args.max_drift) and args.max_drift > 0):
        p.error("--max-drift must be a number above 0 (0.25 is a major shift; 0.1 a moderate one)")
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


def wants_determinism(args: argparse.Namespace) -> bool:
    """Whether GPU runs use deterministic algorithms: asked for, or by default for the built-in MLP only."""
    if args.deterministic != "auto":
        return args.deterministic == "on"
    return args.model == BUILTIN_MLP
