"""Preprocessing: statistics from the training rows only, string columns one-hot encoded, the task decided from
the target, and predictions decoded back into the target's own type."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from trainer.preprocess import MAX_CATEGORIES, Combine, Preprocessor, drop_unlabelled

LOCAL = Combine(across_ranks=False)


def test_numbers_are_standardised_with_training_statistics_and_missing_values_become_the_mean():
    train = pa.table({"x": [1.0, 2.0, 3.0, None], "y": [0.5, 1.5, 2.5, 3.5]})
    prep = Preprocessor.fit(train, "y", "regression", LOCAL)
    assert prep.means == [2.0] and prep.stds == pytest.approx([np.sqrt(2 / 3)])

    other = pa.table({"x": [2.0, 5.0, None], "y": [0.0, 0.0, 0.0]})
    features = prep.features(other)
    assert features[:, 0].tolist() == pytest.approx([0.0, 3 / np.sqrt(2 / 3), 0.0])


def test_string_columns_are_one_hot_with_a_slot_for_unseen_values():
    train = pa.table({"colour": ["red", "blue", "red", None], "label": ["a", "b", "a", "b"]})
    prep = Preprocessor.fit(train, "label", "auto", LOCAL)
    assert prep.categories == {"colour": ["blue", "red"]}
    assert prep.num_features == 3
    features = prep.features(pa.table({"colour": ["red", "green", None]}))
    assert features.tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 1]]


def test_only_the_most_frequent_categories_get_their_own_slot():
    values = [f"v{i:03d}" for i in range(MAX_CATEGORIES + 10)] + ["v000"] * 5
    prep = Preprocessor.fit(pa.table({"c": values, "y": [0.0] * len(values)}), "y", "regression", LOCAL)
    assert len(prep.categories["c"]) == MAX_CATEGORIES and "v000" in prep.categories["c"]


@pytest.mark.parametrize(
    ("target", "task"),
    [
        (["yes", "no", "yes"], "classification"),
        ([True, False, True], "classification"),
        ([0, 1, 2], "classification"),
        ([0.0, 1.0, 1.0], "classification"),
        ([0.5, 1.25, 3.0], "regression"),
        (list(range(100)), "regression"),
    ],
)
def test_auto_task_follows_the_target(target, task):
    table = pa.table({"x": [float(i) for i in range(len(target))], "t": target})
    assert Preprocessor.fit(table, "t", "auto", LOCAL).task == task


def test_class_labels_decode_to_the_targets_own_type():
    table = pa.table({"x": [0.0, 1.0, 2.0], "t": [3, 10, 3]})
    prep = Preprocessor.fit(table, "t", "auto", LOCAL)
    assert prep.classes == ["3", "10"]  # in natural order, not as strings
    assert prep.targets(table).tolist() == [0, 1, 0]
    decoded = prep.decode(torch.tensor([[0.1, 0.9], [0.8, 0.2]]))
    assert decoded.type == pa.int64() and decoded.to_pylist() == [10, 3]


def test_regression_predictions_come_back_in_target_units():
    table = pa.table({"x": [0.0, 1.0, 2.0, 3.0], "t": [10.0, 20.0, 30.0, 40.0]})
    prep = Preprocessor.fit(table, "t", "regression", LOCAL)
    standardised = prep.targets(table)
    assert prep.decode(standardised.reshape(-1, 1)).to_pylist() == pytest.approx([10.0, 20.0, 30.0, 40.0])


def test_the_state_survives_a_round_trip():
    table = pa.table({"x": [1.0, 2.0], "c": ["a", "b"], "t": ["p", "q"]})
    prep = Preprocessor.fit(table, "t", "auto", LOCAL)
    again = Preprocessor.from_state_dict(prep.state_dict())
    assert torch.equal(again.features(table), prep.features(table))


def test_a_missing_target_column_names_the_columns_there_are():
    with pytest.raises(ValueError, match=r"--target 'label' is not a column.*\['x', 'y'\]"):
        drop_unlabelled(pa.table({"x": [1], "y": [2]}), "label")


def test_rows_without_a_target_are_dropped():
    assert drop_unlabelled(pa.table({"x": [1, 2, 3], "t": [1, None, 0]}), "t").num_rows == 2


def test_too_many_values_for_classification_is_refused_with_advice():
    table = pa.table({"x": [0.0] * 40, "t": [f"c{i}" for i in range(40)]})
    with pytest.raises(ValueError, match="use --task regression"):
        Preprocessor.fit(table, "t", "classification", LOCAL)
