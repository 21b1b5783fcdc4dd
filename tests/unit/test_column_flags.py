"""Which columns make poor features (trainer/data/column_flags.py): IDs and constants, from a sample or from
schema.json's description — and which do not (measurements, categories, small samples)."""

from __future__ import annotations

import random

from trainer.data.column_flags import feature_warnings, flag_described, flag_sample


def test_unique_strings_are_an_id():
    values = [f"C{random.Random(i).getrandbits(40):x}" for i in range(4000)]
    assert flag_sample("customer", values).startswith("ID-like: 4000 of 4000")


def test_whole_numbers_counting_up_are_an_id_in_text_or_as_integers():
    assert flag_sample("n", [str(i) for i in range(500, 600)]).startswith("ID-like")
    assert flag_sample("n", list(range(100))[::-1]).startswith("ID-like")


def test_a_constant_and_an_empty_column_are_constants():
    assert flag_sample("country", ["NL"] * 50) == "constant: every sampled value is 'NL'"
    assert flag_sample("note", ["", "NA", None] * 10) == "constant: no value in the sample"


def test_measurements_categories_and_few_rows_are_features():
    rng = random.Random(1)
    assert flag_sample("price", [f"{rng.random() * 100:.4f}" for _ in range(1000)]) is None
    assert flag_sample("plan", [rng.choice("abc") for _ in range(1000)]) is None
    assert flag_sample("age", [str(rng.randint(18, 90)) for _ in range(1000)]) is None
    assert flag_sample("name", ["a", "b", "c"]) is None  # three distinct values say nothing


def test_distinct_integers_are_an_id_only_when_named_like_one():
    sparse = [random.Random(i).randint(0, 10**12) for i in range(200)]
    assert flag_sample("amount", sparse) is None
    assert flag_sample("account_id", sparse).startswith("ID-like: named like an ID")


def test_the_description_flags_ids_and_constants_among_features_only():
    rows = 1000
    columns = [
        {"name": "id", "type": "string", "role": "feature", "missing_rate": 0.0,
         "stats": {"categories": {f"k{i}": 1 / rows for i in range(50)}, "other": 0.95}},
        {"name": "row", "type": "number", "physical": "int64", "role": "feature", "missing_rate": 0.0,
         "stats": {"min": 0, "max": 999, "quantiles": {"0.25": 250, "0.5": 500, "0.75": 749}}},
        {"name": "flat", "type": "number", "physical": "double", "role": "feature", "missing_rate": 0.0,
         "stats": {"min": 3.0, "max": 3.0}},
        {"name": "skewed", "type": "number", "physical": "int64", "role": "feature", "missing_rate": 0.0,
         "stats": {"min": 0, "max": 999, "quantiles": {"0.25": 3, "0.5": 10, "0.75": 80}}},
        {"name": "age", "type": "number", "physical": "int64", "role": "feature", "missing_rate": 0.0,
         "stats": {"min": 18, "max": 80, "quantiles": {"0.25": 33, "0.5": 49, "0.75": 64}}},  # uniform, repeated
        {"name": "plan", "type": "string", "role": "feature", "missing_rate": 0.0,
         "stats": {"categories": {"a": 0.5, "b": 0.5}, "other": 0.0}},
        {"name": "target", "type": "number", "physical": "int64", "role": "target", "missing_rate": 0.0,
         "stats": {"min": 1, "max": 1}},
    ]  # fmt: skip
    assert [w.split(":")[0] for w in feature_warnings(columns, rows)] == ["id", "row", "flat"]
    assert flag_described(columns[-1], rows) is not None  # the target is judged too, but never listed


def test_names_like_an_id():
    from trainer.data.column_flags import named_like_an_id

    assert all(map(named_like_an_id, ["id", "ID", "customer_id", "order-id", "customerId", "CustomerID", "row_uuid"]))
    assert not any(map(named_like_an_id, ["paid", "Paid", "valid", "fluid", "width", "grid"]))
