"""Evidence the challenger does not choose (issue 38): what the controller promotes on, made from rows and rules the
request cannot pick.

Before the first epoch (`before_training`, every rank): the champion scored on this run's validation rows and, with
`--reference-data`, on the model's reference rows (rank 0 alone: a reference set is small); then the label check
(trainer/judging/label_check.py), which may stop every rank together. After training (`after_training`, rank 0): the
challenger scored on the same reference rows and, with a champion, the paired bootstrap interval of its
improvement for every validation metric of the task (trainer/judging/bootstrap.py). With `--write-reference-rows` (the
model has no reference set yet) rank 0 writes a sample of the validation rows as `reference.parquet` beside the
model (trainer/judging/reference_set.py): the first version's becomes the model's reference set.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from dataclasses import dataclass, field

import pyarrow as pa
import torch
import torch.distributed as dist
from torch import nn

from trainer import logs
from trainer.data.preprocess import Preprocessor
from trainer.distributed import collectives
from trainer.judging.bootstrap import METHOD, mean, paired_interval, root_mean
from trainer.judging.champion import MAX_ERROR_CHARS, ChampionScore, score_champion
from trainer.judging.label_check import check_labels
from trainer.judging.reference_set import reference_on_rank_zero
from trainer.judging.row_scores import RowScores, score_rows

# Each validation metric of a task: which per-row values, the statistic over rows, and whether higher is better.
COMPARED = {
    "val_loss": ("loss", mean, False),
    "val_accuracy": ("score", mean, True),
    "val_rmse": ("score", root_mean, False),
}


@dataclass
class Evidence:
    metrics: dict = field(default_factory=dict)  # entries decided before training, the same on every rank
    reference: pa.Table | None = None  # rank 0, with --reference-data: the labelled reference rows
    champion_scores: RowScores | None = None  # rank 0: the champion's score on each of them


def before_training(
    args: argparse.Namespace,
    validation_rows: pa.Table | None,
    prep: Preprocessor,
    drift: dict,
    factories: Collection[str],
    device: torch.device,
) -> Evidence:
    """The champion's figures, skill and label check, on every rank alike; raises LabelsChanged (or
    ReferenceUnusable) on every rank together. `validation_rows` are this rank's, with every column."""
    evidence = Evidence()
    if args.reference_data:
        evidence.reference = reference_on_rank_zero(args.reference_data, args.target)
    if not args.champion_model_dir:
        return evidence
    assert validation_rows is not None
    champion = score_champion(args.champion_model_dir, validation_rows, prep, factories, device)
    evidence.metrics = champion.metrics
    if args.reference_data and champion.model is not None:
        figures, evidence.champion_scores = champion_on_reference(champion, evidence.reference, prep, device)
        evidence.metrics |= figures
    reference_given = bool(args.reference_data)
    verdict = check_labels({**evidence.metrics, **drift}, prep.task, args.min_champion_skill, args.max_target_drift,
                           reference_given)  # fmt: skip
    evidence.metrics["label_check"] = verdict
    if dist.get_rank() == 0:
        logs.log("label check", result=verdict, champion_skill=evidence.metrics.get("champion_skill"),
                 champion_reference_skill=evidence.metrics.get("champion_reference_skill"),
                 target_drift=drift.get("target_drift"))  # fmt: skip
    return evidence


def champion_on_reference(
    champion: ChampionScore, reference: pa.Table | None, run_prep: Preprocessor, device: torch.device
) -> tuple[dict, RowScores | None]:
    """Every rank calls this: rank 0 scores the champion on the reference rows and every rank gets the figures
    (`champion_reference_val_<metric>`, `champion_reference_skill`, or `champion_reference_error`); the per-row
    scores stay on rank 0."""
    figures: dict | None = None
    scores = None
    if dist.get_rank() == 0:
        assert champion.model is not None and champion.prep is not None and reference is not None
        try:
            scores = score_rows(champion.model, champion.prep, reference, run_prep.target_std, device)
            figures = {f"champion_reference_{k}": v for k, v in scores.figures().items()}
            figures |= {"champion_reference_skill": scores.skill.value}
        except Exception as e:
            error = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            figures = {"champion_reference_error": f"the champion cannot score the reference rows: {error}"[
                :MAX_ERROR_CHARS]}  # fmt: skip
            logs.warning("the champion could not be scored on the reference rows", error=figures)
    return collectives.from_rank_zero(figures), scores


def after_training(
    evidence: Evidence, model: nn.Module, prep: Preprocessor, confidence: float, device: torch.device
) -> dict:
    """Rank 0, once the kept model is loaded: the challenger's figures on the reference rows and, with a champion
    scored on them, `reference_improvement_<metric>` {point, low, high} for each validation metric of the task."""
    if evidence.reference is None:
        return {}
    try:
        scores = score_rows(model, prep, evidence.reference, prep.target_std, device)
    except Exception as e:
        error = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        logs.warning("this run's model could not be scored on the reference rows", error=error)
        return {"reference_error": f"this run's model cannot score the reference rows: {error}"[:MAX_ERROR_CHARS]}
    entries: dict = {f"reference_{k}": v for k, v in scores.figures().items()}
    entries |= {"reference_rows": len(scores.loss), "reference_confidence": confidence, "reference_method": METHOD}
    champion = evidence.champion_scores
    if champion is not None:
        for metric in scores.figures():
            values, statistic, higher_is_better = COMPARED[metric]
            entries[f"reference_improvement_{metric}"] = paired_interval(
                getattr(scores, values), getattr(champion, values), statistic, higher_is_better, confidence
            )
    logs.log("scored on the reference rows", **entries)
    return entries
