"""Pure: whether a run's new model version replaces the champion (README: Models, and issue 38).

The model's own rule decides (functions/ledger/model_charter.py), on evidence the challenger does not choose: the
model's reference set, which the trainer scores champion and challenger alike on, with a paired bootstrap interval of
the improvement. The challenger is promoted when the interval's lower end exceeds `min_improvement` — or when there is
no champion yet. Its figures on its own run's validation rows (and the champion's there) are reported beside, never
decided on: those rows are the challenger's to choose. The figures come from the run's metrics.json (untrusted,
already filtered by job_outputs.py), written by the trainer (trainer/README.md: the reference set).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from functions.ledger.model_charter import Rule
from schemas.events import Decision
from schemas.request import BUILTIN_METRIC_GOALS, TASK_METRICS

Goal = Literal["maximize", "minimize"]
# What the trainer writes (trainer/README.md): the champion scored on the run's own rows (issue 26), both models on
# the reference set, and the interval of the improvement there (issue 38).
CHAMPION_PREFIX = "champion_"
REFERENCE_PREFIX = "reference_"
CHAMPION_REFERENCE_PREFIX = "champion_reference_"
IMPROVEMENT_PREFIX = "reference_improvement_"
REFERENCE_ROWS = "reference_rows"
REFERENCE_CONFIDENCE = "reference_confidence"


class NoMetric(ValueError):
    """The decision cannot be made: which metric decides is unknown (the message says why)."""


def metric_and_goal(rule: Rule, metrics: dict[str, Any]) -> tuple[str, Goal]:
    """The metric that decides and which way is better: the rule's own, else the built-in trainer's metric for the
    run's task (metrics.json's `metric`, or `task`; the task may have been `auto`)."""
    metric = rule.metric
    if metric is None:
        reported = metrics.get("metric")
        task = metrics.get("task")
        if isinstance(reported, str) and f"val_{reported}" in BUILTIN_METRIC_GOALS:
            metric = f"val_{reported}"
        elif isinstance(task, str) and task in TASK_METRICS:
            metric = TASK_METRICS[task]
        else:
            raise NoMetric(
                "metrics.json says neither the run's task nor its metric, so the model's metric is unknown; its "
                "owner can name one (`trainctl models rule NAME --metric M`)"
            )
    goal = rule.goal or BUILTIN_METRIC_GOALS.get(metric)
    if goal is None:
        raise NoMetric(f"no goal for {metric}: the model's owner names one (`trainctl models rule NAME --goal …`)")
    return metric, goal


def figure(metrics: dict[str, Any], name: str) -> float | None:
    """A finite number from metrics.json, else None (booleans are not figures)."""
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Interval:
    """The paired bootstrap interval of the improvement (positive: the challenger is better), in metric units."""

    point: float
    low: float
    high: float


def interval_of(metrics: dict[str, Any], metric: str) -> Interval | None:
    """`reference_improvement_<metric>` as the trainer writes it: {point, low, high}, finite, low ≤ high."""
    found = metrics.get(IMPROVEMENT_PREFIX + metric)
    if not isinstance(found, dict):
        return None
    point, low, high = (figure(found, k) for k in ("point", "low", "high"))
    if point is None or low is None or high is None or low > high:
        return None
    return Interval(point, low, high)


@dataclass(frozen=True)
class Figures:
    """What one decision compares."""

    metric: str
    goal: Goal
    rule: Rule
    champion_version: str | None  # None: the model has no version under the alias
    challenger: float | None = None  # on the reference set
    champion: float | None = None
    interval: Interval | None = None
    reference_rows: int | None = None
    run_challenger: float | None = None  # on the run's own validation rows: reported, not decided on
    run_champion: float | None = None
    blocked: str = ""  # why the run's evidence cannot decide (the champion or reference changed): held


def figures_of(
    metrics: dict[str, Any], metric: str, goal: Goal, rule: Rule, champion_version: str | None, blocked: str = ""
) -> Figures:
    """The figures of a decision from what the trainer wrote."""
    rows = figure(metrics, REFERENCE_ROWS)
    return Figures(
        metric,
        goal,
        rule,
        champion_version,
        challenger=figure(metrics, REFERENCE_PREFIX + metric),
        champion=figure(metrics, CHAMPION_REFERENCE_PREFIX + metric),
        interval=interval_of(metrics, metric),
        reference_rows=int(rows) if rows is not None and rows >= 0 else None,
        run_challenger=figure(metrics, metric),
        run_champion=figure(metrics, CHAMPION_PREFIX + metric),
        blocked=blocked,
    )


def confidence_problem(metrics: dict[str, Any], rule: Rule) -> str:
    """Why the run's interval is not at the rule's confidence; "" when it is."""
    level = figure(metrics, REFERENCE_CONFIDENCE)
    if level is None or abs(level - rule.confidence) > 1e-9:
        return f"the run's interval is at confidence {level}, not the model's {rule.confidence:g}"
    return ""


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def decide(f: Figures) -> tuple[bool, Decision]:
    """(promote, the decision with its reason in words)."""
    rule = f.rule

    def result(promote: bool, reason: str) -> tuple[bool, Decision]:
        measured = f.interval is not None and not f.blocked
        return promote, Decision(
            metric=f.metric,
            goal=f.goal,
            challenger=f.challenger,
            champion=f.champion,
            champion_version=f.champion_version,
            same_rows=measured,
            min_improvement=rule.min_improvement,
            interval=[f.interval.low, f.interval.high] if f.interval else None,
            confidence=rule.confidence,
            reference_rows=f.reference_rows,
            run_challenger=f.run_challenger,
            run_champion=f.run_champion,
            reason=reason,
        )

    if f.champion_version is None:
        return result(True, "the model has no champion yet: the first successful version becomes it")
    if f.blocked:
        return result(False, f"{f.blocked}; held (the next run is judged against what holds now)")
    if f.interval is None or f.challenger is None or f.champion is None:
        return result(
            False,
            f"the run's metrics.json has no {f.metric} of both models on the model's reference set, with its "
            "interval, so it cannot be compared; held",
        )
    better = "higher" if f.goal == "maximize" else "lower"
    lo, hi, level = _fmt(f.interval.low), _fmt(f.interval.high), f"{rule.confidence:.0%}"
    compared = (
        f"on the model's reference set ({f.reference_rows} rows) {f.metric} {_fmt(f.challenger)} against the "
        f"champion's (version {f.champion_version}) {_fmt(f.champion)}, {better} is better; the improvement is "
        f"{_fmt(f.interval.point)}, {level} interval [{lo}, {hi}]"
    )
    beside = ""
    if f.run_challenger is not None and f.run_champion is not None:
        beside = f" (on this run's own rows: {_fmt(f.run_challenger)} against {_fmt(f.run_champion)}, not decided on)"
    if f.interval.low > rule.min_improvement:
        return result(
            True, f"better, surely by more than min_improvement {_fmt(rule.min_improvement)}: {compared}{beside}"
        )
    if f.interval.point <= 0:
        verdict = "not better"
    elif f.interval.point > rule.min_improvement:
        verdict = f"better by more than min_improvement {_fmt(rule.min_improvement)}, but not surely"
    else:
        verdict = f"not better by more than min_improvement {_fmt(rule.min_improvement)}"
    return result(False, f"{verdict}: {compared}{beside}")
