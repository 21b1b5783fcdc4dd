"""The two pure figures of issue 38's evidence: a model's skill against the trivial prediction on the same rows, and
the paired bootstrap interval of a challenger's improvement over the champion (fixed seed 0, 2,000 resamples)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.judging import bootstrap
from trainer.judging.bootstrap import mean, paired_interval, root_mean
from trainer.judging.skill import classification_skill, regression_skill


def test_classification_skill_is_accuracy_above_the_most_frequent_class_over_what_is_left():
    """1 perfect, 0 the majority class's share, below 0 worse than always guessing it."""
    assert classification_skill(1.0, [70, 30]).value == pytest.approx(1.0)
    assert classification_skill(0.7, [70, 30]).value == pytest.approx(0.0)
    assert classification_skill(0.85, [70, 30]).value == pytest.approx(0.5)
    assert classification_skill(0.1, [70, 30]).value == pytest.approx((0.1 - 0.7) / 0.3)
    assert classification_skill(0.85, [70, 30]).baseline == pytest.approx(0.7)
    assert classification_skill(0.4, [10, 20, 50, 20]).value == pytest.approx((0.4 - 0.5) / 0.5)


def test_rows_that_cannot_tell_a_model_from_the_trivial_prediction_give_no_skill():
    assert classification_skill(1.0, [40, 0]).value is None  # one class only
    assert classification_skill(0.0, []).value is None
    assert regression_skill(0.5, 0.0).value is None  # a constant target


def test_regression_skill_is_one_minus_mse_over_the_rows_variance():
    assert regression_skill(0.0, 4.0).value == 1.0
    assert regression_skill(4.0, 4.0).value == 0.0
    assert regression_skill(12.0, 4.0).value == pytest.approx(-2.0)
    skill = regression_skill(1.0, 4.0, units=10.0)  # standardised figures, a target std of 10
    assert skill.value == pytest.approx(0.75) and skill.baseline == pytest.approx(20.0)


def reference_interval(challenger, champion, statistic, higher_is_better, confidence):
    """The contract written out again: seed 0, 2,000 resamples drawn CHUNK at a time, the same rows for both."""
    rng = np.random.default_rng(0)
    sign = 1 if higher_is_better else -1
    found = []
    for start in range(0, 2000, bootstrap.CHUNK):
        drawn = rng.integers(0, len(challenger), size=(min(bootstrap.CHUNK, 2000 - start), len(challenger)))
        found.append(sign * (statistic(challenger[drawn]) - statistic(champion[drawn])))
    low, high = np.quantile(np.concatenate(found), [(1 - confidence) / 2, (1 + confidence) / 2])
    return {"point": sign * float(statistic(challenger) - statistic(champion)), "low": low, "high": high}


def test_the_interval_is_the_contracts_paired_bootstrap_with_seed_0_whatever_the_global_seeds():
    """issue 38: 2,000 resamples, seed 0 — never the run's --seed, so nothing the run sets moves it."""
    rng = np.random.default_rng(5)
    champion = rng.exponential(size=300)  # per-row losses: continuous, so every resample shows in the quantiles
    challenger = champion + rng.normal(-0.02, 0.1, size=300)
    np.random.seed(123)
    torch.manual_seed(123)
    found = paired_interval(challenger, champion, mean, False, 0.9)
    assert found == pytest.approx(reference_interval(challenger, champion, mean, False, 0.9), rel=1e-12)
    assert bootstrap.RESAMPLES == 2000 and bootstrap.METHOD == "paired bootstrap, 2000 resamples"


def test_the_same_model_on_the_same_rows_improves_by_exactly_nothing():
    """Paired: every resample scores both models on the same rows, so identical per-row values give [0, 0]; an
    unpaired bootstrap of these rows would spread by the rows' own variance (about ±0.05 here)."""
    values = (np.random.default_rng(1).random(400) < 0.75).astype(float)
    assert paired_interval(values, values.copy(), mean, True, 0.95) == {"point": 0.0, "low": 0.0, "high": 0.0}


def test_a_small_consistent_improvement_on_noisy_rows_is_seen_as_one():
    """Squared errors that vary a hundredfold from row to row, with the challenger a little better on every row:
    paired, the interval lies clearly above 0; the rows' own spread would swamp it unpaired."""
    rng = np.random.default_rng(2)
    champion = rng.exponential(size=2000) * rng.choice([0.1, 10.0], size=2000)
    challenger = champion * 0.97
    found = paired_interval(challenger, champion, root_mean, False, 0.95)
    assert 0 < found["low"] <= found["point"] <= found["high"]
    assert found["point"] == pytest.approx(np.sqrt(champion.mean()) - np.sqrt(challenger.mean()))
    worse = paired_interval(champion, challenger, root_mean, False, 0.95)
    assert worse["high"] < 0


def test_a_wider_confidence_gives_a_wider_interval_around_the_same_point():
    rng = np.random.default_rng(3)
    champion = rng.random(500)
    challenger = champion + rng.normal(0.02, 0.1, size=500)
    narrow = paired_interval(challenger, champion, mean, True, 0.6)
    wide = paired_interval(challenger, champion, mean, True, 0.99)
    assert wide["point"] == narrow["point"]
    assert wide["low"] < narrow["low"] < narrow["point"] < narrow["high"] < wide["high"]


def test_values_that_are_not_one_per_row_for_both_are_refused():
    with pytest.raises(ValueError, match="one value per row"):
        paired_interval(np.zeros(3), np.zeros(4), mean, True, 0.95)
    with pytest.raises(ValueError, match="one value per row"):
        paired_interval(np.zeros(0), np.zeros(0), mean, True, 0.95)
