"""schema.json, what the data a model learned from looked like (issue 27, point 1): written beside model.pt before
_SUCCESS by the contract the controller reads, from the rows already in memory; shards summarised by each rank
merge into the description of the whole table; bounded in size; a champion's file read with a bound and checked."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pytest
from trainer_runs import output_dirs, process_env, run

import trainer.data.schema
from trainer.data.preprocess import Combine
from trainer.data.schema import (
    MAX_VALUE_CHARS,
    QUANTILES,
    TOP_CATEGORIES,
    describe,
    local_summaries,
    merge_summaries,
    merge_types,
    read_schema,
    schema_bytes,
    schema_problem,
)

ALONE = Combine(across_ranks=False)


def mixed_table() -> pa.Table:
    return pa.table(
        {
            "age": pa.array([30, 41, None, 25, 41, 60, 33, 41], pa.int64()),
            "income": pa.array([1.5, float("nan"), 2.5, None, 4.0, 2.5, 8.0, 3.0], pa.float64()),
            "city": pa.array(["Oslo", "Lima", None, "Oslo", "Oslo", "Pune", "Lima", "Oslo"]),
            "member": pa.array([True, False, True, True, None, False, True, True]),
            "note": pa.array([None] * 8, pa.null()),
            "churned": pa.array(["no", "yes", "no", "no", "yes", "no", "no", "yes"]),
        }
    )


def lower_quantiles(values: list[float]) -> dict[str, float]:
    return {str(q): float(np.quantile(values, q, method="inverted_cdf")) for q in QUANTILES}


def test_the_schema_records_each_column_by_the_contract():
    """issue 27, point 1: names, coarse and physical types, roles, missing rates, number statistics and category
    frequencies, as the controller's contract has them."""
    description = describe(mixed_table(), "churned", ["age", "city", "member"], "parquet", ALONE, seed=0)
    document = json.loads(schema_bytes(description.document(task="classification")))
    assert {k: v for k, v in document.items() if k != "columns"} == {
        "schema_version": 1, "format": "parquet", "target": "churned", "task": "classification", "rows": 8,
    }  # fmt: skip
    columns = {c["name"]: c for c in document["columns"]}
    assert list(columns) == ["age", "income", "city", "member", "note", "churned"]
    assert {n: (c["type"], c["physical"], c["role"]) for n, c in columns.items()} == {
        "age": ("number", "int64", "feature"),
        "income": ("number", "double", "unused"),
        "city": ("string", "string", "feature"),
        "member": ("boolean", "bool", "feature"),
        "note": ("string", "null", "unused"),
        "churned": ("string", "string", "target"),
    }
    ages = [30, 41, 25, 41, 60, 33, 41]
    assert columns["age"]["missing_rate"] == 0.125
    assert columns["age"]["stats"] == {
        "mean": pytest.approx(np.mean(ages)), "std": pytest.approx(np.std(ages)), "min": 25.0, "max": 60.0,
        "quantiles": lower_quantiles(ages),
    }  # fmt: skip
    assert columns["income"]["missing_rate"] == 0.25  # null and NaN alike
    assert columns["income"]["stats"]["quantiles"] == lower_quantiles([1.5, 2.5, 4.0, 2.5, 8.0, 3.0])
    assert columns["city"] == {
        "name": "city", "type": "string", "physical": "string", "role": "feature", "missing_rate": 0.125,
        "stats": {"categories": {"Oslo": round(4 / 7, 6), "Lima": round(2 / 7, 6), "Pune": round(1 / 7, 6)},
                  "other": 0.0},
    }  # fmt: skip
    member = {"categories": {"true": round(5 / 7, 6), "false": round(2 / 7, 6)}, "other": 0.0}
    assert columns["member"]["stats"] == member
    assert columns["note"]["missing_rate"] == 1.0 and columns["note"]["stats"] == {"categories": {}, "other": 0.0}
    assert schema_problem(document) is None


