"""A deployed model's own answers over a window, read from Cloud Monitoring (projects.timeSeries.list, v3): what a
canary's bake is judged on (functions/models/rollout.py). The figures come from Vertex's endpoint metrics, which the
deployed model cannot write, never from anything the model or its job reports.

The metrics (https://cloud.google.com/monitoring/api/metrics_gcp_a_b, gcp-aiplatform), all on the monitored resource
`aiplatform.googleapis.com/Endpoint` (resource label endpoint_id), each with the metric label deployed_model_id:
  prediction/online/response_count        DELTA INT64, one series per response_code
  prediction/online/error_count           DELTA INT64
  prediction/online/prediction_latencies  DELTA DISTRIBUTION in ms, latency_type "total" always present
Counts are summed over the window (ALIGN_SUM, then REDUCE_SUM across series); the latency's 99th percentile is
ALIGN_PERCENTILE_99 over the window, the largest when several series answer (metric_service.proto, common.proto
Aggregation). Google's metrics appear up to a few minutes after the requests (the page's "After sampling, data is not
visible for up to …"): a bake shorter than that judges on part of its traffic, which README says.

https://monitoring.googleapis.com, or `monitoring_endpoint` (the local stack's stand-in on the JobService's REST port).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from functions.cloud.rest import request_json, rest_session
from functions.cloud.retry import RetryPolicy
from functions.cloud.vertex import answer_of
from schemas.events import ServingFigures

API = "https://monitoring.googleapis.com"
POLICY = RetryPolicy(attempts=3, first_pause=0.5, max_pause=4.0, call_timeout=15.0)
_SCOPES = ["https://www.googleapis.com/auth/monitoring.read"]
METRIC_PREFIX = "aiplatform.googleapis.com/prediction/online/"
# Monitoring's alignment periods are whole seconds, at least 60 for these sampled metrics.
MIN_ALIGNMENT_SECONDS = 60


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _point_value(point: dict[str, Any]) -> float:
    value = point.get("value") or {}
    if "int64Value" in value:
        return float(int(value["int64Value"]))  # int64 travels as a JSON string
    return float(value.get("doubleValue", 0.0))


class ServingMetrics:
    def __init__(self, project: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        self._project = project
        self._endpoint = endpoint
        self._policy = policy
        self._session: Any = None
        self._base = ""

    def figures(self, endpoint_id: str, deployed_model_id: str, since: datetime, until: datetime) -> ServingFigures:
        """The deployed model's requests, errors and p99 latency between `since` and `until`."""
        requests = self._sum("response_count", endpoint_id, deployed_model_id, since, until)
        errors = self._sum("error_count", endpoint_id, deployed_model_id, since, until)
        latency = self._series(
            "prediction_latencies", endpoint_id, deployed_model_id, since, until, "ALIGN_PERCENTILE_99",
            extra='AND metric.labels.latency_type = "total"',
        )  # fmt: skip
        p99 = max((_point_value(p) for s in latency for p in s.get("points") or ()), default=None)
        count = int(requests)
        return ServingFigures(
            requests=count,
            errors=int(errors),
            error_rate=(errors / requests) if requests else None,
            p99_ms=None if p99 is None or not count else round(p99, 3),
            since=since,
            until=until,
        )

    def _sum(self, metric: str, endpoint_id: str, deployed_model_id: str, since: datetime, until: datetime) -> float:
        series = self._series(metric, endpoint_id, deployed_model_id, since, until, "ALIGN_SUM", reduce="REDUCE_SUM")
        return sum(_point_value(p) for s in series for p in s.get("points") or ())

    def _series(
        self,
        metric: str,
        endpoint_id: str,
        deployed_model_id: str,
        since: datetime,
        until: datetime,
        aligner: str,
        reduce: str = "",
        extra: str = "",
    ) -> list[dict[str, Any]]:
        filter_ = (
            f'metric.type = "{METRIC_PREFIX}{metric}" AND resource.type = "aiplatform.googleapis.com/Endpoint" '
            f'AND resource.labels.endpoint_id = "{endpoint_id}" '
            f'AND metric.labels.deployed_model_id = "{deployed_model_id}" {extra}'
        ).strip()
        seconds = max(MIN_ALIGNMENT_SECONDS, int((until - since).total_seconds()) + 1)
        params: dict[str, Any] = {
            "filter": filter_,
            "interval.startTime": _rfc3339(since),
            "interval.endTime": _rfc3339(until),
            "aggregation.alignmentPeriod": f"{seconds}s",
            "aggregation.perSeriesAligner": aligner,
        }
        if reduce:
            params["aggregation.crossSeriesReducer"] = reduce
            params["aggregation.groupByFields"] = "metric.label.deployed_model_id"
        found: list[dict[str, Any]] = []
        token = ""
        while True:
            page = self._get(f"projects/{self._project}/timeSeries", params | ({"pageToken": token} if token else {}))
            found += page.get("timeSeries") or []
            token = page.get("nextPageToken") or ""
            if not token:
                return found

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:  # built on first use: in the cloud this reads the credentials
            self._session, self._base = rest_session(self._endpoint or None, API, _SCOPES)
        url = f"{self._base}/v3/{path}"

        def attempt(timeout: float) -> dict[str, Any]:
            status, body = request_json(self._session, "GET", url, timeout, "Cloud Monitoring", params=params)
            return answer_of("timeSeries.list", status, body)

        result: dict[str, Any] = self._policy.call("timeSeries.list", attempt)
        return result
