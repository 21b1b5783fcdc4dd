"""Skill: how much better a model does than the trivial prediction on the same rows, on one scale for both tasks —
1 perfect, 0 no better than predicting the most frequent class (classification) or the rows' mean (regression),
below 0 worse than that. A champion with skill on its reference set and none on a run's rows says the labels
changed, not the model (trainer/judging/label_check.py).

Classification: (accuracy − p) / (1 − p), p the share of the most frequent class in these rows (Cohen's kappa
against that one guess). Regression: 1 − MSE / variance of these rows' target (the coefficient of determination).
Pure: figures in, figures out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Rows whose target hardly varies cannot tell a model from the trivial prediction: no skill is given for them.
TOLERANCE = 1e-12


@dataclass(frozen=True)
class Skill:
    value: float | None  # None when these rows cannot tell (one class only, a constant target, no rows)
    baseline: float  # what the trivial prediction scores on these rows: the majority's share, or the target's std


def classification_skill(accuracy: float, class_counts: Sequence[float]) -> Skill:
    """Skill of `accuracy` on rows holding `class_counts` of each class."""
    rows = float(sum(class_counts))
    majority = max(class_counts, default=0.0) / rows if rows > 0 else 1.0
    if 1.0 - majority <= TOLERANCE:
        return Skill(None, majority)
    return Skill((accuracy - majority) / (1.0 - majority), majority)


def regression_skill(mse: float, variance: float, units: float = 1.0) -> Skill:
    """Skill of a mean squared error `mse` on rows whose target has `variance` (both in the same units);
    `units` turns the baseline's standard deviation into the target's own units (a standardised target's std)."""
    if not variance > TOLERANCE or not math.isfinite(mse):
        return Skill(None, math.sqrt(max(variance, 0.0)) * units)
    return Skill(1.0 - mse / variance, math.sqrt(variance) * units)