def test_category_values_are_clipped_and_only_the_most_frequent_are_kept():
    """issue 27, point 1 (bounded sizes): values past MAX_VALUE_CHARS characters are recorded by their start, only
    the TOP_CATEGORIES most frequent are named and the rest is `other`."""
    long = "x" * 300
    values = [long, long + "-tail"] + [f"v{i:03d}" for i in range(80) for _ in range(1 + (i < 10))]
    description = describe(pa.table({"c": values, "y": [1] * len(values)}), "y", None, "csv", ALONE, seed=0)
    stats = description.columns[0]["stats"]
    assert len(stats["categories"]) == TOP_CATEGORIES
    assert stats["categories"]["x" * MAX_VALUE_CHARS] == round(2 / len(values), 6)  # both long values, clipped alike
    named = 2 + 10 * 2 + (TOP_CATEGORIES - 11)
    assert stats["other"] == round(1 - named / len(values), 6)


def test_shards_summarised_apart_merge_into_the_whole_tables_description():
    """issue 27, point 1: with sharded data each rank summarises its own rows; the merge gives the whole table's
    figures — an int64 shard and a double shard of one column are numbers (double), a shard where a column is all
    null has no say in its type, and quantiles of ranks holding no more values than the sketch are exact."""
    rng = np.random.default_rng(3)
    whole = pa.table({"x": rng.normal(size=900), "k": rng.choice(["a", "b", "c"], size=900)})
    parts = [whole.slice(0, 300), whole.slice(300, 500), whole.slice(800)]
    parts[2] = parts[2].set_column(0, "x", pc.cast(pc.round(parts[2]["x"]), pa.int64()))
    parts.append(pa.table({"x": pa.nulls(50), "k": pa.nulls(50, pa.string())}))
    types = merge_types([p.schema for p in parts])
    assert {n: (t.type, t.physical) for n, t in types.items()} == {"x": ("number", "double"), "k": ("string", "string")}

    summaries = [local_summaries(p, types, seed=0) for p in parts]
    present, stats = merge_summaries("number", [s["x"] for s in summaries])
    together = np.concatenate([p["x"].to_numpy(zero_copy_only=False).astype(float) for p in parts[:3]])
    assert present == 900
    assert stats["mean"] == pytest.approx(together.mean()) and stats["std"] == pytest.approx(together.std())
    assert stats["quantiles"] == lower_quantiles(together.tolist())
    present, stats = merge_summaries("string", [s["k"] for s in summaries])
    counts = dict(zip(*np.unique(whole["k"].to_numpy(zero_copy_only=False), return_counts=True), strict=True))
    assert present == 900 and stats["categories"] == {k: round(c / 900, 6) for k, c in counts.items()}


def test_a_large_column_is_summarised_from_a_bounded_sample(monkeypatch):
    """issue 27, point 1 (cheap, bounded): quantiles of more values than the sample come from a seeded sample and
    are within a small share of the exact ones; what a rank hands the merge is at most SKETCH_POINTS values."""
    monkeypatch.setattr(trainer.data.schema, "SAMPLED_VALUES", 20_000)
    values = np.random.default_rng(5).exponential(size=200_000)
    table = pa.table({"x": values})
    types = merge_types([table.schema])
    summary = local_summaries(table, types, seed=1)["x"]
    assert len(summary["sketch"]) == trainer.data.schema.SKETCH_POINTS
    _, stats = merge_summaries("number", [summary])
    exact = np.quantile(values, QUANTILES)
    ranks = np.searchsorted(np.sort(values), [stats["quantiles"][str(q)] for q in QUANTILES]) / len(values)
    assert np.all(np.abs(ranks - np.array(QUANTILES)) < 0.01), (ranks, exact)
    assert stats["mean"] == pytest.approx(values.mean())  # exact: every value counts


