"""The project's Vertex custom-training GPU limits per region, read from the Cloud Quotas API (v1).

Each limit is read by its quota id (quotaInfos.get; the id from schemas/catalog.py): one small call per GPU
metric a request needs. Listing would read every quota of aiplatform.googleapis.com — hundreds of them over
many pages, most of them generative-AI quotas per model — because quotaInfos.list takes no filter. A QuotaInfo
read serves every region for `ttl` seconds, so a function instance asks a few times an hour at most. A limit
that cannot be known (no quota id for the metric, the API refuses, is unreachable within the deadline, knows no
such id, or gives the region no value) is None, and one warning line per ttl says why: the controller then
admits without quota gating.

https://cloudquotas.googleapis.com, or `quotas_endpoint` (the local stack's stand-in on the JobService's REST
port). Calls go through the adapters' retry policy (functions/cloud/retry.py), inside the handler's deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions import logs
from functions.cloud.errors import Transient
from functions.cloud.failures import NOT_FOUND, RESOURCE_EXHAUSTED, TRANSIENT_CALL_CODES
from functions.cloud.rest import google_error, request_json, rest_session
from functions.cloud.retry import Retryable, RetryPolicy
from schemas.catalog import QUOTA_SERVICE, quota_id

API = "https://cloudquotas.googleapis.com"
POLICY = RetryPolicy(attempts=3, first_pause=0.5, max_pause=4.0, call_timeout=15.0)
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


class QuotasUnknown(Exception):
    """A limit cannot be read now; the message says why (for the one warning line). `listed` is False when Cloud
    Quotas knows no such quota (the local stand-in's word for a GPU its capacity model leaves unlimited)."""

    def __init__(self, message: str, listed: bool = True):
        super().__init__(message)
        self.listed = listed


@dataclass
class _Read:
    """One metric's QuotaInfo (or why there is none), when it was read, and what was logged of it since."""

    info: dict[str, Any] | QuotasUnknown
    at: float
    warned: set[str] = field(default_factory=set)


class GpuQuotas:
    def __init__(
        self,
        project: str,
        endpoint: str = "",
        ttl: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        policy: RetryPolicy = POLICY,
    ):
        self.parent = f"projects/{project}/locations/global/services/{QUOTA_SERVICE}"
        self._endpoint = endpoint
        self._ttl, self._clock, self._policy = ttl, clock, policy
        self._session: Any = None
        self._base = ""
        self._lock = threading.Lock()
        self._reads: dict[str, _Read] = {}  # full metric name → its last read

    def limit(self, metric: str, region: str) -> int | None:
        """The limit on `metric` (a full name: aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus)
        in `region`: the region's own value, else the default for all regions; None when unknown or unlimited."""
        with self._lock:
            read = self._read(metric)
            if isinstance(read.info, QuotasUnknown):
                self._warn_once(read, "", f"GPU quota unknown, admitting without quota gating: {read.info}", metric)
                return None
            if read.info.get("metric", metric) != metric:  # the id is what was asked for: its value stands
                named = f"Cloud Quotas names the metric of {read.info.get('quotaId')} {read.info.get('metric')}"
                self._warn_once(read, "metric", f"{named}, not {metric}: schemas/catalog.py is out of date", metric)
            value, unknown = limit_of(read.info, region)
            if unknown:
                self._warn_once(read, region, f"GPU quota unknown: {unknown}", metric, region)
            return value

    def limit_in_words(self, metric: str, region: str) -> tuple[int | None, str]:
        """For people (`trainctl plan --quota`), without a log line: the limit, or None and why there is none in
        words (unlimited, none listed, or why it cannot be read). Either way None is not gated."""
        with self._lock:
            read = self._read(metric)
        if isinstance(read.info, QuotasUnknown):
            if not read.info.listed:
                return None, f"no limit listed ({quota_id(metric)} is not in Cloud Quotas)"
            return None, f"cannot be read ({read.info})"
        value, unknown = limit_of(read.info, region)
        if value is None:
            return None, f"unknown ({unknown})" if unknown else "unlimited"
        return value, ""

    def _read(self, metric: str) -> _Read:
        """The metric's cached read, read again once it is `ttl` old. A failure is remembered as long as a
        QuotaInfo would be: a refusing API is asked (and logged) once per `ttl`, not on every admission."""
        read = self._reads.get(metric)
        if read is None or self._clock() - read.at >= self._ttl:
            try:
                info: dict[str, Any] | QuotasUnknown = self._get_quota_info(metric)
            except QuotasUnknown as exc:
                info = exc
            read = self._reads[metric] = _Read(info, self._clock())
        return read

    @staticmethod
    def _warn_once(read: _Read, what: str, message: str, metric: str, region: str = "") -> None:
        if what not in read.warned:
            read.warned.add(what)
            logs.warning(message, metric=metric, **({"region": region} if region else {}))

    def _get_quota_info(self, metric: str) -> dict[str, Any]:
        quota = quota_id(metric)
        if quota is None:
            raise QuotasUnknown(f"trainctl knows no Cloud Quotas id for {metric} (schemas/catalog.py)")
        if self._session is None:  # built on first use: in the cloud this reads the credentials
            try:
                self._session, self._base = rest_session(self._endpoint or None, API, _SCOPES)
            except Exception as exc:  # google.auth's DefaultCredentialsError and kin
                raise QuotasUnknown(f"no credentials for Cloud Quotas: {exc}") from None
        url = f"{self._base}/v1/{self.parent}/quotaInfos/{quota}"

        def attempt(timeout: float) -> dict[str, Any]:
            status, body = request_json(self._session, "GET", url, timeout, "Cloud Quotas")
            if status < 300 and isinstance(body, dict):
                return body
            code, message = google_error(status, body)
            # RESOURCE_EXHAUSTED here is the API's own read-rate limit: worth another attempt.
            if code in TRANSIENT_CALL_CODES or code == RESOURCE_EXHAUSTED:
                raise Retryable(f"quotaInfos.get {quota} {status} (code {code}): {message}")
            if code == NOT_FOUND:
                raise QuotasUnknown(
                    f"Cloud Quotas has no quota {quota} for {QUOTA_SERVICE} ({metric}): {message}", listed=False
                )
            raise QuotasUnknown(f"Cloud Quotas refused quotaInfos.get {quota} with {status}: {message}")

        try:
            return self._policy.call("quotaInfos.get", attempt)
        except Transient as exc:  # retries or the deadline ran out
            raise QuotasUnknown(str(exc)) from None


def limit_of(info: dict[str, Any], region: str) -> tuple[int | None, str]:
    """(the limit a QuotaInfo gives `region`, or None; why it is unknown, or "" when it is known or unlimited)."""
    value = region_value(info, region)
    if value is None:
        return None, f"{info.get('quotaId')} has no value for {region} and no default"
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
