"""How far this run's data have drifted from the data the champion learned from, per feature, measured as the
data are loaded and before the first epoch (`--champion-model-dir`, `--max-drift`).

The measure is the population stability index, PSI = Σ (actual − expected) · ln(actual / expected) over bins,
because it is the figure practitioners already read, with bands that need no explaining: below 0.1 no real
change, 0.1 to 0.25 a moderate shift, above 0.25 a major one. The bands come from credit scoring, where PSI
began (attributed to E. M. Lewis, "An Introduction to Credit Scoring", 1994; discussed in B. Yurdakul,
"Statistical Properties of Population Stability Index", Western Michigan University dissertation 3208, 2018);
Vertex AI Model Monitoring measures Jensen–Shannon divergence for numbers and the L-infinity distance for
categories by default (vertexai.resources.preview.ml_monitoring.spec.DataDriftSpec), which are bounded but have no
such common reading. The bins are the champion's own: its quantiles for numbers (so each bin holds a known share
of its values) and its most frequent categories plus `other` for strings and booleans, with a bin for missing
values in both, so a column that turns mostly empty drifts too. An empty bin counts as 0.0001, as Evidently does, so
one empty bin adds a bounded amount rather than infinity.

Only the champion's seven quantiles are known, so where its values repeat (a 0/1 column, small counts) its
distribution at a repeated value is known only within a range; the figure then takes the point of that range
nearest the new data, within the new data's own repeat of that value — a continuous feature gets the textbook
figure, and an unchanged discrete one is not flagged for what seven quantiles cannot tell. The price: a change of
a discrete feature that stays inside that range is not seen (a count whose median stays 2). A two-valued column
(quantiles that are only its minimum and maximum: a 0/1 flag) is exact, its mean giving the share of each value.

Every rank counts its own rows in the champion's bins and the counts are summed, so every rank computes the same
figures and takes the same decision: above `--max-drift` all of them stop together, before any collective of
training begins. Like any PSI, the figures of small datasets are noisy: two samples of one distribution differ by
about (bins − 1)·(1/n + 1/m) on average, which matters below a few thousand rows.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import torch.distributed as dist

from trainer import logs
from trainer.data.preprocess import Combine
from trainer.data.schema import QUANTILES, DataDescription, category_keys, numbers_of, read_schema, value_counts
from trainer.distributed import collectives
from trainer.outputs.model_folder import RunRefused, read_failure_note

DRIFT_MEASURE = "psi"
EMPTY_BIN = 1e-4  # the share an empty bin counts as (Evidently's get_binned_data fills zeros with 0.0001)
# metrics.json keeps the figures of the most drifted features only: the controller reads at most 20 entries of an
# object in metrics.json (functions/untrusted/job_outputs.py MAX_NESTED_ENTRIES); `drift_features` says how many there
# were.
REPORTED_FEATURES = 20
SHOWN_IN_ERROR = 10


class DataDrift(RunRefused):
    """The data drifted from the champion's past `--max-drift`: the run stops before training."""

    reason = "data"


def psi(expected: np.ndarray, actual: np.ndarray) -> float:
    """The population stability index of two vectors of bin shares (each summing to 1)."""
    e, a = np.maximum(expected, EMPTY_BIN), np.maximum(actual, EMPTY_BIN)
    return float(np.sum((a - e) * np.log(a / e)))


class NumberBins:
    """A numeric feature cut at the champion's distinct quantiles, plus a bin for missing values."""

    def __init__(self, column: dict):
        self.missing_rate = column["missing_rate"]
        quantiles = [(q, column["stats"]["quantiles"][str(q)]) for q in QUANTILES]
        known = [(q, v) for q, v in quantiles if v is not None]
        self.edges = np.array(sorted({v for _, v in known}), dtype=np.float64)
        # At an edge e the champion's share of values ≤ e is at least the largest quantile level at e and below the
        # next level: exactly the former for continuous values, anywhere in between where values repeat.
        self.at_least = np.array([max(q for q, v in known if v == e) for e in self.edges])
        levels = [q for q, _ in known] + [1.0]
        self.below = np.array([next(q for q in levels if q > top) for top in self.at_least])
        # Quantiles that hold only the minimum and the maximum: a two-valued column (0/1, say), whose share at the
        # minimum its mean tells exactly — where a repeated value leaves other columns a range.
        self.known_cdf = np.full(len(self.edges), np.nan)
        low, high, mean = (column["stats"][k] for k in ("min", "max", "mean"))
        if len(self.edges) == 2 and (low, high) == tuple(self.edges) and mean is not None and low < high:
            self.known_cdf[0] = np.clip((high - mean) / (high - low), self.at_least[0], self.below[0])

    def local_counts(self, column: pa.ChunkedArray | None, rows: int) -> np.ndarray:
        """[values ≤ each edge…, values < each edge…, missing, rows] of this rank."""
        values = numbers_of(column) if column is not None else np.full(rows, np.nan)
        present = values[~np.isnan(values)]
        at_or_below = np.searchsorted(np.sort(present), self.edges, side="right")
        below = np.searchsorted(np.sort(present), self.edges, side="left")
        return np.concatenate([at_or_below, below, [rows - len(present), rows]]).astype(np.float64)

    def figure(self, counts: np.ndarray) -> float:
        k = len(self.edges)
        at_or_below, below, (missing, rows) = counts[:k], counts[k : 2 * k], counts[2 * k :]
        present = rows - missing
        new_cdf = at_or_below / present if present else np.zeros(k)
        repeated = new_cdf - (below / present if present else np.zeros(k))
        nearest = np.clip(new_cdf, self.at_least, np.minimum(self.below, self.at_least + repeated))
        champion_cdf = np.where(np.isnan(self.known_cdf), nearest, self.known_cdf)
        expected = np.diff(champion_cdf, prepend=0.0, append=1.0) * (1 - self.missing_rate)
        actual = np.diff(new_cdf, prepend=0.0, append=1.0) * present / rows
        return psi(np.append(expected, self.missing_rate), np.append(actual, missing / rows))


