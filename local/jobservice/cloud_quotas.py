"""The Cloud Quotas API (v1) stand-in: aiplatform.googleapis.com's QuotaInfos on the JobService's REST port
(reference/apis.md §3; googleapis google/api/cloudquotas/v1/{cloudquotas,resources}.proto):

    GET /v1/projects/P/locations/global/services/S/quotaInfos?pageSize=N&pageToken=T  → {quotaInfos, nextPageToken}
    GET /v1/projects/P/locations/global/services/S/quotaInfos/QUOTA_ID               → QuotaInfo

The listing is as long as a real project's: the capacity model's training-GPU limits among some four hundred
other quotas (quota_listing.py), ordered by quota id, so a client that lists reads every page to find one
limit. A GPU QuotaInfo holds one dimensionsInfos entry per region that limits it and, for a default, one entry
without dimensions that lists the other regions in applicableLocations; proto3 JSON leaves a zero out, so a
limit of 0 is `details: {}`. Quota ids are derived from the metric as Google forms them
(CustomModelTrainingA10080GBGPUsPerProjectPerRegion for custom_model_training_nvidia_a100_80gb_gpus;
local/FIDELITY.md). A GPU the model does not limit is not listed, and its id answers 404 NOT_FOUND, as any
unknown id does. The location must be `global` (400 otherwise). Faults (JobServiceControl.refuse_quota_reads)
answer with Google's 403 for a disabled API, and slow_quota_reads adds a round trip's time to every call;
every call is counted and logged, for tests of the client's cache and of what it reads.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable

import grpc

from local.jobservice.capacity import CapacityModel
from local.jobservice.quota_listing import (
    VERTEX_REGIONS,
    default_entry,
    fields,
    other_quota_infos,
    region_entry,
)
from local.jobservice.rest import RestAbort, RestRequest, RestResponse, Route
from schemas.catalog import QUOTA_SERVICE

DEFAULT_PAGE_SIZE = 100
_METRIC = re.compile(r"custom_model_training_(?P<preemptible>preemptible_)?(?:nvidia_(?P<gpu>\w+)_gpus|cpus)")
_PARENT = r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/services/(?P<service>[^/]+)"
# Google's text when an API is off in the project (PERMISSION_DENIED, reason SERVICE_DISABLED).
DISABLED_MESSAGE = (
    "Cloud Quotas API has not been used in project {project} before or it is disabled. Enable it by visiting "
    "https://console.developers.google.com/apis/api/cloudquotas.googleapis.com/overview?project={project} "
    "then retry."
)


def quota_id(metric: str) -> str:
    """aiplatform.googleapis.com/custom_model_training_[preemptible_]nvidia_<gpu>_gpus →
    CustomModelTraining[Preemptible]<GPU>GPUsPerProjectPerRegion; other metrics by their own words."""
    short = metric.rsplit("/", 1)[-1]
    found = _METRIC.fullmatch(short)
    if found is None:
        return "".join(word.capitalize() for word in short.split("_")) + "PerProjectPerRegion"
    preemptible = "Preemptible" if found["preemptible"] else ""
    what = f"{found['gpu'].replace('_', '').upper()}GPUs" if found["gpu"] else "CPUs"
    return f"CustomModelTraining{preemptible}{what}PerProjectPerRegion"


def quota_infos(model: CapacityModel) -> list[dict]:
    """The model's training-GPU limits as QuotaInfo JSON, ordered by quota id."""
    regions_of: dict[str, dict[str, int]] = {metric: {} for metric in model.default_quotas}
    for region, capacity in sorted(model.regions.items()):
        for metric, limit in capacity.quotas.items():
            regions_of.setdefault(metric, {})[region] = limit
    infos = []
    for metric, limits in regions_of.items():
        entries = [region_entry(region, limit) for region, limit in limits.items()]
        if metric in model.default_quotas:  # the entry without dimensions: every other region
            others = [region for region in VERTEX_REGIONS if region not in limits]
            entries.append(default_entry(model.default_quotas[metric], others))
        short = metric.rsplit("/", 1)[-1]
        infos.append(
            {
                **fields(quota_id(metric), metric, short.replace("_", " ").capitalize(), unit="1"),
                "dimensions": ["region"],
                "dimensionsInfos": entries,
            }
        )
    return sorted(infos, key=lambda info: info["quotaId"])


def listing(model: CapacityModel) -> list[dict]:
    """Every QuotaInfo of aiplatform.googleapis.com, ordered by quota id: the model's GPU limits, and the rest."""
    own = quota_infos(model)
    ids = {info["quotaId"] for info in own}
    return sorted(own + [info for info in other_quota_infos() if info["quotaId"] not in ids], key=_by_id)


def _by_id(info: dict) -> str:
    return info["quotaId"]


class QuotaReads:
    """Calls served so far (and which), refusals still to answer, and the time each call takes; for tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.calls: deque[str] = deque(maxlen=10_000)  # "list" or "get <quota id>", oldest first
        self.latency = 0.0
        self._refusals = 0

    def refuse_next(self, count: int) -> None:
        with self._lock:
            self._refusals += count

    def slow_down(self, seconds: float) -> None:
        with self._lock:
            self.latency = seconds

    def clear(self) -> None:
        with self._lock:
            self._refusals = 0
            self.latency = 0.0

    def take(self, call: str) -> bool:
        """Count one call, after the round trip's time; True when it is to be refused."""
        with self._lock:
            self.count += 1
            self.calls.append(call)
            refuse = self._refusals > 0
            self._refusals = max(0, self._refusals - 1)
            latency = self.latency
        time.sleep(latency)
        return refuse


def cloud_quotas_routes(model: Callable[[], CapacityModel], reads: QuotaReads) -> list[Route]:
    def parent(match: re.Match[str], call: str) -> None:
        if reads.take(call):
            raise RestAbort(grpc.StatusCode.PERMISSION_DENIED, DISABLED_MESSAGE.format(project=match["project"]))
        if match["location"] != "global":
            raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, f"Location must be 'global', got {match['location']!r}.")

    def infos_of(match: re.Match[str]) -> list[dict]:
        return listing(model()) if match["service"] == QUOTA_SERVICE else []

    def list_infos(request: RestRequest, match: re.Match[str]) -> RestResponse:
        parent(match, "list")
        try:
            size = int(request.query.get("pageSize") or DEFAULT_PAGE_SIZE)
            start = int(request.query.get("pageToken") or 0)
        except ValueError:
            raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, "Invalid pageSize or pageToken.") from None
        infos = infos_of(match)
        page = infos[start : start + max(1, size)]
        body: dict = {"quotaInfos": [_named(match, info) for info in page]} if page else {}
        if start + len(page) < len(infos):
            body["nextPageToken"] = str(start + len(page))
        return RestResponse(200, body)

    def get_info(request: RestRequest, match: re.Match[str]) -> RestResponse:
        parent(match, f"get {match['quota_id']}")
        for info in infos_of(match):
            if info["quotaId"] == match["quota_id"]:
                return RestResponse(200, _named(match, info))
        raise RestAbort(grpc.StatusCode.NOT_FOUND, f"QuotaInfo {match['quota_id']} of {match['service']} not found.")

    return [
        ("GET", re.compile(rf"/v1/{_PARENT}/quotaInfos"), list_infos),
        ("GET", re.compile(rf"/v1/{_PARENT}/quotaInfos/(?P<quota_id>[^/]+)"), get_info),
    ]


def _named(match: re.Match[str], info: dict) -> dict:
    parent = f"projects/{match['project']}/locations/global/services/{match['service']}"
    return {"name": f"{parent}/quotaInfos/{info['quotaId']}", **info}
