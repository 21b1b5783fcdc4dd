"""Scoring the model in use — the champion — on this run's own validation rows, after training, so that the
controller compares challenger and champion on the same data (`--champion-model-dir`).

The champion's `model.pt` carries its own preprocessing, so it reads the raw rows as it was trained to. Every rank
scores its own validation rows (the very rows, and the same split, that the challenger's figures come from) and
the sums are all-reduced, exactly as the challenger's evaluation is. A champion that cannot score these rows — a
column it needs is gone, a label it never saw, a different target or task, an unreadable file — is reported in
`champion_error` and the run goes on: a new model must never fail because the old one no longer fits the data.

The file was written by another run, so it is read with a size bound, unpickled as plain values and tensors
only, and may be built only by the built-in MLP or this run's own `--model` (trainer/outputs.py).
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
import torch
import torch.distributed as dist

from trainer import collectives, logs
from trainer.objective import Objective
from trainer.outputs import MODEL_FILE, model_from_bytes
from trainer.preprocess import Preprocessor
from trainer.storage import open_folder

MAX_CHAMPION_BYTES = 1 << 30  # model.pt of the built-in MLP is kilobytes; a user's --model may be far larger
MAX_ERROR_CHARS = 500


def read_champion(model_dir: str) -> bytes:
    """The bytes of the champion's `model.pt`, refused beyond MAX_CHAMPION_BYTES without reading further."""
    return open_folder(model_dir).read_at_most(MODEL_FILE, MAX_CHAMPION_BYTES)


def check_comparable(champion: Preprocessor, run: Preprocessor) -> None:
    """Raise ValueError when the champion predicts something else than this run: another target or task."""
    if champion.target != run.target:
        raise ValueError(f"the champion predicts {champion.target!r}, this run predicts {run.target!r}")
    if champion.task != run.task:
        raise ValueError(f"the champion is a {champion.task} model, this run trains {run.task}")


def local_champion_sums(
    data: bytes, source: str, rows: pa.Table, run_prep: Preprocessor, factories: Collection[str], device: torch.device
) -> tuple[Objective, torch.Tensor]:
    """The champion's evaluation sums over this rank's validation `rows` (with every column of the data), and the
    objective that turns the all-reduced sums into its figures. Raises on anything that stops it scoring."""
    model, prep = model_from_bytes(data, source, allowed_factories=factories)
    check_comparable(prep, run_prep)
    objective = Objective(prep)
    try:
        inputs, targets = prep.features(rows), prep.targets(rows)
    except ValueError as e:
        raise ValueError(f"the champion cannot read this run's validation rows: {e}") from e
    return objective, objective.local_sums(model.to(device), inputs, targets, device)


def score_champion(
    model_dir: str, rows: pa.Table, run_prep: Preprocessor, factories: Collection[str], device: torch.device
) -> dict:
    """Every rank calls this after training with its own validation rows; every rank gets the same result: the
    champion's figures as `champion_val_<metric>` plus where and on how many rows they were measured, or
    `champion_error`. Rank 0 reads the file once and hands it to the others; every rank says whether it could
    score before any of them enters the all-reduce, so a champion failing on one rank's rows cannot hang the rest.
    """
    source = f"{model_dir.rstrip('/')}/{MODEL_FILE}"
    read: bytes | str | None = None
    if dist.get_rank() == 0:
        try:
            read = read_champion(model_dir)
        except Exception as e:
            read = f"cannot read {source}: {_describe(e)}"
    read = collectives.from_rank_zero(read)

    error, objective, sums = None, None, None
    if isinstance(read, str):
        error = read
    else:
        try:
            objective, sums = local_champion_sums(read, source, rows, run_prep, factories, device)
        except Exception as e:
            error = _describe(e)
    errors = [e for e in collectives.gather_objects(error) if e is not None]
    if errors or objective is None or sums is None:
        return _unscored(model_dir, errors[0] if errors else "no figures")

    reduced = collectives.all_reduce(sums)
    figures = {f"champion_{k}": v for k, v in objective.metrics(reduced).items() if k.startswith("val_")}
    if dist.get_rank() == 0:
        logs.log("the champion was scored on this run's validation rows", **figures)
    return {
        "champion_model_dir": model_dir,
        **figures,
        "champion_validation_rows": int(reduced[3].item()),
        "champion_scored_on_same_rows": True,
    }


def _unscored(model_dir: str, error: str) -> dict:
    error = error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"
    if dist.get_rank() == 0:
        logs.warning("the champion could not be scored on this run's validation rows", error=error)
    return {"champion_model_dir": model_dir, "champion_scored_on_same_rows": False, "champion_error": error}


def _describe(error: Exception) -> str:
    # A ValueError of ours already says what is wrong in words; anything else is named by its type.
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
