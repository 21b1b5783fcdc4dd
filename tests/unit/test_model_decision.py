"""The decision rule (issue 26, step 3): promote when the challenger beats the champion by more than min_improvement
on the metric's goal, or when there is no champion; the figures from metrics.json, the champion's from the same rows
when the trainer scored it."""

from __future__ import annotations

import pytest

from functions.model_decision import Figures, NoMetric, decide, metric_and_goal, same_rows_figure
from schemas.request import ModelBlock


def figures(challenger: float | None, champion: float | None, goal: str = "maximize", **more) -> Figures:
    base = dict(
        metric="val_accuracy" if goal == "maximize" else "val_rmse",
        goal=goal,
        challenger=challenger,
        champion=champion,
        champion_version="3",
        same_rows=True,
        min_improvement=0.0,
    )
    return Figures(**(base | more))


def test_the_first_version_is_promoted():
    promote, decision = decide(figures(0.5, None, champion_version=None))
    assert promote and decision.reason == "the model has no champion yet: the first successful version becomes it"


def test_a_better_challenger_is_promoted_and_the_reason_gives_both_figures():
    promote, decision = decide(figures(0.91, 0.88))
    assert promote
    assert decision.reason.startswith("better by 0.03, more than min_improvement 0: val_accuracy 0.91 against the ")
    assert "(version 3) 0.88, higher is better; both measured on this run's validation rows" in decision.reason
    assert (decision.challenger, decision.champion, decision.same_rows) == (0.91, 0.88, True)


@pytest.mark.parametrize(
    ("challenger", "champion", "threshold", "promote"),
    [
        (0.90, 0.90, 0.0, False),  # equal is not better
        (0.91, 0.90, 0.02, False),  # better, but not by more than the threshold
        (0.93, 0.90, 0.02, True),
        (0.85, 0.90, 0.0, False),
    ],
)
def test_the_challenger_must_beat_the_champion_by_more_than_min_improvement(challenger, champion, threshold, promote):
    assert decide(figures(challenger, champion, min_improvement=threshold))[0] is promote


def test_lower_is_better_for_a_minimized_metric():
    assert decide(figures(1.2, 1.5, goal="minimize"))[0]
    promote, decision = decide(figures(1.6, 1.5, goal="minimize"))
    assert not promote and decision.reason.startswith("worse by 0.1, not better by more than min_improvement 0")


def test_a_run_without_the_metric_is_held():
    promote, decision = decide(figures(None, 0.9))
    assert not promote and "has no finite val_accuracy" in decision.reason


def test_without_a_figure_for_the_champion_the_run_is_held():
    promote, decision = decide(figures(0.99, None, same_rows=False))
    assert not promote and "no val_accuracy is known for the champion (version 3)" in decision.reason


def test_figures_from_other_rows_are_said_to_be():
    _, decision = decide(figures(0.91, 0.88, same_rows=False, note="the trainer scored version 2"))
    assert "recorded on the data it was trained with, not this run's rows (the trainer scored version 2)" in (
        decision.reason
    )


def test_the_default_metric_follows_the_task_the_trainer_reports():
    block = ModelBlock(name="churn")
    assert metric_and_goal(block, {"task": "regression", "metric": "rmse"}) == ("val_rmse", "minimize")
    assert metric_and_goal(block, {"task": "classification"}) == ("val_accuracy", "maximize")
    with pytest.raises(NoMetric, match="neither the run's task nor its metric"):
        metric_and_goal(block, {})
    assert metric_and_goal(ModelBlock(name="c", metric="f1", goal="maximize"), {}) == ("f1", "maximize")


def test_the_same_rows_figure_is_the_trainers_champion_score():
    scored = {"champion_val_accuracy": 0.8, "champion_scored_on_same_rows": True}
    assert same_rows_figure(scored, "val_accuracy") == (0.8, "")
    assert same_rows_figure(scored | {"champion_scored_on_same_rows": False}, "val_accuracy")[0] is None
    value, note = same_rows_figure({"champion_error": "column 'age' is missing"}, "val_accuracy")
    assert value is None and note.endswith("could not score the champion on this run's data: column 'age' is missing")
    assert same_rows_figure({"champion_val_accuracy": float("nan")}, "val_accuracy")[0] is None
