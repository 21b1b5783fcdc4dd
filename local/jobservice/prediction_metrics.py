"""The online-prediction metrics of the local endpoints: every request's response code and total latency, per
deployed model, and how Cloud Monitoring's `projects.timeSeries.list` reads them (monitoring_rest.py serves it).

The metrics as Google's list of Vertex AI metrics names them (https://cloud.google.com/monitoring/api/metrics_gcp_a_b,
"aiplatform"), on the monitored resource `aiplatform.googleapis.com/Endpoint` (labels resource_container, location,
endpoint_id):
- prediction/online/response_count: DELTA INT64, labels deployed_model_id, response_code;
- prediction/online/error_count: DELTA INT64, label deployed_model_id (here: the answers with a 5xx status);
- prediction/online/prediction_latencies: DELTA DISTRIBUTION in ms, labels deployed_model_id, latency_type (here
  always "total": the router's whole time, the model server's included).

A query (google/monitoring/v3/metric_service.proto ListTimeSeriesRequest, common.proto Aggregation) takes one
metric type, equalities on resource and metric labels joined by AND, an interval, and optionally an aligner
(ALIGN_DELTA, ALIGN_SUM, ALIGN_RATE for counts; ALIGN_DELTA, ALIGN_SUM, ALIGN_MEAN, ALIGN_PERCENTILE_99/95/50/05 for
the distribution) with its alignment period, and REDUCE_SUM over groupByFields. Aligned points end at
interval.endTime and step back by the period; a period without requests has no point. Newest point first.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from local.jobservice.validation import Problem

METRIC_PREFIX = "aiplatform.googleapis.com/prediction/online/"
RESPONSE_COUNT = METRIC_PREFIX + "response_count"
ERROR_COUNT = METRIC_PREFIX + "error_count"
LATENCIES = METRIC_PREFIX + "prediction_latencies"
RESOURCE_TYPE = "aiplatform.googleapis.com/Endpoint"
METRIC_LABELS = {
    RESPONSE_COUNT: ("deployed_model_id", "response_code"),
    ERROR_COUNT: ("deployed_model_id",),
    LATENCIES: ("deployed_model_id", "latency_type"),
}
RESOURCE_LABELS = ("resource_container", "location", "endpoint_id")
COUNT_ALIGNERS = ("ALIGN_NONE", "ALIGN_DELTA", "ALIGN_SUM", "ALIGN_RATE")
PERCENTILES = {"ALIGN_PERCENTILE_99": 99.0, "ALIGN_PERCENTILE_95": 95.0, "ALIGN_PERCENTILE_50": 50.0,
               "ALIGN_PERCENTILE_05": 5.0}  # fmt: skip
DISTRIBUTION_ALIGNERS = ("ALIGN_NONE", "ALIGN_DELTA", "ALIGN_SUM", "ALIGN_MEAN", *PERCENTILES)
REDUCERS = ("REDUCE_NONE", "REDUCE_SUM")
# Bucket bounds of the latency distributions: 1 ms, 2 ms, … 2^32 ms (Google does not publish Vertex's).
BUCKETS = {"exponentialBuckets": {"numFiniteBuckets": 33, "growthFactor": 2.0, "scale": 1.0}}
_CLAUSE = re.compile(r'\s*(?P<field>[a-z_.]+)\s*=\s*"(?P<value>[^"]*)"\s*')
_FILTER_FIELDS = {
    "metric.type",
    "resource.type",
    *(f"resource.labels.{label}" for label in RESOURCE_LABELS),
    *(f"metric.labels.{label}" for labels in METRIC_LABELS.values() for label in labels),
}


class QueryError(ValueError):
    def __init__(self, problems: Sequence[Problem]):
        super().__init__("; ".join(f"{field}: {text}" for field, text in problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Sample:
    at: dt.datetime
    labels: dict[str, str]  # the resource's and the metric's, together
    code: int
    latency_ms: float


@dataclass(frozen=True)
class Query:
    metric_type: str
    equal: dict[str, str]  # "resource.labels.x" / "metric.labels.y" / "resource.type" → value
    start: dt.datetime
    end: dt.datetime
    aligner: str = "ALIGN_NONE"
    period: dt.timedelta | None = None
    reducer: str = "REDUCE_NONE"
    group_by: tuple[str, ...] = ()


class PredictionLog:
    def __init__(self, now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)):
        self._now, self._lock, self._samples = now, threading.Lock(), list[Sample]()

    def record(self, endpoint: str, deployed_model_id: str, code: int, latency_ms: float) -> None:
        _, project, _, location, _, endpoint_id = endpoint.split("/")
        labels = {"resource_container": project, "location": location, "endpoint_id": endpoint_id,
                  "deployed_model_id": deployed_model_id}  # fmt: skip
        with self._lock:
            self._samples.append(Sample(self._now(), labels, code, latency_ms))

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)


def parse_filter(text: str) -> tuple[str, dict[str, str]]:
    """(metric type, equalities) of `metric.type = "…" AND resource.labels.endpoint_id = "…" AND …`."""
    metric_type, equal = "", {}
    for clause in re.split(r"\bAND\b", text) if text.strip() else []:
        found = _CLAUSE.fullmatch(clause)
        if found is None or found["field"] not in _FILTER_FIELDS:
            fields = ", ".join(sorted(_FILTER_FIELDS))
            text = f'cannot read {clause.strip()!r}: the local Monitoring takes FIELD = "VALUE" joined by AND'
            raise QueryError([("filter", f"{text}, FIELD one of {fields}")])
        if found["field"] == "metric.type":
            metric_type = found["value"]
        else:
            equal[found["field"]] = found["value"]
    if metric_type not in METRIC_LABELS:
        raise QueryError([("filter", f"must name one metric.type of {', '.join(METRIC_LABELS)}, got {metric_type!r}")])
    return metric_type, equal


def list_time_series(samples: Sequence[Sample], query: Query) -> list[dict[str, Any]]:
    """ListTimeSeriesResponse.timeSeries for the query, in the JSON mapping of monitoring v3."""
    _check(query)
    distribution = query.metric_type == LATENCIES
    label_names = METRIC_LABELS[query.metric_type]
    series: dict[tuple, list[tuple[dt.datetime, float]]] = defaultdict(list)
    for sample in samples:
        if query.metric_type == ERROR_COUNT and sample.code < 500:
            continue
        labels = {**sample.labels, "response_code": str(sample.code), "latency_type": "total"}
        if not (query.start <= sample.at <= query.end) or not _matches(labels, query.equal):
            continue
        key = tuple((name, labels[name]) for name in (*RESOURCE_LABELS, *label_names))
        series[key].append((sample.at, sample.latency_ms if distribution else 1.0))
    if query.aligner == "ALIGN_NONE":
        return [_raw_series(query, dict(key), points, distribution) for key, points in sorted(series.items())]
    aligned = {key: _align(query, points, distribution) for key, points in sorted(series.items())}
    if query.reducer == "REDUCE_SUM":
        aligned = _reduce_sum(aligned, query.group_by)
    kind, value_type = _aligned_kind(query.aligner, distribution)
    return [
        _series(query.metric_type, dict(key), kind, value_type, points) for key, points in aligned.items() if points
    ]


def _check(query: Query) -> None:
    distribution = query.metric_type == LATENCIES
    aligners = DISTRIBUTION_ALIGNERS if distribution else COUNT_ALIGNERS
    problems: list[Problem] = []
    if query.aligner not in aligners:
        problems.append(("aggregation.perSeriesAligner", f"must be one of {', '.join(aligners)} for "
                         f"{query.metric_type}, got {query.aligner!r}"))  # fmt: skip
    if query.aligner != "ALIGN_NONE" and not query.period:
        problems.append(("aggregation.alignmentPeriod", 'is required with a perSeriesAligner, as "600s"'))
    if query.reducer not in REDUCERS:
        problems.append(
            ("aggregation.crossSeriesReducer", f"must be one of {', '.join(REDUCERS)}, got {query.reducer!r}")
        )
    elif query.reducer != "REDUCE_NONE" and (
        query.aligner == "ALIGN_NONE" or (distribution and query.aligner in ("ALIGN_DELTA", "ALIGN_SUM"))
    ):
        problems.append(("aggregation.crossSeriesReducer", "REDUCE_SUM needs an aligner with numeric points"))
    for field in query.group_by:
        if _group_label(field) is None:
            problems.append(
                ("aggregation.groupByFields", f"must be metric.label.NAME or resource.label.NAME, got {field!r}")
            )
    if query.start > query.end:
        problems.append(("interval.startTime", "must not be later than interval.endTime"))
    if problems:
        raise QueryError(problems)


def _matches(labels: dict[str, str], equal: dict[str, str]) -> bool:
    for field, value in equal.items():
        if field == "resource.type":
            if value != RESOURCE_TYPE:
                return False
        elif labels.get(field.split(".", 2)[2]) != value:
            return False
    return True


def _align(
    query: Query, points: list[tuple[dt.datetime, float]], distribution: bool
) -> list[tuple[dt.datetime, dt.datetime, Any]]:
    """(start, end, value) per alignment period with data, newest first."""
    assert query.period is not None
    out = []
    end = query.end
    while True:
        start = end - query.period
        values = [value for at, value in points if start < at <= end or at == start == query.start]
        if values:
            out.append((start, end, _aligned_value(query.aligner, values, query.period, distribution)))
        if start <= query.start:
            return out
        end = start


def _aligned_value(aligner: str, values: list[float], period: dt.timedelta, distribution: bool) -> Any:
    if aligner in PERCENTILES:
        return _percentile(sorted(values), PERCENTILES[aligner])
    if aligner == "ALIGN_MEAN":
        return sum(values) / len(values)
    if aligner == "ALIGN_RATE":
        return len(values) / period.total_seconds()
    return _distribution(values) if distribution else len(values)


def _percentile(ordered: list[float], percent: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * percent / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _distribution(values: list[float]) -> dict[str, Any]:
    mean = sum(values) / len(values)
    counts = [0] * 35  # underflow (< 1 ms), 33 finite buckets, overflow
    for value in values:
        counts[0 if value < 1 else min(34, 1 + int(math.log2(value)))] += 1
    return {
        "count": str(len(values)),
        "mean": mean,
        "sumOfSquaredDeviation": sum((value - mean) ** 2 for value in values),
        "bucketOptions": BUCKETS,
        "bucketCounts": [str(count) for count in counts],
    }


def _group_label(field: str) -> str | None:
    found = re.fullmatch(r"(?:metric|resource)\.labels?\.([a-z_]+)", field)
    return found[1] if found else None


def _reduce_sum(aligned: dict[tuple, list], group_by: tuple[str, ...]) -> dict[tuple, list]:
    kept = [_group_label(field) for field in group_by]
    grouped: dict[tuple, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    for key, points in aligned.items():
        group = tuple((name, value) for name, value in key if name in kept)
        for start, end, value in points:
            grouped[group][(start, end)] += value
    return {
        group: sorted(
            ((start, end, value) for (start, end), value in windows.items()), key=lambda p: p[1], reverse=True
        )
        for group, windows in sorted(grouped.items())
    }


def _aligned_kind(aligner: str, distribution: bool) -> tuple[str, str]:
    if aligner in ("ALIGN_DELTA", "ALIGN_SUM"):
        return "DELTA", "DISTRIBUTION" if distribution else "INT64"
    return "GAUGE", "DOUBLE"


def _raw_series(query: Query, labels: dict[str, str], points: list, distribution: bool) -> dict[str, Any]:
    raw = [(at - dt.timedelta(microseconds=1), at, _distribution([v]) if distribution else 1) for at, v in points]
    value_type = "DISTRIBUTION" if distribution else "INT64"
    return _series(query.metric_type, labels, "DELTA", value_type, sorted(raw, key=lambda p: p[1], reverse=True))


def _series(metric_type: str, labels: dict[str, str], kind: str, value_type: str, points: list) -> dict[str, Any]:
    metric_labels = {name: value for name, value in labels.items() if name not in RESOURCE_LABELS}
    resource_labels = {name: value for name, value in labels.items() if name in RESOURCE_LABELS}
    return {
        "metric": {"type": metric_type, "labels": metric_labels},
        "resource": {"type": RESOURCE_TYPE, "labels": resource_labels},
        "metricKind": kind,
        "valueType": value_type,
        "points": [
            {"interval": {"startTime": _time(start), "endTime": _time(end)}, "value": _value(value_type, value)}
            for start, end, value in points
        ],
    }


def _value(value_type: str, value: Any) -> dict[str, Any]:
    if value_type == "INT64":
        return {"int64Value": str(int(value))}
    if value_type == "DOUBLE":
        return {"doubleValue": float(value)}
    return {"distributionValue": value}


def _time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
