"""Turning table columns into model inputs and targets: numeric columns standardised with statistics of the
training split, string columns one-hot encoded over their most frequent values, and the target encoded as a
class index (classification) or a standardised value (regression). The fitted state travels inside
`model.pt`, so `trainer.predict` applies exactly the same transformation.

Statistics come from the rows a rank owns; when ranks own different rows (sharded data) they are combined
across ranks, so every rank ends up with the same preprocessing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from trainer.distributed import collectives

MAX_CATEGORIES = 50  # one-hot slots per string column; rarer values share the "other" slot
MAX_CLASSES = 32  # --task auto: an integer or string target with at most this many values is a class label
TASKS = ("auto", "classification", "regression")


class Combine:
    """How per-rank statistics become global ones: across ranks for sharded data, as they are otherwise."""

    def __init__(self, across_ranks: bool):
        self.across_ranks = across_ranks

    def sum(self, values: np.ndarray) -> np.ndarray:
        if not self.across_ranks:
            return values
        return collectives.sum_array(values)

    def gather(self, obj: Any) -> list[Any]:
        if not self.across_ranks:
            return [obj]
        return collectives.gather_objects(obj)


def _is_numeric(arrow_type: pa.DataType) -> bool:
    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_boolean(arrow_type)


def _as_float(column: pa.ChunkedArray) -> np.ndarray:
    return column.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _standardised(values: np.ndarray, mean: Any, std: Any, out: np.ndarray) -> np.ndarray:
    """`values` standardised into `out`, in float64, a missing (NaN) one becoming 0 (the training mean): one column
    with its mean and std, or a block of columns with a row of each — element by element the same arithmetic."""
    np.subtract(values, mean, out=out)
    np.divide(out, std, out=out)
    if not np.isfinite(out).all():  # nan_to_num costs tens of µs even when it has nothing to do
        np.nan_to_num(out, copy=False, nan=0.0)
    return out


def _as_keys(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return pc.cast(column, pa.string())


def _natural_order(key: str) -> tuple:
    try:
        return (0, float(key), key)
    except ValueError:
        return (1, 0.0, key)


def keep_columns(table: pa.Table, target: str, features: list[str] | None) -> pa.Table:
    """Only the chosen feature columns and the target (all columns when no features are chosen)."""
    if not features:
        return table
    missing = [c for c in features if c not in table.column_names]
    if missing:
        raise ValueError(f"--features {missing} are not columns of the data; columns are {table.column_names}")
    return table.select([c for c in features if c != target] + [target])


def drop_unlabelled(table: pa.Table, target: str) -> pa.Table:
    if target not in table.column_names:
        raise ValueError(f"--target {target!r} is not a column of the data; columns are {table.column_names}")
    if table[target].null_count == 0:
        return table  # nothing to drop: no copy of the whole table
    return table.filter(pc.is_valid(table[target]))


@dataclass
class Preprocessor:
    target: str
    task: str
    target_type: str
    numeric: list[str] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    stds: list[float] = field(default_factory=list)
    categories: dict[str, list[str]] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)
    class_counts: list[float] = field(default_factory=list)
    target_mean: float = 0.0
    target_std: float = 1.0

    @property
    def num_features(self) -> int:
        return len(self.numeric) + sum(len(v) + 1 for v in self.categories.values())

    @property
    def num_outputs(self) -> int:
        return len(self.classes) if self.task == "classification" else 1

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict) -> Preprocessor:
        """The preprocessing a `model.pt` holds, checked first: the file may come from another run (a champion),
        and a vocabulary or class list beyond what `fit` ever makes would cost memory out of all proportion to
        the file's size (each category is one input column)."""
        names = {f.name for f in fields(cls)}
        required = {"target", "task", "target_type"}
        if not isinstance(state, dict) or not required <= set(state) <= names:
            raise ValueError(f"its preprocessing is not one this trainer writes (expected the fields {sorted(names)})")
        prep = cls(**state)
        _check_fitted(prep)
        return prep

    @classmethod
    def fit(cls, train: pa.Table, target: str, task: str, combine: Combine) -> Preprocessor:
        feature_columns = [c for c in train.column_names if c != target]
        # A column is numeric only if every rank saw it as numeric (or saw only nulls).
        local_kinds = {
            c: "null" if pa.types.is_null(train[c].type) else ("numeric" if _is_numeric(train[c].type) else "string")
            for c in feature_columns
        }
        all_kinds = combine.gather(local_kinds)
        numeric = [c for c in feature_columns if all(k[c] in ("numeric", "null") for k in all_kinds)]
        strings = [c for c in feature_columns if c not in numeric]

        means, stds = _standardisation([train[c] for c in numeric], combine)
        categories = {c: _vocabulary(train[c], combine) for c in strings}

        prep = cls(target=target, task=task, target_type=str(train[target].type))
        prep.numeric, prep.means, prep.stds, prep.categories = numeric, means, stds, categories
        prep._fit_target(train[target], combine)
        return prep

    def _fit_target(self, column: pa.ChunkedArray, combine: Combine) -> None:
        seen = combine.gather(_few_distinct(column))
        all_distinct = (
            None if any(s is None for s in seen) else sorted({k for s in seen for k in s}, key=_natural_order)
        )
        if self.task == "auto":
            self.task = _decide_task(column.type, all_distinct)
        if self.task == "classification":
            if all_distinct is None:
                raise ValueError(
                    f"--target {self.target!r} has more than {MAX_CLASSES} distinct values, too many for "
                    "classification; use --task regression"
                )
            self.classes = all_distinct
            counts = Counter(_as_keys(column).to_pylist())
            self.class_counts = combine.sum(np.array([counts[k] for k in self.classes], dtype=np.float64)).tolist()
        else:
            if not _is_numeric(column.type):
                raise ValueError(f"--target {self.target!r} holds {column.type} values; regression needs numbers")
            (mean,), (std,) = _standardisation([column], combine)
            self.target_mean, self.target_std = mean, std

    def features(self, table: pa.Table) -> torch.Tensor:
        """The model inputs of `table`'s rows: one float32 array filled column by column, so memory stays near
        the result's own size (one float64 column of scratch, no stacked or one-hot temporaries)."""
        out = self._empty_features(table.num_rows)
        self._fill_features(out, table)
        return torch.from_numpy(out)

    def tensors_of_parts(self, parts: list[pa.Table]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of the rows of `parts` in order, as `features`/`targets` of their concatenation give
        them. The list is emptied as it goes: each part is released once converted, so a rank holds its Arrow rows
        and their tensors together only one part at a time (the output's pages are touched only as they fill)."""
        rows = sum(p.num_rows for p in parts)
        inputs = self._empty_features(rows)
        targets = np.empty(rows, dtype=np.int64 if self.task == "classification" else np.float32)
        start = 0
        while parts:
            part = parts.pop(0)
            stop = start + part.num_rows
            self._fill_features(inputs[start:stop], part)
            targets[start:stop] = self.targets(part).numpy()
            start = stop
            del part
        return torch.from_numpy(inputs), torch.from_numpy(targets)

    def _empty_features(self, rows: int) -> np.ndarray:
        # np.zeros maps untouched pages lazily: the one-hot blocks cost only what is written into them.
        return np.zeros((rows, self.num_features), dtype=np.float32)

    def features_of_values(self, numbers: np.ndarray, categories: list[pa.Array]) -> torch.Tensor:
        """The model inputs of rows given as values rather than a table (online prediction: trainer/serve.py):
        `numbers` the float64 values of the numeric columns, a row per row and NaN where one is missing, and
        `categories` the string columns in the order of `self.categories`. The same arithmetic as `features`
        (a whole block at once, which gives the same values as column by column), so a row gets the same inputs
        either way."""
        out = self._empty_features(len(numbers))
        out[:, : len(self.numeric)] = _standardised(numbers, np.array(self.means), np.array(self.stds), out=numbers)
        self._fill_one_hot(out, categories)
        return torch.from_numpy(out)

    def _fill_features(self, out: np.ndarray, table: pa.Table) -> None:
        present = set(table.column_names)  # a list built anew on every access
        missing = [c for c in [*self.numeric, *self.categories] if c not in present]
        if missing:
            raise ValueError(f"the data lacks feature columns {missing} that the model was trained on")
        scratch = np.empty(table.num_rows, dtype=np.float64)
        for j, (column, mean, std) in enumerate(zip(self.numeric, self.means, self.stds, strict=True)):
            out[:, j] = _standardised(_as_float(table[column]), mean, std, out=scratch)
        del scratch
        self._fill_one_hot(out, [table[column] for column in self.categories])

    def _fill_one_hot(self, out: np.ndarray, columns: list[pa.Array] | list[pa.ChunkedArray]) -> None:
        offset = len(self.numeric)
        every_row = np.arange(len(out))
        for column, vocabulary in zip(columns, self.categories.values(), strict=True):
            index = pc.index_in(_as_keys(column), value_set=pa.array(vocabulary, pa.string()))
            index = pc.fill_null(index, len(vocabulary)).to_numpy(zero_copy_only=False)
            out[every_row, offset + index] = 1.0
            offset += len(vocabulary) + 1

    def targets(self, table: pa.Table) -> torch.Tensor:
        column = table[self.target]
        if self.task == "classification":
            index = pc.index_in(_as_keys(column), value_set=pa.array(self.classes, pa.string()))
            if index.null_count:
                unknown = pc.filter(_as_keys(column), pc.is_null(index)).unique().to_pylist()[:5]
                raise ValueError(f"target values {unknown} were not seen when the classes were fitted")
            return torch.from_numpy(index.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
        values = np.subtract(_as_float(column), self.target_mean)
        np.divide(values, self.target_std, out=values)
        return torch.from_numpy(values.astype(np.float32))

    def decode(self, outputs: torch.Tensor) -> pa.Array:
        """Model outputs → predictions in the target's own type (a class label, or a value in its units)."""
        if self.task == "classification":
            labels = pa.array(self.classes, pa.string()).take(pa.array(outputs.argmax(dim=1).numpy()))
            try:
                return labels.cast(pa.type_for_alias(self.target_type))
            except (ValueError, TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return labels
        values = outputs.reshape(-1).double().numpy() * self.target_std + self.target_mean
        return pa.array(values)


def _check_fitted(prep: Preprocessor) -> None:
    """Raise ValueError unless `prep` has the shape `Preprocessor.fit` gives: its own types and limits."""

    def strings(values: Any, at_most: int | None = None) -> bool:
        fits = at_most is None or (isinstance(values, list) and len(values) <= at_most)
        return isinstance(values, list) and fits and all(isinstance(v, str) for v in values)

    def numbers(values: Any, count: int | None = None) -> bool:
        fits = count is None or (isinstance(values, list) and len(values) == count)
        return isinstance(values, list) and fits and all(isinstance(v, (int, float)) for v in values)

    columns = len(prep.numeric) if isinstance(prep.numeric, list) else None
    checks = {
        f"task {prep.task!r}": prep.task in ("classification", "regression"),
        "target": isinstance(prep.target, str) and isinstance(prep.target_type, str),
        "numeric columns": strings(prep.numeric) and numbers(prep.means, columns) and numbers(prep.stds, columns),
        f"string columns (at most {MAX_CATEGORIES} categories each)": isinstance(prep.categories, dict)
        and all(isinstance(c, str) and strings(v, MAX_CATEGORIES) for c, v in prep.categories.items()),
        f"classes (1 to {MAX_CLASSES} for classification)": strings(prep.classes, MAX_CLASSES)
        and (prep.task != "classification" or bool(prep.classes)),
        "target statistics": numbers(prep.class_counts) and numbers([prep.target_mean, prep.target_std]),
    }
    problems = [what for what, holds in checks.items() if not holds]
    if problems:
        raise ValueError(f"its preprocessing is not one this trainer writes: {', '.join(problems)}")


def _few_distinct(column: pa.ChunkedArray, slice_rows: int = 65_536) -> list[str | None] | None:
    """The column's distinct values as text when there are at most MAX_CLASSES of them, else None. Read a slice
    at a time and given up at the first slice past the limit: a continuous target's million distinct values are
    never hashed or made text all at once."""
    distinct: set[str | None] = set()
    for start in range(0, len(column), slice_rows):
        distinct.update(_as_keys(pc.unique(column.slice(start, slice_rows))).to_pylist())
        if len(distinct) > MAX_CLASSES:
            return None
    return list(distinct)


def _decide_task(arrow_type: pa.DataType, distinct: list[str] | None) -> str:
    if not _is_numeric(arrow_type) or pa.types.is_boolean(arrow_type):
        return "classification"
    if distinct is not None and all(float(k).is_integer() for k in distinct):
        return "classification"
    return "regression"


def _standardisation(columns: list[pa.ChunkedArray], combine: Combine) -> tuple[list[float], list[float]]:
    """Mean and standard deviation of each column over the non-missing values; two passes for precision. One
    column is converted to float64 at a time (a whole table of them would be twice the table's float32 size)."""
    if not columns:
        return [], []
    counts, sums = np.zeros(len(columns)), np.zeros(len(columns))
    for i, column in enumerate(columns):
        values = _as_float(column)
        present = ~np.isnan(values)
        counts[i], sums[i] = present.sum(), values[present].sum()
    counts, sums = combine.sum(counts), combine.sum(sums)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    squares = np.zeros(len(columns))
    for i, (column, mean) in enumerate(zip(columns, means, strict=True)):
        values = _as_float(column)
        squares[i] = ((values[~np.isnan(values)] - mean) ** 2).sum()
    squares = combine.sum(squares)
    variances = np.divide(squares, counts, out=np.zeros_like(squares), where=counts > 0)
    # A constant column would divide by zero; leave it centred and unscaled.
    stds = [math.sqrt(v) if v > 0 else 1.0 for v in variances]
    return means.tolist(), stds


def _vocabulary(column: pa.ChunkedArray, combine: Combine) -> list[str]:
    local = Counter(v for v in _as_keys(column).to_pylist() if v is not None)
    total: Counter[str] = Counter()
    for counts in combine.gather(dict(local)):
        total.update(counts)
    most_frequent = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CATEGORIES]
    return sorted(k for k, _ in most_frequent)


class FitAccumulator:
    """`Preprocessor.fit`'s statistics gathered block by block, for data streamed rather than held: counts, means
    and squared deviations merged with Chan et al.'s pairwise update (the same figures as fit's two passes up to
    floating-point rounding), category and class counts exactly. `kinds` says which feature columns are numbers,
    decided from every rank's schemas as fit decides it from every rank's tables."""

    def __init__(self, target: str, features: list[str], numeric: list[str], target_type: pa.DataType):
        self.target, self.target_type = target, target_type
        self.numeric = numeric
        self.strings = [c for c in features if c not in numeric]
        self.moments = np.zeros((len(numeric) + 1, 3))  # (count, mean, m2) per numeric column, then the target
        self.vocabularies: dict[str, Counter[str]] = {c: Counter() for c in self.strings}
        self.classes: Counter[str] | None = Counter()  # None once there are too many values to be classes

    def add(self, table: pa.Table) -> None:
        """Take in a block of labelled training rows."""
        for i, column in enumerate(self.numeric):
            _merge_moments(self.moments[i], _as_float(table[column]) if column in table.column_names else None)
        for column, counts in self.vocabularies.items():
            if column in table.column_names:
                counts.update(_counts(_as_keys(table[column])))
        target = table[self.target]
        if _is_numeric(self.target_type):
            _merge_moments(self.moments[-1], _as_float(target))
        if self.classes is not None:
            self.classes.update(_counts(_as_keys(target)))
            if len(self.classes) > MAX_CLASSES:
                self.classes = None

    def finish(self, task: str, combine: Combine) -> Preprocessor:
        """The Preprocessor, the same on every rank."""
        moments = _merged_moments(combine.gather(self.moments))
        means = [float(m) for m in moments[:-1, 1]]
        stds = [math.sqrt(m2 / n) if n > 0 and m2 > 0 else 1.0 for n, _, m2 in moments[:-1]]
        categories = {}
        for column, local in self.vocabularies.items():
            total: Counter[str] = Counter()
            for counts in combine.gather(dict(local)):
                total.update(counts)
            most_frequent = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CATEGORIES]
            categories[column] = sorted(k for k, _ in most_frequent)
        prep = Preprocessor(target=self.target, task=task, target_type=str(self.target_type))
        prep.numeric, prep.means, prep.stds, prep.categories = self.numeric, means, stds, categories
        seen = combine.gather(dict(self.classes) if self.classes is not None else None)
        all_classes: Counter[str] | None = Counter()
        for counts in seen:
            if counts is None or all_classes is None:
                all_classes = None
            else:
                all_classes.update(counts)
        if all_classes is not None and len(all_classes) > MAX_CLASSES:
            all_classes = None
        distinct = None if all_classes is None else sorted(all_classes, key=_natural_order)
        if prep.task == "auto":
            prep.task = _decide_task(self.target_type, distinct)
        if prep.task == "classification":
            if distinct is None:
                raise ValueError(
                    f"--target {self.target!r} has more than {MAX_CLASSES} distinct values, too many for "
                    "classification; use --task regression"
                )
            assert all_classes is not None
            prep.classes, prep.class_counts = distinct, [float(all_classes[k]) for k in distinct]
        else:
            if not _is_numeric(self.target_type):
                raise ValueError(f"--target {self.target!r} holds {self.target_type} values; regression needs numbers")
            n, mean, m2 = moments[-1]
            prep.target_mean, prep.target_std = float(mean), math.sqrt(m2 / n) if n > 0 and m2 > 0 else 1.0
        return prep


def _counts(keys: pa.ChunkedArray) -> Counter[str]:
    counted = pc.value_counts(keys)
    pairs = zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True)
    return Counter({v: c for v, c in pairs if v is not None})


def _merge_summary(row: np.ndarray, n: float, mean: float, m2: float) -> None:
    """Chan et al.'s pairwise update of (count, mean, m2) in `row` with another part's."""
    if n == 0:
        return
    total = row[0] + n
    delta = mean - row[1]
    row[2] += m2 + delta * delta * row[0] * n / total
    row[1] += delta * n / total
    row[0] = total


def _merge_moments(row: np.ndarray, values: np.ndarray | None) -> None:
    if values is None:
        return
    values = values[~np.isnan(values)]
    if len(values):
        mean = float(values.mean())
        _merge_summary(row, len(values), mean, float(((values - mean) ** 2).sum()))


def _merged_moments(parts: list[np.ndarray]) -> np.ndarray:
    merged = np.zeros_like(parts[0])
    for part in parts:
        for row, theirs in zip(merged, part, strict=True):
            _merge_summary(row, *theirs)
    return merged
