"""Pure: whether a run's new model version replaces the champion (README: the model block and the decision rules).

The challenger is promoted when it beats the champion by more than `min_improvement` on the metric's goal, or when
there is no champion. The figures come from the run's metrics.json (untrusted, already filtered by job_outputs.py):
the challenger's own `<metric>`, and — when the trainer was given the champion and scored it on the same validation
rows — `champion_<metric>`; otherwise the champion's figure recorded when it was registered, on its own rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from schemas.events import Decision
from schemas.request import BUILTIN_METRIC_GOALS, TASK_METRICS, ModelBlock

Goal = Literal["maximize", "minimize"]
# What the trainer writes beside its own figures when it was given --champion-model-dir (trainer/, issue 26 step 1):
# the champion's figure on this run's validation rows, whether it was measured on them, or why it could not be.
CHAMPION_PREFIX = "champion_"
CHAMPION_SAME_ROWS = "champion_scored_on_same_rows"
CHAMPION_ERROR = "champion_error"


class NoMetric(ValueError):
    """The decision cannot be made: which metric decides is unknown (the message says why)."""


def metric_and_goal(block: ModelBlock, metrics: dict[str, Any]) -> tuple[str, Goal]:
    """The metric that decides and which way is better: the block's own, else the built-in trainer's metric for the
    run's task (metrics.json's `metric`, or `task`; the task may have been `auto`)."""
    metric = block.metric
    if metric is None:
        reported = metrics.get("metric")
        task = metrics.get("task")
        if isinstance(reported, str) and f"val_{reported}" in BUILTIN_METRIC_GOALS:
            metric = f"val_{reported}"
        elif isinstance(task, str) and task in TASK_METRICS:
            metric = TASK_METRICS[task]
        else:
            raise NoMetric(
                "metrics.json says neither the run's task nor its metric, so the default metric is unknown; "
                "name model.metric (and model.goal) in the request"
            )
    goal = block.goal or BUILTIN_METRIC_GOALS.get(metric)
    if goal is None:
        raise NoMetric(f"no goal for {metric}: name model.goal (maximize or minimize) in the request")
    return metric, goal


def figure(metrics: dict[str, Any], name: str) -> float | None:
    """A finite number from metrics.json, else None (booleans are not figures)."""
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def same_rows_figure(metrics: dict[str, Any], metric: str) -> tuple[float | None, str]:
    """(the champion's figure on this run's validation rows, or None; a note on why there is none) from what the
    trainer wrote. A run that says its champion figure was not measured on its own rows is not taken as one."""
    note = ""
    error = metrics.get(CHAMPION_ERROR)
    if isinstance(error, str) and error:
        note = f"the trainer could not score the champion on this run's data: {error}"
    value = figure(metrics, CHAMPION_PREFIX + metric)
    if value is not None and metrics.get(CHAMPION_SAME_ROWS) is False:
        return None, note or f"metrics.json says {CHAMPION_PREFIX}{metric} was not measured on this run's rows"
    return value, note


@dataclass(frozen=True)
class Figures:
    """What one decision compares."""

    metric: str
    goal: Goal
    challenger: float | None
    champion: float | None
    champion_version: str | None  # None: the model has no version under the alias
    same_rows: bool
    min_improvement: float
    note: str = ""  # why the same-rows figure was not used, when it was not


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def decide(f: Figures) -> tuple[bool, Decision]:
    """(promote, the decision with its reason in words)."""
    better = "higher" if f.goal == "maximize" else "lower"
    where = (
        "both measured on this run's validation rows"
        if f.same_rows
        else "the champion's figure was recorded on the data it was trained with, not this run's rows"
    )
    if f.note:
        where += f" ({f.note})"

    def result(promote: bool, reason: str) -> tuple[bool, Decision]:
        return promote, Decision(
            metric=f.metric,
            goal=f.goal,
            challenger=f.challenger,
            champion=f.champion,
            champion_version=f.champion_version,
            same_rows=f.same_rows,
            min_improvement=f.min_improvement,
            reason=reason,
        )

    if f.champion_version is None:
        return result(True, "the model has no champion yet: the first successful version becomes it")
    if f.challenger is None:
        return result(False, f"the run's metrics.json has no finite {f.metric}, so it cannot be compared; held")
    if f.champion is None:
        return result(
            False,
            f"no {f.metric} is known for the champion (version {f.champion_version}) to compare with; held "
            "(compare by hand, then `trainctl models promote`)",
        )
    margin = f.challenger - f.champion if f.goal == "maximize" else f.champion - f.challenger
    compared = (
        f"{f.metric} {_fmt(f.challenger)} against the champion's (version {f.champion_version}) {_fmt(f.champion)}, "
        f"{better} is better; {where}"
    )
    if margin > f.min_improvement:
        return result(
            True, f"better by {_fmt(margin)}, more than min_improvement {_fmt(f.min_improvement)}: {compared}"
        )
    worse = f"worse by {_fmt(-margin)}" if margin < 0 else f"better by only {_fmt(margin)}" if margin else "equal"
    return result(False, f"{worse}, not better by more than min_improvement {_fmt(f.min_improvement)}: {compared}")
