"""Columns that make poor features: an ID (nearly every value its own, or whole numbers counting up) or a constant
(one value, or none). `trainctl init` flags them in a sample of the data and leaves them out of the features it
proposes; the built-in trainer flags them among the features it trains on, from its description of every row
(schema.json), and says so in metrics.json's `data_warnings`, which the `succeeded` event carries (issue 44: an ID
column of 4,000 unique strings was used as a feature without a word). Pure: no torch, no pyarrow."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Fewer present values than this say nothing about uniqueness: a handful of rows are all distinct by chance.
MIN_VALUES = 20
# An ID: at least this share of the present values distinct.
DISTINCT_SHARE = 0.95
# Whole numbers count up when they are distinct and fill their range: max - min + 1 at most this many times their
# count (and, from a description that holds no distinct count, at least their count: ages 18 to 80 over 4,000 rows
# are evenly spread too, and no ID).
DENSE_RANGE = 1.1
# id, customer_id, order-id, customerId, CustomerID, uuid …; not paid, valid or fluid.
ID_NAME = re.compile(r"(?i:^(id|uuid|guid|key|index|row|rowid)$|[_\-. ]id$|uuid|guid)|[a-z](Id|ID)$")
# Text that a CSV reader takes for a missing value (pyarrow's defaults, as the trainer reads CSV).
MISSING = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                     "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null"})  # fmt: skip
_INTEGER = re.compile(r"\s*[-+]?[0-9]{1,18}\s*")  # int64 and within: no int() of thousands of digits
_REAL = re.compile(r"\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*")


def named_like_an_id(name: str) -> bool:
    return bool(ID_NAME.search(name))


def named_features(features: list[str] | None) -> list[str]:
    """`trainctl validate`'s warnings for a request whose `dataset.features` names a column like an ID: all it can know
    without the data (the trainer, which reads it, flags by values: `data_warnings`)."""
    return [f"dataset.features: {name!r} is named like an ID; an ID is no feature (the trainer will say whether its "
            "values look like one)" for name in features or [] if named_like_an_id(name)]  # fmt: skip


def flag_sample(name: str, values: Iterable[Any]) -> str | None:
    """Why the column `name`, holding `values` in a sample (text as a CSV holds it, or Python values as Parquet
    gives them), is no feature: 'constant: …' or 'ID-like: …'; None when it may be one."""
    present = [v for v in values if v is not None and not (isinstance(v, str) and v in MISSING)]
    present = [v for v in present if not (isinstance(v, float) and v != v)]  # NaN
    if not present:
        return "constant: no value in the sample"
    distinct = set(map(str, present))
    if len(distinct) == 1:
        return f"constant: every sampled value is {next(iter(distinct))!r}"
    if len(present) < MIN_VALUES:
        return None
    unique = len(distinct) >= DISTINCT_SHARE * len(present)
    integers = _integers(present)
    if integers is not None:
        if len(set(integers)) == len(integers) and max(integers) - min(integers) + 1 <= DENSE_RANGE * len(integers):
            return f"ID-like: {len(integers)} distinct whole numbers counting up ({min(integers)} to {max(integers)})"
        if unique and named_like_an_id(name):
            return f"ID-like: named like an ID, and {len(distinct)} of {len(present)} sampled values are distinct"
        return None
    if all(_is_real(v) for v in present):
        return None  # measurements: distinct values are what they are
    if unique:
        return f"ID-like: {len(distinct)} of {len(present)} sampled values are distinct"
    return None


def flag_described(column: dict[str, Any], rows: int) -> str | None:
    """The same judgement from a column of schema.json (trainer/data/schema.py) over `rows` rows: a constant from
    its statistics, an ID from its categories (every value its own) or its numbers (whole, filling their range)."""
    stats = column.get("stats") or {}
    present = round(rows * (1.0 - float(column.get("missing_rate") or 0.0)))
    if present == 0:
        return "constant: no value in any row"
    if column.get("type") == "number":
        low, high = stats.get("min"), stats.get("max")
        if low is not None and low == high:
            return f"constant: every value is {low}"
        if (present >= MIN_VALUES and "int" in str(column.get("physical", "")) and low is not None
                and high is not None and present <= high - low + 1 <= DENSE_RANGE * present
                and _spread_evenly(stats, low, high)):  # fmt: skip
            return f"ID-like: whole numbers from {low:g} to {high:g} over {present} values, evenly spread"
        return None
    categories = stats.get("categories") or {}
    if len(categories) == 1 and not stats.get("other"):
        return f"constant: every value is {next(iter(categories))!r}"
    if present >= MIN_VALUES and categories and max(categories.values()) * present <= 1.5:
        return f"ID-like: every one of {present} values is its own (the most frequent occurs once)"
    return None


def feature_warnings(columns: list[dict[str, Any]], rows: int, limit: int = 20) -> list[str]:
    """`column: why` for each feature column of a description (schema.json's `columns`) that is no feature, at most
    `limit` (metrics.json's lists hold at most 20 entries: functions/untrusted/job_outputs.py)."""
    found = []
    for column in columns:
        if column.get("role") == "feature" and (why := flag_described(column, rows)):
            found.append(f"{str(column.get('name'))[:200]}: {why}")
    return found[:limit]


def _spread_evenly(stats: dict[str, Any], low: float, high: float) -> bool:
    """Whether the quartiles sit where a count from `low` to `high` puts them (within 5% of the range)."""
    quantiles = stats.get("quantiles") or {}
    points = [(float(p), q) for p, q in quantiles.items() if p in ("0.25", "0.5", "0.75") and q is not None]
    span = high - low
    return bool(points) and all(abs(q - (low + p * span)) <= 0.05 * span for p, q in points)


def _integers(values: list[Any]) -> list[int] | None:
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return list(values)
    if all(isinstance(v, str) and _INTEGER.fullmatch(v) for v in values):
        return [int(v) for v in values]
    return None


def _is_real(value: Any) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return True
    return isinstance(value, str) and bool(_REAL.fullmatch(value))
