"""The project's Vertex custom-training GPU limits per region, read from the Cloud Quotas API (v1).

One listing of the QuotaInfos of aiplatform.googleapis.com (every page: the list call has no filter) serves
every metric and region for `ttl` seconds, so a function instance asks a few times an hour at most. A limit
that cannot be known (the API refuses, is unreachable within the deadline, or does not list the metric) is
None with one warning line saying why: the controller then admits without quota gating.

https://cloudquotas.googleapis.com, or `quotas_endpoint` (the local stack's stand-in on the JobService's REST
port). Calls go through the adapters' retry policy (functions/retry.py), inside the handler's deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from functions import logs
from functions.errors import Transient
from functions.failures import RESOURCE_EXHAUSTED, TRANSIENT_CALL_CODES
from functions.rest import google_error, rest_session
from functions.retry import Retryable, RetryPolicy
from schemas.catalog import QUOTA_SERVICE

API = "https://cloudquotas.googleapis.com"
POLICY = RetryPolicy(attempts=3, first_pause=0.5, max_pause=4.0, call_timeout=15.0)
PAGE_SIZE = 100
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


class QuotasUnknown(Exception):
    """The limits cannot be read now; the message says why (for the one warning line)."""


class GpuQuotas:
    def __init__(
        self,
        project: str,
        endpoint: str = "",
        ttl: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        policy: RetryPolicy = POLICY,
        page_size: int = PAGE_SIZE,
    ):
        self.parent = f"projects/{project}/locations/global/services/{QUOTA_SERVICE}"
        self._endpoint = endpoint
        self._ttl, self._clock, self._policy, self._page_size = ttl, clock, policy, page_size
        self._session: Any = None
        self._base = ""
        self._lock = threading.Lock()
        # The last listing (QuotaInfos, or why there is none) and when it was made.
        self._listing: list[dict[str, Any]] | QuotasUnknown | None = None
        self._listed_at = 0.0

    def limit(self, metric: str, region: str) -> int | None:
        """The limit on `metric` (a full name: aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus)
        in `region`: the region's own value, else the default for all regions; None when unknown or unlimited."""
        listing = self._quota_infos()
        if isinstance(listing, QuotasUnknown):
            logs.warning(f"GPU quota unknown, admitting without quota gating: {listing}", metric=metric, region=region)
            return None
        value, unknown = limit_in(listing, metric, region)
        if unknown:
            logs.warning(f"GPU quota unknown: {unknown}", metric=metric, region=region)
        return value

    def _quota_infos(self) -> list[dict[str, Any]] | QuotasUnknown:
        """The cached listing, listed again once it is `ttl` old. A failure is remembered as long as a listing
        would be: a refusing API is asked (and logged) once per `ttl`, not on every admission."""
        with self._lock:
            if self._listing is None or self._clock() - self._listed_at >= self._ttl:
                try:
                    self._listing = self._list_all()
                except QuotasUnknown as exc:
                    self._listing = exc
                self._listed_at = self._clock()
            return self._listing

    def _list_all(self) -> list[dict[str, Any]]:
        infos: list[dict[str, Any]] = []
        token = ""
        while True:
            params = {"pageSize": self._page_size, **({"pageToken": token} if token else {})}
            page = self._get(f"{self.parent}/quotaInfos", params)
            infos.extend(page.get("quotaInfos") or [])
            token = page.get("nextPageToken") or ""
            if not token:
                return infos

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:  # built on first use: in the cloud this reads the credentials
            try:
                self._session, self._base = rest_session(self._endpoint or None, API, _SCOPES)
            except Exception as exc:  # google.auth's DefaultCredentialsError and kin
                raise QuotasUnknown(f"no credentials for Cloud Quotas: {exc}") from None
        url = f"{self._base}/v1/{path}"

        def attempt(timeout: float) -> dict[str, Any]:
            try:
                response = self._session.get(url, params=params, timeout=timeout)
            except OSError as exc:
                raise Retryable(f"cannot reach Cloud Quotas: {exc}") from None
            try:
                body = response.json()
            except ValueError:
                body = None
            if response.status_code < 300 and isinstance(body, dict):
                return body
            code, message = google_error(response.status_code, body)
            # RESOURCE_EXHAUSTED here is the API's own read-rate limit: worth another attempt.
            if code in TRANSIENT_CALL_CODES or code == RESOURCE_EXHAUSTED:
                raise Retryable(f"quotaInfos.list {response.status_code} (code {code}): {message}")
            raise QuotasUnknown(f"Cloud Quotas refused quotaInfos.list with {response.status_code}: {message}")

        try:
            return self._policy.call("quotaInfos.list", attempt)
        except Transient as exc:  # retries or the deadline ran out
            raise QuotasUnknown(str(exc)) from None


def limit_in(infos: list[dict[str, Any]], metric: str, region: str) -> tuple[int | None, str]:
    """(the limit on `metric` in `region`, or None; why it is unknown, or "" when it is known or unlimited)."""
    info = next((q for q in infos if q.get("metric") == metric), None)
    if info is None:
        return None, f"Cloud Quotas lists no {metric} for {QUOTA_SERVICE}"
    value = region_value(info, region)
    if value is None:
        return None, f"{info.get('quotaId', metric)} has no value for {region} and no default"
    if value < 0:  # Service Usage's "unlimited"; Cloud Quotas does not say (local/FIDELITY.md)
        return None, ""
    return value, ""


def region_value(info: dict[str, Any], region: str) -> int | None:
    """The value a QuotaInfo's dimensionsInfos give `region`: the entry for that region, else the entry without
    dimensions (the default for every other value), else None. `details: {}` is 0: proto3 JSON leaves zeros out."""
    default: int | None = None
    for entry in info.get("dimensionsInfos") or []:
        dimensions = entry.get("dimensions") or {}
        value = int((entry.get("details") or {}).get("value", 0))
        if dimensions.get("region") == region:
            return value
        if not dimensions:
            default = value
    return default