class CategoryBins:
    """A string or boolean feature binned by the champion's recorded values, `other`, and missing."""

    def __init__(self, column: dict):
        self.missing_rate = column["missing_rate"]
        self.values = list(column["stats"]["categories"])
        shares = np.array([*column["stats"]["categories"].values(), column["stats"]["other"]], dtype=np.float64)
        self.shares = shares / shares.sum() if shares.sum() > 0 else shares  # recorded rounded to 6 places

    def local_counts(self, column: pa.ChunkedArray | None, rows: int) -> np.ndarray:
        """[each recorded value…, other values, missing, rows] of this rank."""
        if column is None:
            return np.array([0.0] * len(self.values) + [0.0, rows, rows])
        keys = category_keys(column)
        counts = value_counts(keys) if keys is not None else {}
        present = len(column) - column.null_count
        known = [counts.get(v, 0) for v in self.values]
        return np.array([*known, present - sum(known), rows - present, rows], dtype=np.float64)

    def figure(self, counts: np.ndarray) -> float:
        *shares, missing, rows = counts
        expected = np.append(self.shares * (1 - self.missing_rate), self.missing_rate)
        return psi(expected, np.array([*shares, missing]) / rows)


def measure(champion: dict, table: pa.Table, description: DataDescription, combine: Combine):
    """({feature: PSI}, {feature: why it was not measured}) for every feature of the champion's schema; `table` is
    this rank's rows. One sum across ranks for all features together."""
    types = description.column_types()
    bins: dict[str, NumberBins | CategoryBins] = {}
    not_measured = {}
    for column in champion["columns"]:
        name = column["name"]
        if column["role"] != "feature":
            continue
        if name not in types:
            not_measured[name] = "not in this run's data"
        elif types[name] != column["type"]:
            not_measured[name] = f"was {column['type']}, is {types[name]}"
        else:
            bins[name] = NumberBins(column) if column["type"] == "number" else CategoryBins(column)
    if not description.rows:
        return {}, {**not_measured, **dict.fromkeys(bins, "this run's data have no rows")}
    local = [b.local_counts(table[n] if n in table.column_names else None, table.num_rows) for n, b in bins.items()]
    counts = combine.sum(np.concatenate(local)) if local else np.array([])
    figures, start = {}, 0
    for (name, feature_bins), part in zip(bins.items(), local, strict=True):
        figures[name] = feature_bins.figure(counts[start : start + len(part)])
        start += len(part)
    return figures, not_measured


def target_bins(champion: dict, target: str, target_type: str | None) -> tuple[NumberBins | CategoryBins | None, str]:
    """The bins of the champion's target (its classes by share when schema.json records them, else its quantiles or
    categories), over labelled rows only — how many rows lack a label is no part of what the labels mean; or None
    and why the target cannot be compared."""
    column = next((c for c in champion["columns"] if c["role"] == "target"), None)
    if column is None or column["name"] != target:
        return None, f"the champion's schema.json describes no target {target!r}"
    if target_type != column["type"]:
        return None, f"was {column['type']}, is {target_type}"
    labelled = {**column, "missing_rate": 0.0}
    classes = column["stats"].get("classes")
    if classes:
        return CategoryBins({**labelled, "stats": {"categories": classes, "other": 0.0}}), ""
    return (NumberBins(labelled) if column["type"] == "number" else CategoryBins(labelled)), ""


