"""The decision rule (issue 26, step 3, as issue 38 made it): promote when the lower end of the paired interval of the
improvement on the model's reference set exceeds the model's min_improvement, or when there is no champion; the
run's own rows are reported beside and never decided on; the rule is the model's, never the request's."""

from __future__ import annotations

import pytest

from functions.ledger.model_charter import Rule, rule_of
from functions.models.decision import NoMetric, decide, figures_of, metric_and_goal
from schemas.request import ModelBlock

RULE = rule_of(ModelBlock(name="churn"))


def rule(**changes) -> Rule:
    return RULE.model_copy(update=changes)


def metrics(challenger: float, champion: float, low: float, high: float, metric: str = "val_accuracy", **more):
    """What the trainer writes after scoring both models on the reference set (trainer/README.md)."""
    point = challenger - champion if metric == "val_accuracy" else champion - challenger
    return {
        f"reference_{metric}": challenger,
        f"champion_reference_{metric}": champion,
        f"reference_improvement_{metric}": {"point": point, "low": low, "high": high},
        "reference_rows": 400,
        "reference_confidence": 0.95,
    } | more


def decided(found: dict, goal: str = "maximize", metric: str = "val_accuracy", **rule_changes):
    return decide(figures_of(found, metric, goal, rule(**rule_changes), "3"))  # type: ignore[arg-type]


def test_the_first_version_is_promoted():
    promote, decision = decide(figures_of({}, "val_accuracy", "maximize", RULE, None))
    assert promote and decision.reason == "the model has no champion yet: the first successful version becomes it"


def test_a_surely_better_challenger_is_promoted_and_the_reason_gives_the_figures_and_interval():
    promote, decision = decided(metrics(0.93, 0.88, 0.02, 0.08))
    assert promote
    assert decision.reason.startswith("better, surely by more than min_improvement 0: on the model's reference set")
    assert "(400 rows) val_accuracy 0.93 against the champion's (version 3) 0.88" in decision.reason
    assert "95% interval [0.02, 0.08]" in decision.reason
    assert (decision.challenger, decision.champion, decision.interval) == (0.93, 0.88, [0.02, 0.08])
    assert (decision.same_rows, decision.confidence, decision.reference_rows) == (True, 0.95, 400)


@pytest.mark.parametrize(
    ("low", "high", "threshold", "promote", "verdict"),
    [
        (-0.01, 0.05, 0.0, False, "better by more than min_improvement 0, but not surely"),
        (0.01, 0.05, 0.02, False, "better by more than min_improvement 0.02, but not surely"),
        (0.03, 0.05, 0.02, True, "better, surely"),
        (-0.08, -0.02, 0.0, False, "not better"),
    ],
)
def test_the_intervals_lower_end_must_exceed_min_improvement(low, high, threshold, promote, verdict):
    found = metrics(0.90, 0.90 - (low + high) / 2, low, high)
    done, decision = decided(found, min_improvement=threshold)
    assert done is promote and decision.reason.startswith(verdict)


def test_lower_is_better_for_a_minimized_metric():
    assert decided(metrics(1.2, 1.5, 0.1, 0.5, metric="val_rmse"), goal="minimize", metric="val_rmse")[0]
    promote, decision = decided(metrics(1.6, 1.5, -0.3, 0.1, metric="val_rmse"), goal="minimize", metric="val_rmse")
    assert not promote and decision.reason.startswith("not better")


def test_the_runs_own_rows_are_reported_beside_and_never_decided_on():
    """Issue 38, attack 1: the champion scored on the challenger's rows (labels flipped) gave 0.025 against 0.9625
    and promoted an inverted model; those figures are shown and ignored."""
    found = metrics(0.04, 0.95, -0.95, -0.87) | {"val_accuracy": 0.9625, "champion_val_accuracy": 0.025}
    promote, decision = decided(found)
    assert not promote
    assert (decision.run_challenger, decision.run_champion) == (0.9625, 0.025)
    assert "on this run's own rows: 0.9625 against 0.025, not decided on" in decision.reason


@pytest.mark.parametrize("missing", ["reference_val_accuracy", "champion_reference_val_accuracy"])
def test_a_run_without_reference_figures_is_held(missing):
    found = metrics(0.93, 0.88, 0.02, 0.08)
    del found[missing]
    promote, decision = decided(found)
    assert not promote and "has no val_accuracy of both models on the model's reference set" in decision.reason


@pytest.mark.parametrize(
    "interval", [None, "0.1", {"point": 0.1, "low": 0.2, "high": 0.1}, {"point": 0.1, "low": float("nan"), "high": 1}]
)
def test_an_interval_that_is_not_one_is_held(interval):
    found = metrics(0.93, 0.88, 0.02, 0.08) | {"reference_improvement_val_accuracy": interval}
    assert not decided(found)[0]


def test_a_blocked_run_is_held_with_the_reason():
    found = metrics(0.99, 0.5, 0.4, 0.5)
    promote, decision = decide(figures_of(found, "val_accuracy", "maximize", RULE, "3", "the champion changed"))
    assert not promote and decision.reason.startswith("the champion changed; held")


def test_the_default_metric_follows_the_task_the_trainer_reports():
    assert metric_and_goal(RULE, {"task": "regression", "metric": "rmse"}) == ("val_rmse", "minimize")
    assert metric_and_goal(RULE, {"task": "classification"}) == ("val_accuracy", "maximize")
    with pytest.raises(NoMetric, match="neither the run's task nor its metric"):
        metric_and_goal(RULE, {})
    custom = rule_of(ModelBlock(name="c", metric="f1", goal="maximize"))
    assert metric_and_goal(custom, {}) == ("f1", "maximize")
