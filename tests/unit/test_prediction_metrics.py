"""The Cloud Monitoring stand-in's reading of the local endpoints' prediction metrics (prediction_metrics.py),
without processes: counts summed per alignment period and grouped by deployed model, 5xx counted as errors,
latency percentiles as doubles, and refusals naming the field."""

from __future__ import annotations

import datetime as dt

import pytest

from local.jobservice.prediction_metrics import (
    ERROR_COUNT,
    LATENCIES,
    RESPONSE_COUNT,
    PredictionLog,
    Query,
    QueryError,
    list_time_series,
    parse_filter,
)

ENDPOINT = "projects/123456789012/locations/us-central1/endpoints/555"
T0 = dt.datetime(2026, 11, 27, 21, 0, tzinfo=dt.UTC)


def log_of(requests: list[tuple[int, str, int, float]]) -> PredictionLog:
    """(seconds after T0, deployed model, status, latency ms) → a log holding them."""
    clock = {"now": T0}
    log = PredictionLog(now=lambda: clock["now"])
    for seconds, deployed, code, latency in requests:
        clock["now"] = T0 + dt.timedelta(seconds=seconds)
        log.record(ENDPOINT, deployed, code, latency)
    return log


def query(metric: str, **kwargs: object) -> Query:
    base: dict = {"start": T0, "end": T0 + dt.timedelta(seconds=600), "period": dt.timedelta(seconds=600)}
    return Query(metric, {"resource.labels.endpoint_id": "555"}, **{**base, **kwargs})


def listed(metric: str, **kwargs: object) -> list:
    return list_time_series([], query(metric, **kwargs))


REQUESTS = [(1, "1", 200, 10.0), (2, "1", 200, 20.0), (3, "2", 500, 300.0), (4, "2", 200, 40.0), (5, "1", 400, 5.0)]


def test_response_counts_sum_per_deployed_model_and_code_and_reduce_to_one_series_per_model():
    log = log_of(REQUESTS)
    series = list_time_series(log.samples(), query(RESPONSE_COUNT, aligner="ALIGN_SUM"))
    counted = {(s["metric"]["labels"]["deployed_model_id"], s["metric"]["labels"]["response_code"]):
               s["points"][0]["value"]["int64Value"] for s in series}  # fmt: skip
    assert counted == {("1", "200"): "2", ("1", "400"): "1", ("2", "200"): "1", ("2", "500"): "1"}
    assert series[0]["resource"] == {
        "type": "aiplatform.googleapis.com/Endpoint",
        "labels": {"resource_container": "123456789012", "location": "us-central1", "endpoint_id": "555"},
    }
    assert (series[0]["metricKind"], series[0]["valueType"]) == ("DELTA", "INT64")
    reduced = list_time_series(
        log.samples(),
        query(
            RESPONSE_COUNT, aligner="ALIGN_DELTA", reducer="REDUCE_SUM", group_by=("metric.label.deployed_model_id",)
        ),
    )
    assert {s["metric"]["labels"]["deployed_model_id"]: s["points"][0]["value"]["int64Value"] for s in reduced} == {
        "1": "3",
        "2": "2",
    }


def test_errors_are_the_5xx_answers_and_a_model_without_any_has_no_series():
    series = list_time_series(log_of(REQUESTS).samples(), query(ERROR_COUNT, aligner="ALIGN_SUM"))
    assert [(s["metric"]["labels"], s["points"][0]["value"]) for s in series] == [
        ({"deployed_model_id": "2"}, {"int64Value": "1"})
    ]


def test_latency_percentiles_are_doubles_per_deployed_model_and_delta_is_a_distribution():
    log = log_of(REQUESTS)
    p99 = list_time_series(log.samples(), query(LATENCIES, aligner="ALIGN_PERCENTILE_99"))
    by_model = {s["metric"]["labels"]["deployed_model_id"]: s for s in p99}
    assert by_model["2"]["metric"]["labels"]["latency_type"] == "total"
    assert (by_model["2"]["metricKind"], by_model["2"]["valueType"]) == ("GAUGE", "DOUBLE")
    assert by_model["2"]["points"][0]["value"]["doubleValue"] == pytest.approx(40 + 0.99 * 260)
    p50 = list_time_series(log.samples(), query(LATENCIES, aligner="ALIGN_PERCENTILE_50"))
    assert {s["metric"]["labels"]["deployed_model_id"]: s["points"][0]["value"]["doubleValue"] for s in p50} == {
        "1": 10.0,
        "2": 170.0,
    }
    delta = list_time_series(log.samples(), query(LATENCIES, aligner="ALIGN_DELTA"))
    distribution = delta[0]["points"][0]["value"]["distributionValue"]
    assert distribution["count"] == "3" and distribution["mean"] == pytest.approx(35 / 3)
    assert sum(int(count) for count in distribution["bucketCounts"]) == 3


def test_points_end_at_the_intervals_end_step_back_by_the_period_and_skip_empty_periods():
    log = log_of([(10, "1", 200, 1.0), (70, "1", 200, 1.0), (75, "1", 200, 1.0)])
    series = list_time_series(
        log.samples(),
        query(RESPONSE_COUNT, aligner="ALIGN_SUM", period=dt.timedelta(seconds=60), end=T0 + dt.timedelta(seconds=180)),
    )
    points = [(p["interval"]["endTime"], p["value"]["int64Value"]) for p in series[0]["points"]]
    assert points == [("2026-11-27T21:02:00.000000Z", "2"), ("2026-11-27T21:01:00.000000Z", "1")]


def test_a_filter_on_a_deployed_model_keeps_its_series_alone():
    metric, equal = parse_filter(
        f'metric.type = "{RESPONSE_COUNT}" AND resource.labels.endpoint_id = "555" '
        'AND metric.labels.deployed_model_id = "2"'
    )
    window = (T0, T0 + dt.timedelta(seconds=600))
    series = list_time_series(
        log_of(REQUESTS).samples(), Query(metric, equal, *window, "ALIGN_SUM", dt.timedelta(seconds=600))
    )
    assert {s["metric"]["labels"]["deployed_model_id"] for s in series} == {"2"}


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: parse_filter('metric.type = "custom.googleapis.com/x"'), "filter"),
        (lambda: parse_filter(f'metric.type = "{RESPONSE_COUNT}" OR project = "p"'), "filter"),
        (lambda: listed(RESPONSE_COUNT, aligner="ALIGN_PERCENTILE_99"), "aggregation.perSeriesAligner"),
        (lambda: listed(LATENCIES, aligner="ALIGN_MAX"), "aggregation.perSeriesAligner"),
        (lambda: listed(RESPONSE_COUNT, aligner="ALIGN_SUM", period=None), "aggregation.alignmentPeriod"),
        (lambda: listed(RESPONSE_COUNT, aligner="ALIGN_SUM", reducer="REDUCE_MEAN"), "aggregation.crossSeriesReducer"),
    ],
)  # fmt: skip
def test_an_unknown_filter_aligner_or_reducer_is_refused_naming_the_field(make, field):
    with pytest.raises(QueryError) as refused:
        make()
    assert refused.value.problems[0][0] == field
