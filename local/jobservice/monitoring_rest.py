"""A stand-in for Cloud Monitoring's `projects.timeSeries.list` (GET /v3/projects/{project}/timeSeries), on the local
JobService's REST port, answering the local endpoints' online-prediction metrics (prediction_metrics.py) in the
ListTimeSeriesResponse shape of google/monitoring/v3/metric_service.proto. Query parameters as the REST reference
names them: filter, interval.startTime, interval.endTime (RFC 3339), aggregation.alignmentPeriod ("600s"),
aggregation.perSeriesAligner, aggregation.crossSeriesReducer, aggregation.groupByFields. The project in the path may
be the id or the number; the series carry the number (resource_container), as the endpoints' names do.
"""

from __future__ import annotations

import datetime as dt
import re

import grpc

from local.jobservice.model_rules import ProjectNumbers, project_numbers
from local.jobservice.prediction_metrics import PredictionLog, Query, QueryError, list_time_series, parse_filter
from local.jobservice.rest import RestAbort, RestRequest, RestResponse, Route

_DURATION = re.compile(r"(?P<seconds>[0-9]+(?:\.[0-9]+)?)s")


def monitoring_routes(metrics: PredictionLog, numbers: ProjectNumbers | None = None) -> list[Route]:
    number = numbers or project_numbers()

    def list_series(request: RestRequest, match: re.Match[str]) -> RestResponse:
        try:
            query = _query(request.query)
            project = number(match["project"])
            samples = [sample for sample in metrics.samples() if sample.labels["resource_container"] == project]
            series = list_time_series(samples, query)
        except QueryError as error:
            field, text = error.problems[0]
            raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, f"Field {field} had an invalid value: {text}") from None
        return RestResponse(200, {"timeSeries": series} if series else {})

    return [("GET", re.compile(r"/v3/projects/(?P<project>[^/]+)/timeSeries"), list_series)]


def _query(params: dict[str, str]) -> Query:
    metric_type, equal = parse_filter(params.get("filter", ""))
    if not params.get("interval.endTime"):
        raise QueryError([("interval.endTime", "is required (RFC 3339, as 2026-11-27T21:00:00Z)")])
    end = _moment("interval.endTime", params["interval.endTime"])
    start = _moment("interval.startTime", params["interval.startTime"]) if params.get("interval.startTime") else end
    period = None
    if params.get("aggregation.alignmentPeriod"):
        found = _DURATION.fullmatch(params["aggregation.alignmentPeriod"])
        if found is None or float(found["seconds"]) <= 0:
            raise QueryError([("aggregation.alignmentPeriod", 'must be a duration in seconds, as "600s"')])
        period = dt.timedelta(seconds=float(found["seconds"]))
    groups = tuple(field for field in params.get("aggregation.groupByFields", "").split(",") if field)
    return Query(
        metric_type,
        equal,
        start,
        end,
        params.get("aggregation.perSeriesAligner") or "ALIGN_NONE",
        period,
        params.get("aggregation.crossSeriesReducer") or "REDUCE_NONE",
        groups,
    )


def _moment(field: str, text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise QueryError([(field, f"must be an RFC 3339 time, as 2026-11-27T21:00:00Z, got {text!r}")]) from None
    if moment.tzinfo is None:
        raise QueryError([(field, f"must carry its offset (Z for UTC), got {text!r}")])
    return moment
