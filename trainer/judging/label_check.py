"""The label check (issue 38): before the first epoch, whether this run's labels still mean what the champion
learned. Two signs, from figures every rank already holds alike (trainer/judging/champion.py, trainer/judging/drift.py):

- the champion has no skill on these rows (`champion_skill` below `--min-champion-skill`) while it does on its
  reference set (`champion_reference_skill` above 0, or no reference set given): the model did not get worse at
  its job, the rows changed what they ask of it — inverted or remapped labels, another unit;
- the target's distribution moved past `--max-target-drift` (PSI against the champion's schema.json).

Either stops every rank together (LabelsChanged, reason `data`, failure.json through the usual path) with one line
naming the figures. A champion that could not be scored never stops the run: the check is then skipped, and said.
"""

from __future__ import annotations

from trainer.outputs.model_folder import RunRefused

PASSED = "passed"


class LabelsChanged(RunRefused):
    """The labels no longer mean what the champion learned: the run stops before training."""

    reason = "data"


def check_labels(
    metrics: dict, task: str, min_skill: float, max_target_drift: float | None, reference_given: bool
) -> str:
    """`passed`, or `skipped: why`, from the champion's entries of metrics.json; raises LabelsChanged."""
    if "champion_error" in metrics:
        return "skipped: the champion could not be scored on these rows"
    problems = []
    skill, reference_skill = metrics.get("champion_skill"), metrics.get("champion_reference_skill")
    skilled_on_reference = not reference_given or (reference_skill is not None and reference_skill > 0)
    if skill is not None and skill < min_skill and skilled_on_reference:
        problems.append(_skill_problem(metrics, task, min_skill, reference_given))
    drift = metrics.get("target_drift")
    if max_target_drift is not None and drift is not None and drift > max_target_drift:
        problems.append(f"the target drifted from the champion's data by {_shown(drift)} (PSI), past "
                        f"--max-target-drift {max_target_drift:g}")  # fmt: skip
    if problems:
        metric = _metric(task)
        shown = ("champion_skill", "champion_reference_skill", "champion_skill_baseline", f"champion_{metric}",
                 f"champion_reference_{metric}", "target_drift")  # fmt: skip
        details = {k: metrics.get(k) for k in shown} | {"min_champion_skill": min_skill,
                                                         "max_target_drift": max_target_drift}  # fmt: skip
        raise LabelsChanged("; ".join(problems) + ": the labels or their meaning changed; the run stopped before "
                            "training", details=details)  # fmt: skip
    return PASSED


def _skill_problem(metrics: dict, task: str, min_skill: float, reference_given: bool) -> str:
    metric = _metric(task)
    here = f"the champion scores {_shown(metrics[f'champion_{metric}'])} ({metric}) on these rows"
    there = (f" against {_shown(metrics[f'champion_reference_{metric}'])} on its reference set"
             if reference_given else " (no reference set given)")  # fmt: skip
    trivial = "predicting the most frequent class" if task == "classification" else "predicting their mean"
    return (f"{here}{there}, where {trivial} scores {_shown(metrics['champion_skill_baseline'])}, so its skill "
            f"{_shown(metrics['champion_skill'])} is below --min-champion-skill {min_skill:g}")  # fmt: skip


def _metric(task: str) -> str:
    return "val_accuracy" if task == "classification" else "val_rmse"


def _shown(value: float) -> str:
    return f"{value:.4g}"
