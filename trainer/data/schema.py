"""What the data a model learned from looked like: `schema.json` beside `model.pt`. It travels with the registered
version, so the controller can check a new dataset's header against it before any GPU starts, and the next run's
trainer can measure how far its data drifted from it (trainer/judging/drift.py).

Taken over every row the run read (both splits), from the tables already in memory — the dataset is not read
again. With sharded data each rank summarises its own rows and the summaries are merged on every rank: counts,
means and variances exactly (Chan's pairwise update), quantiles from a bounded sketch of each rank's values,
category frequencies from each rank's most frequent values. The document's size is bounded per column: category
values are clipped to MAX_VALUE_CHARS and only the TOP_CATEGORIES most frequent are kept.

The contract (`schema_version` 1; functions/ reads it, so keep to it):
    {"schema_version": 1, "format": "csv"|"parquet", "target": str, "task": "classification"|"regression",
     "rows": int, "columns": [{"name", "type": "number"|"string"|"boolean", "physical": <arrow type>,
     "role": "feature"|"target"|"unused", "missing_rate",
     "stats": {"mean", "std", "min", "max", "quantiles": {"0.01", …, "0.99"}}            (numbers)
           or {"categories": {<value>: <frequency among present values>}, "other"}}]}    (strings, booleans)
A classification target's stats also hold `"classes": {<label>: <share of the training rows>}` (issue 38: the
target's drift is measured by class; files written before it lack the entry and remain readable).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trainer.data.preprocess import MAX_CLASSES, Combine
from trainer.storage.folders import open_folder

SCHEMA_FILE = "schema.json"  # beside model.pt in the model folder (trainer/outputs/model_folder.py)
SCHEMA_VERSION = 1
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
TYPES = ("number", "string", "boolean")
ROLES = ("feature", "target", "unused")
TOP_CATEGORIES = 50
MAX_VALUE_CHARS = 100  # a category value longer than this is recorded (and compared) by its first 100 characters
# Each rank hands the merge at most this many of its own most frequent values per column: a value outside every
# rank's share is counted in `other`, which only an id-like column (thousands of values) can notice.
SENT_CATEGORIES = 1000
# Quantiles come from at most SAMPLED_VALUES of a rank's values (a seeded sample; the error it adds is about
# 1/sqrt(SAMPLED_VALUES) in rank, well inside a quantile bin), reduced to SKETCH_POINTS evenly spaced order
# statistics for the merge — exact for a rank holding no more values than that.
SAMPLED_VALUES = 100_000
SKETCH_POINTS = 1000
# A champion's schema.json is another run's file: read with a bound. A string column costs at most ~25 KB
# (50 values of 100 characters, UTF-8); a number column about 400 bytes.
MAX_SCHEMA_BYTES = 32 << 20


def coarse_type(arrow_type: pa.DataType) -> str:
    """The class the controller can also tell from a CSV's first rows: numbers (any integer or floating type),
    booleans, and everything else as strings."""
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return "number"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    return "string"


def numbers_of(column: pa.ChunkedArray) -> np.ndarray:
    """The column as float64, with NaN where a value is missing: null, NaN or infinite alike."""
    values = column.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
    values[~np.isfinite(values)] = np.nan
    return values


def category_keys(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """The column's values as the text they are recorded by (booleans as `true`/`false`, numbers as a CSV
    writes them), clipped to MAX_VALUE_CHARS; None for a type that has no such text (a list, a struct)."""
    try:
        keys = pc.cast(column, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return pc.utf8_slice_codeunits(keys, 0, MAX_VALUE_CHARS)


def value_counts(keys: pa.ChunkedArray) -> Counter[str]:
    counted = pc.value_counts(keys)
    values, counts = counted.field("values").to_pylist(), counted.field("counts").to_pylist()
    return Counter({v: c for v, c in zip(values, counts, strict=True) if v is not None})


@dataclass(frozen=True)
class ColumnType:
    type: str  # number | string | boolean
    physical: str  # the arrow type every rank read, or the type they promote to together


@dataclass
class DataDescription:
    """Everything of schema.json but the task, which is decided when the preprocessing is fitted."""

    data_format: str
    target: str
    rows: int
    columns: list[dict]

    def column_types(self) -> dict[str, str]:
        return {c["name"]: c["type"] for c in self.columns}

    def document(self, task: str, class_counts: dict[str, float] | None = None) -> dict:
        """schema.json; a classification's `class_counts` (each class's training rows) become the target's
        `classes`, its labels by share, which a target of numbers otherwise describes by quantiles only."""
        columns = self.columns
        if class_counts:
            clipped: dict[str, float] = {}
            for key, count in class_counts.items():  # clipped as category_keys clips the values counted against them
                clipped[key[:MAX_VALUE_CHARS]] = clipped.get(key[:MAX_VALUE_CHARS], 0.0) + count
            total = sum(clipped.values())
            classes = {key: _rate(count, total) for key, count in clipped.items()}
            columns = [{**c, "stats": {**c["stats"], "classes": classes}} if c["role"] == "target" else c
                       for c in columns]  # fmt: skip
        return {"schema_version": SCHEMA_VERSION, "format": self.data_format, "target": self.target, "task": task,
                "rows": self.rows, "columns": columns}  # fmt: skip


def describe(
    table: pa.Table, target: str, features: list[str] | None, data_format: str, combine: Combine, seed: int
) -> DataDescription:
    """The description of the whole dataset, identical on every rank; `table` is the rows this rank holds. Two
    gathers when ranks hold different rows: the column types first, then the summaries of each column."""
    seen = combine.gather((table.num_rows, table.schema))
    types = merge_types([schema for _, schema in seen])
    return description_of(sum(n for n, _ in seen), types, local_summaries(table, types, seed), target, features,
                          data_format, combine)  # fmt: skip


def description_of(
    rows: int,
    types: dict[str, ColumnType],
    summary: dict[str, dict],
    target: str,
    features: list[str] | None,
    data_format: str,
    combine: Combine,
) -> DataDescription:
    """The description from this rank's summary of each column (`local_summaries`, or `fold_summaries` of a
    streamed rank's blocks), merged with every other rank's."""
    summaries = combine.gather(summary)
    columns = []
    for name, column_type in types.items():
        role = "target" if name == target else "feature" if not features or name in features else "unused"
        present, stats = merge_summaries(column_type.type, [s[name] for s in summaries])
        columns.append({"name": name, "type": column_type.type, "physical": column_type.physical, "role": role,
                        "missing_rate": _rate(rows - present, rows), "stats": stats})  # fmt: skip
    return DataDescription(data_format, target, rows, columns)


def merge_types(schemas: list[pa.Schema]) -> dict[str, ColumnType]:
    """Every column any rank read (in the order ranks first name them) with its type. A column that is numbers on
    some ranks and text on others is text, as the preprocessing takes it; a rank that read only nulls has no say."""
    seen: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for field in schema:
            seen.setdefault(field.name, []).append(field.type)
    types = {}
    for name, found in seen.items():
        known = [t for t in found if not pa.types.is_null(t)] or found
        kinds = {coarse_type(t) for t in known}
        types[name] = ColumnType(kinds.pop() if len(kinds) == 1 else "string", _physical(name, known))
    return types


def _physical(name: str, found: list[pa.DataType]) -> str:
    if len({str(t) for t in found}) == 1:
        return str(found[0])
    try:  # int64 in one shard and double in another, say: what they become together
        fields = [pa.schema([pa.field(name, t)]) for t in found]
        return str(pa.unify_schemas(fields, promote_options="permissive").field(name).type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return " | ".join(sorted({str(t) for t in found}))


def local_summaries(table: pa.Table, types: dict[str, ColumnType], seed: int) -> dict[str, dict]:
    """This rank's share of each column's statistics, small enough to gather from every rank."""
    summaries = {}
    for index, (name, column_type) in enumerate(types.items()):
        column = table[name] if name in table.column_names else pa.chunked_array([], pa.null())
        if column_type.type == "number":
            summaries[name] = _number_summary(numbers_of(column), np.random.default_rng([seed, index]))
        else:
            keys = category_keys(column)
            counts = value_counts(keys) if keys is not None else Counter()
            present = len(column) - column.null_count
            summaries[name] = {"present": present, "counts": dict(counts.most_common(SENT_CATEGORIES))}
    return summaries


def fold_summaries(types: dict[str, ColumnType], parts: list[dict[str, dict]]) -> dict[str, dict]:
    """One rank's summary of each column from the summaries of its blocks (data streamed block by block): counts,
    means and variances exactly (Chan's update), the quantile sketch re-drawn as SKETCH_POINTS evenly spaced points
    of the blocks' weighted sketches, and each block's most frequent categories summed."""
    folded = {}
    for name, column_type in types.items():
        mine = [p[name] for p in parts]
        if column_type.type != "number":
            counts: Counter[str] = Counter()
            for part in mine:
                counts.update(part["counts"])
            present = sum(p["present"] for p in mine)
            folded[name] = {"present": present, "counts": dict(counts.most_common(SENT_CATEGORIES))}
            continue
        mine = [p for p in mine if p["present"]]
        if not mine:
            folded[name] = {"present": 0}
            continue
        present = sum(p["present"] for p in mine)
        mean = sum(p["present"] * p["mean"] for p in mine) / present
        m2 = sum(p["m2"] + p["present"] * (p["mean"] - mean) ** 2 for p in mine)
        folded[name] = {"present": present, "mean": mean, "m2": m2, "min": min(p["min"] for p in mine),
                        "max": max(p["max"] for p in mine), "sketch": _redrawn_sketch(mine)}  # fmt: skip
    return folded


def _redrawn_sketch(parts: list[dict]) -> np.ndarray:
    points = np.concatenate([p["sketch"] for p in parts])
    if len(points) <= SKETCH_POINTS and all(len(p["sketch"]) == p["present"] for p in parts):
        return np.sort(points)  # every value is there: still exact
    weights = np.concatenate([np.full(len(p["sketch"]), p["present"] / len(p["sketch"])) for p in parts])
    order = np.argsort(points, kind="stable")
    points, cumulative = points[order], np.cumsum(weights[order])
    wanted = (np.arange(SKETCH_POINTS) + 0.5) / SKETCH_POINTS * cumulative[-1]
    return points[np.minimum(np.searchsorted(cumulative, wanted, side="left"), len(points) - 1)]


def _number_summary(values: np.ndarray, rng: np.random.Generator) -> dict:
    values = values[~np.isnan(values)]
    if not len(values):
        return {"present": 0}
    mean = float(values.mean())
    sample = values if len(values) <= SAMPLED_VALUES else values[rng.integers(0, len(values), SAMPLED_VALUES)]
    ordered = np.sort(sample)
    points = min(SKETCH_POINTS, len(ordered))
    # Evenly spaced order statistics, each standing for len(values) / points of this rank's values.
    sketch = ordered[((np.arange(points) + 0.5) * len(ordered) / points).astype(np.int64)]
    return {"present": len(values), "mean": mean, "m2": float(((values - mean) ** 2).sum()),
            "min": float(values.min()), "max": float(values.max()), "sketch": sketch}  # fmt: skip


def merge_summaries(kind: str, parts: list[dict]) -> tuple[int, dict]:
    """(values present, the column's `stats`) from every rank's summary of it."""
    present = sum(p["present"] for p in parts)
    if kind != "number":
        counts: Counter[str] = Counter()
        for part in parts:
            counts.update(part["counts"])
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_CATEGORIES]
        kept = sum(c for _, c in top)
        return present, {"categories": {k: _rate(c, present) for k, c in top}, "other": _rate(present - kept, present)}
    parts = [p for p in parts if p["present"]]
    if not parts:
        return 0, {"mean": None, "std": None, "min": None, "max": None, "quantiles": {str(q): None for q in QUANTILES}}
    mean = sum(p["present"] * p["mean"] for p in parts) / present
    m2 = sum(p["m2"] + p["present"] * (p["mean"] - mean) ** 2 for p in parts)  # Chan et al.'s pairwise update
    stats = {"mean": mean, "std": math.sqrt(m2 / present), "min": min(p["min"] for p in parts),
             "max": max(p["max"] for p in parts), "quantiles": _quantiles(parts)}  # fmt: skip
    return present, stats


def _quantiles(parts: list[dict]) -> dict[str, float]:
    """The lower quantile (the smallest value with at least that share of values at or below it) of the
    weighted sketch points of every rank."""
    points = np.concatenate([p["sketch"] for p in parts])
    weights = np.concatenate([np.full(len(p["sketch"]), p["present"] / len(p["sketch"])) for p in parts])
    order = np.argsort(points, kind="stable")
    points, cumulative = points[order], np.cumsum(weights[order])
    total = cumulative[-1]
    found = np.searchsorted(cumulative, np.array(QUANTILES) * total * (1 - 1e-12), side="left")
    return {str(q): float(points[min(i, len(points) - 1)]) for q, i in zip(QUANTILES, found, strict=True)}


def _rate(count: float, total: float) -> float:
    return round(count / total, 6) if total else 0.0


def schema_bytes(document: dict) -> bytes:
    """schema.json's bytes: UTF-8 as it is (clipped values stay at most 100 characters, not 600 escaped bytes)."""
    return (json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n").encode()


def read_schema(model_dir: str) -> dict | None:
    """The schema.json of the model in `model_dir` (another run's), checked; None when the model has none — it was
    trained before the trainer recorded its data. Raises ValueError when the file is unusable."""
    folder = open_folder(model_dir)
    if not folder.exists(SCHEMA_FILE):
        return None
    source = folder.uri(SCHEMA_FILE)
    try:
        document = json.loads(folder.read_at_most(SCHEMA_FILE, MAX_SCHEMA_BYTES))
    except json.JSONDecodeError as e:
        raise ValueError(f"{source} is not JSON: {e}") from e
    problem = schema_problem(document)
    if problem:
        raise ValueError(f"{source} is not a schema this trainer writes: {problem}")
    return document


def schema_problem(document: Any) -> str | None:
    """What makes `document` unusable as the statistics drift is measured against; None when nothing does."""
    if not isinstance(document, dict) or document.get("schema_version") != SCHEMA_VERSION:
        return f"expected an object with schema_version {SCHEMA_VERSION}"
    columns = document.get("columns")
    if not isinstance(columns, list):
        return "`columns` is not a list"
    for index, column in enumerate(columns):
        problem = _column_problem(column)
        if problem:
            return f"columns[{index}]: {problem}"
    return None


def _column_problem(column: Any) -> str | None:
    if not isinstance(column, dict) or not isinstance(column.get("name"), str):
        return "not an object with a `name`"
    if column.get("type") not in TYPES or column.get("role") not in ROLES:
        return f"`type` must be one of {TYPES} and `role` one of {ROLES}"
    if not _is_share(column.get("missing_rate")):
        return "`missing_rate` is not a number from 0 to 1"
    stats = column.get("stats")
    if not isinstance(stats, dict):
        return "`stats` is not an object"
    classes = stats.get("classes")  # a classification target's labels by share; absent before issue 38
    if classes is not None and not (
        isinstance(classes, dict)
        and 0 < len(classes) <= MAX_CLASSES
        and all(isinstance(k, str) and _is_share(v) for k, v in classes.items())
    ):
        return f"`stats.classes` is not an object of 1 to {MAX_CLASSES} labels and their shares"
    if column["type"] == "number":
        if not all(stats.get(k) is None or _is_number(stats.get(k)) for k in ("mean", "std", "min", "max")):
            return "`stats` mean, std, min and max must be numbers (or null)"
        quantiles = stats.get("quantiles")
        if not isinstance(quantiles, dict) or set(quantiles) != {str(q) for q in QUANTILES}:
            return f"`stats.quantiles` must hold exactly {[str(q) for q in QUANTILES]}"
        values = list(quantiles.values())
        if not (all(v is None for v in values) or all(_is_number(v) for v in values)):
            return "`stats.quantiles` must be all numbers or all null"
        return None if all(v is None for v in values) or values == sorted(values) else "quantiles out of order"
    categories = stats.get("categories")
    if not isinstance(categories, dict) or len(categories) > TOP_CATEGORIES:
        return f"`stats.categories` is not an object of at most {TOP_CATEGORIES} values"
    if not all(isinstance(k, str) and _is_share(v) for k, v in categories.items()) or not _is_share(stats.get("other")):
        return "category frequencies must be numbers from 0 to 1"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_share(value: Any) -> bool:
    return _is_number(value) and 0 <= value <= 1