def measure_target(
    champion: dict, table: pa.Table, target: str, description: DataDescription, combine: Combine
) -> tuple[float | None, str]:
    """(PSI of the target's labelled values against the champion's, why it was not measured); `table` is this
    rank's rows. Every rank gets the same figure."""
    bins, why = target_bins(champion, target, description.column_types().get(target))
    if bins is None or not description.rows:
        return None, why or "this run's data have no rows"
    column = table[target] if target in table.column_names else pa.chunked_array([], pa.null())
    if isinstance(bins, NumberBins):
        values = numbers_of(column)
        column = pa.chunked_array([values[~np.isnan(values)]], pa.float64())
    else:
        column = column.drop_null()
    counts = combine.sum(bins.local_counts(column, len(column)))
    if not counts[-1]:
        return None, "this run's data have no labelled rows"
    return bins.figure(counts), ""


def drift_against_champion(
    champion_dir: str, table: pa.Table, description: DataDescription, combine: Combine, max_drift: float | None
) -> dict:
    """The drift entries of metrics.json, the same on every rank; raises DataDrift on every rank when a feature
    drifted past `max_drift`. Rank 0 reads the champion's schema.json and hands it to the others; a champion
    without one (trained before the trainer recorded its data) or with an unusable one is reported, never a stop."""
    read: dict | str | None = None
    if dist.get_rank() == 0:
        try:
            read = read_schema(champion_dir) or (
                f"the champion ({champion_dir}) has no schema.json: it was trained before the trainer recorded its "
                "data, so drift was not measured"
            )
        except Exception as e:
            read = f"the champion's schema.json could not be used, so drift was not measured: {_describe(e)}"[:500]
    read = collectives.from_rank_zero(read)
    if isinstance(read, str):
        if dist.get_rank() == 0:
            logs.warning("data drift not measured", reason=read)
        return {"drift_measure": DRIFT_MEASURE, "drift": None, "drift_error": read, "drift_threshold": max_drift}

    figures, not_measured = measure(read, table, description, combine)
    ranked = sorted(figures.items(), key=lambda kv: (-kv[1], kv[0]))
    metrics: dict[str, Any] = {
        "drift_measure": DRIFT_MEASURE,
        "drift": {name: round(figure, 6) for name, figure in ranked[:REPORTED_FEATURES]},
        "max_drift_feature": ranked[0][0] if ranked else None,
        "drift_features": len(figures),
        "drift_threshold": max_drift,
    }
    if not_measured:
        metrics["drift_not_measured"] = dict(sorted(not_measured.items())[:REPORTED_FEATURES])
    target_drift, why = measure_target(read, table, description.target, description, combine)
    metrics["target_drift"] = round(target_drift, 6) if target_drift is not None else None
    if why:
        metrics["target_drift_not_measured"] = why
    if dist.get_rank() == 0:
        logs.log("data drift measured against the champion", **metrics)
    over = [(name, figure) for name, figure in ranked if max_drift is not None and figure > max_drift]
    if over:
        shown = ", ".join(f"{name!r} {figure:.3f}" for name, figure in over[:SHOWN_IN_ERROR])
        more = f" and {len(over) - SHOWN_IN_ERROR} more" if len(over) > SHOWN_IN_ERROR else ""
        raise DataDrift(
            f"the data drifted from the champion's past --max-drift {max_drift:g} ({DRIFT_MEASURE.upper()}, "
            f"population stability index): {shown}{more}; the run stopped before training",
            details={"drift": metrics["drift"], "max_drift_feature": metrics["max_drift_feature"]},
        )
    return metrics


def refused_by_earlier_attempt(model_dir: str, kinds: tuple[type[RunRefused], ...] = ()) -> RunRefused | None:
    """On every rank: the refusal this run's previous worker group left in failure.json — a DataDrift, or one of
    `kinds` — when torchrun restarted the group after it: the data have not changed, so they are not read again
    and the GPUs go back at once."""
    known: tuple[type[RunRefused], ...] = (DataDrift, *kinds)
    by_name = {kind.__name__: kind for kind in known}
    found: dict | None = None
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if dist.get_rank() == 0 and restart > 0:
        try:
            note = read_failure_note(model_dir) or {}
            same_run = note.get("run") == os.environ.get("TORCHELASTIC_RUN_ID")
            error = note.get("error")
            kind = by_name.get(error.partition(": ")[0]) if isinstance(error, str) else None
            if same_run and kind is not None and note.get("reason") == kind.reason:
                found = note
                logs.log("the data were refused by this run's previous attempt: not read again", restart=restart)
        except Exception as e:  # no note to trust: measure again
            logs.warning("could not read the previous attempt's failure note", error=_describe(e))
    found = collectives.from_rank_zero(found)
    if found is None:
        return None
    name, _, message = found["error"].partition(": ")
    details = {k: v for k, v in found.items() if k not in ("error", "reason", "run")}
    return by_name[name](message, details=details)


def _describe(error: Exception) -> str:
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