def test_a_champions_schema_is_read_with_a_bound_and_checked(tmp_path, monkeypatch):
    """issue 27, point 1: the champion's schema.json is at <champion model dir>/schema.json; another run wrote it."""
    assert read_schema(str(tmp_path)) is None  # a champion registered before schema.json existed
    document = describe(mixed_table(), "churned", None, "csv", ALONE, seed=0).document(task="classification")
    (tmp_path / "schema.json").write_bytes(schema_bytes(document))
    assert read_schema(str(tmp_path)) == json.loads(schema_bytes(document))

    monkeypatch.setattr(trainer.data.schema, "MAX_SCHEMA_BYTES", 100)
    with pytest.raises(ValueError, match="larger than the 100 bytes"):
        read_schema(str(tmp_path))
    number = document["columns"][0]
    broken = [
        ({**document, "schema_version": 2}, "schema_version 1"),
        ({**document, "columns": [{**number, "type": "date"}]}, "`type` must be one of"),
        ({**document, "columns": [{**number, "missing_rate": 1.5}]}, "missing_rate"),
        ({**document, "columns": [{**number, "stats": {**number["stats"], "quantiles": {"0.5": 1}}}]}, "exactly"),
        ({**document, "columns": [{**document["columns"][2], "stats": {"categories": {"a": "x"}, "other": 0}}]},
         "frequencies"),
    ]  # fmt: skip
    for bad, problem in broken:
        assert problem in schema_problem(bad)


def test_a_two_process_run_writes_the_schema_of_all_its_shards_and_reports_drift_without_stopping(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 27, points 1 and 3: two ranks each summarise their own shards (sharded data) and rank 0 writes
    schema.json — equal to the description of the whole table read in one piece — before _SUCCESS; with a
    champion and no --max-drift the shifted feature's drift is reported and the run trains and succeeds."""
    data = tmp_path / "data"
    data.mkdir()
    tables = []
    for index, shard in enumerate(sorted(breast_cancer_csv_shards.glob("*.csv"))):
        table = pa_csv.read_csv(shard)
        table = table.set_column(0, "mean radius", pc.add(table["mean radius"], 5.0))  # the shifted feature
        colour = np.where(np.arange(table.num_rows) % 3 == index % 3, "red", "blue")
        table = table.append_column("colour", pa.array(colour.tolist(), pa.string()))  # a column of text too
        pa_csv.write_csv(table, data / shard.name)
        tables.append(pa_csv.read_csv(data / shard.name))
    out = tmp_path / "out"
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(data), "--target", "target", "--epochs", "2", "--batch-size", "32",
         "--champion-model-dir", str(trained_breast_cancer_model), *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    assert [e["mode"] for e in finished.messages("dataset loaded")] == ["sharded", "sharded"]
    model = out / "model"
    assert (model / "schema.json").stat().st_mtime_ns <= (model / "_SUCCESS").stat().st_mtime_ns

    written = json.loads((model / "schema.json").read_text())
    whole = pa.concat_tables(tables)
    expected = describe(whole, "target", None, "csv", ALONE, seed=0).document(task="classification")
    assert {k: v for k, v in written.items() if k != "columns"} == {k: v for k, v in expected.items() if k != "columns"}
    assert [c["name"] for c in written["columns"]] == [c["name"] for c in expected["columns"]]
    for got, want in zip(written["columns"], expected["columns"], strict=True):
        assert got == {**want, "stats": got["stats"]}, got["name"]
        if want["type"] == "number":  # sums in another order: equal up to rounding
            assert {k: got["stats"][k] for k in ("min", "max", "quantiles")} == {
                k: want["stats"][k] for k in ("min", "max", "quantiles")
            }
            assert got["stats"]["mean"] == pytest.approx(want["stats"]["mean"], rel=1e-12)
            assert got["stats"]["std"] == pytest.approx(want["stats"]["std"], rel=1e-9)
        else:
            assert got["stats"] == want["stats"]
    colour = next(c for c in written["columns"] if c["name"] == "colour")
    assert set(colour["stats"]["categories"]) == {"red", "blue"} and colour["stats"]["other"] == 0.0

    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["drift_measure"] == "psi" and metrics["max_drift_feature"] == "mean radius"
    assert metrics["drift"]["mean radius"] > 1.0  # a shift of about 1.4 standard deviations
    assert sorted(metrics["drift"].values())[-2] < 0.01  # the others are the champion's very rows
    assert metrics["drift_features"] == 30 and len(metrics["drift"]) == 20 and metrics["drift_threshold"] is None
    assert metrics["champion_scored_on_same_rows"] is True and metrics["epochs_trained"] == 2
