"""Scoring the model in use — the champion — on this run's own validation rows, before the first epoch, so that the
controller compares challenger and champion on the same data (`--champion-model-dir`) and the labels can be
checked before any GPU time is spent on them (trainer/judging/label_check.py).

The champion's `model.pt` carries its own preprocessing, so it reads the raw rows as it was trained to. Every rank
scores its own validation rows (the very rows, and the same split, that the challenger's figures come from) and
the sums are all-reduced, exactly as the challenger's evaluation is. Beside its figures comes its skill on these
rows (trainer/judging/skill.py): how much better it does than predicting their most frequent class, or their mean. A
champion that cannot score these rows — a column it needs is gone, a label it never saw, a different target or
task, an unreadable file — is reported in `champion_error` and the run goes on: a new model must never fail
because the old one no longer fits the data.

The file was written by another run, so it is read with a size bound, unpickled as plain values and tensors
only, and may be built only by the built-in MLP or this run's own `--model` (trainer/outputs/model_folder.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
import torch
import torch.distributed as dist
from torch import nn

from trainer import logs
from trainer.data.preprocess import Preprocessor
from trainer.distributed import collectives
from trainer.judging.skill import Skill, classification_skill, regression_skill
from trainer.model.objective import Objective
from trainer.outputs.model_folder import MODEL_FILE, model_from_bytes
from trainer.storage.folders import open_folder

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


@dataclass
class ChampionScore:
    """What scoring the champion gave: the same metrics.json entries on every rank, and the champion itself when
    it could score (to score it on the reference rows too)."""

    metrics: dict
    model: nn.Module | None = None
    prep: Preprocessor | None = None


def local_champion_sums(
    data: bytes, source: str, rows: pa.Table, run_prep: Preprocessor, factories: Collection[str], device: torch.device
) -> tuple[nn.Module, Preprocessor, torch.Tensor]:
    """The champion, its preprocessing, and its evaluation sums over this rank's validation `rows` (with every
    column of the data) followed by the sums its skill needs (`label_sums`). Raises on anything that stops it
    scoring."""
    model, prep = model_from_bytes(data, source, allowed_factories=factories)
    check_comparable(prep, run_prep)
    try:
        inputs, targets = prep.features(rows), prep.targets(rows)
    except ValueError as e:
        raise ValueError(f"the champion cannot read this run's validation rows: {e}") from e
    sums = Objective(prep).local_sums(model.to(device), inputs, targets, device)
    return model, prep, torch.cat([sums, label_sums(prep, targets).to(sums.device)])


def label_sums(prep: Preprocessor, targets: torch.Tensor) -> torch.Tensor:
    """What skill needs of the rows' labels, as sums every rank adds up: each class's count, or Σy and Σy² of the
    standardised target."""
    if prep.task == "classification":
        return torch.bincount(targets, minlength=len(prep.classes)).double()
    values = targets.double()
    return torch.stack([values.sum(), (values**2).sum()])


def skill_of(prep: Preprocessor, reduced: torch.Tensor) -> Skill:
    """The champion's skill on every rank's rows together, from the all-reduced sums of `local_champion_sums`."""
    _, model_score, _, rows = reduced[:4].tolist()
    labels = reduced[4:].tolist()
    if prep.task == "classification":
        return classification_skill(model_score / max(rows, 1.0), labels)
    mean = labels[0] / max(rows, 1.0)
    variance = labels[1] / max(rows, 1.0) - mean**2
    return regression_skill(model_score / max(rows, 1.0), variance, units=prep.target_std)


def score_champion(
    model_dir: str, rows: pa.Table, run_prep: Preprocessor, factories: Collection[str], device: torch.device
) -> ChampionScore:
    """Every rank calls this before training with its own validation rows; every rank gets the same entries: the
    champion's figures as `champion_val_<metric>` and `champion_skill`, plus where and on how many rows they were
    measured, or `champion_error`. Rank 0 reads the file once and hands it to the others; every rank says whether
    it could score before any of them enters the all-reduce, so a champion failing on one rank's rows cannot hang
    the rest."""
    source = f"{model_dir.rstrip('/')}/{MODEL_FILE}"
    read: bytes | str | None = None
    if dist.get_rank() == 0:
        try:
            read = read_champion(model_dir)
        except Exception as e:
            read = f"cannot read {source}: {_describe(e)}"
    read = collectives.from_rank_zero(read)

    error, scored = None, None
    if isinstance(read, str):
        error = read
    else:
        try:
            scored = local_champion_sums(read, source, rows, run_prep, factories, device)
        except Exception as e:
            error = _describe(e)
    errors = [e for e in collectives.gather_objects(error) if e is not None]
    if errors or scored is None:
        return ChampionScore(_unscored(model_dir, errors[0] if errors else "no figures"))

    model, prep, sums = scored
    reduced = collectives.all_reduce(sums).cpu()
    figures = {f"champion_{k}": v for k, v in Objective(prep).metrics(reduced[:4]).items() if k.startswith("val_")}
    skill = skill_of(prep, reduced)
    if dist.get_rank() == 0:
        logs.log("the champion was scored on this run's validation rows", **figures, champion_skill=skill.value)
    metrics = {
        "champion_model_dir": model_dir,
        **figures,
        "champion_validation_rows": int(reduced[3].item()),
        "champion_scored_on_same_rows": True,
        "champion_skill": skill.value,
        "champion_skill_baseline": skill.baseline,  # the trivial prediction's figure on these rows: skill 0
    }
    return ChampionScore(metrics, model, prep)


def _unscored(model_dir: str, error: str) -> dict:
    error = error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"
    if dist.get_rank() == 0:
        logs.warning("the champion could not be scored on this run's validation rows", error=error)
    return {"champion_model_dir": model_dir, "champion_scored_on_same_rows": False, "champion_error": error}


def _describe(error: Exception) -> str:
    # A ValueError of ours already says what is wrong in words; anything else is named by its type.
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
