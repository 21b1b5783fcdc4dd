"""Preprocessing: statistics from the training rows only, string columns one-hot encoded, the task decided from
the target, and predictions decoded back into the target's own type."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from trainer.data.preprocess import MAX_CATEGORIES, Combine, Preprocessor, drop_unlabelled

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


def test_features_are_filled_in_place_near_the_size_of_the_result():
    """Issue 30, point 1: converting rows to model inputs needs about the result's own memory (float32) and one
    float64 column of scratch — not a float64 stack, full-size temporaries per step, or a dense np.eye one-hot."""
    import tracemalloc

    rows = 20_000
    rng = np.random.default_rng(0)
    columns = {f"x{i}": rng.normal(size=rows) for i in range(10)}
    columns["colour"] = rng.choice([f"c{i}" for i in range(MAX_CATEGORIES)], size=rows)
    table = pa.table(columns | {"y": rng.normal(size=rows)})
    prep = Preprocessor.fit(table, "y", "regression", LOCAL)
    result_bytes = rows * prep.num_features * 4

    tracemalloc.start()
    try:
        features = prep.features(table)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert features.dtype == torch.float32 and features.shape == (rows, 10 + MAX_CATEGORIES + 1)
    # The result, a float64 column of scratch, the row numbers and one column of category indices (int64 each).
    assert peak <= result_bytes + 3 * rows * 8 + (1 << 16)


def test_filling_in_place_gives_the_values_of_a_whole_table_computation():
    """Issue 30, point 1: the column-by-column fill is bitwise the float64 arithmetic it replaces."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1000, 3)) * 1e3
    x[::7, 1] = np.nan
    table = pa.table({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "s": rng.choice(["p", "q"], 1000), "y": x[:, 0]})
    prep = Preprocessor.fit(table, "y", "regression", LOCAL)
    numbers = np.nan_to_num((x - np.array(prep.means)) / np.array(prep.stds), nan=0.0)
    one_hot = np.eye(3)[np.where(table["s"].to_numpy(zero_copy_only=False) == "p", 0, 1)]
    expected = np.concatenate([numbers, one_hot], axis=1).astype(np.float32)
    assert torch.equal(prep.features(table), torch.from_numpy(expected))


def test_parts_converted_one_by_one_equal_the_whole_table_and_are_released():
    """Issue 30, point 1: a rank's shards are converted one at a time into one array, each part's Arrow rows let
    go once converted; the tensors are exactly those of the concatenated table."""
    rng = np.random.default_rng(2)
    parts = [
        pa.table({"x": rng.normal(size=n), "s": rng.choice(["a", "b", "c"], n), "y": rng.choice(["u", "v"], n)})
        for n in (5, 0, 17, 9)
    ]
    whole = pa.concat_tables(parts)
    prep = Preprocessor.fit(whole, "y", "auto", LOCAL)
    queue = list(parts)
    inputs, targets = prep.tensors_of_parts(queue)
    assert queue == []
    assert torch.equal(inputs, prep.features(whole)) and torch.equal(targets, prep.targets(whole))
