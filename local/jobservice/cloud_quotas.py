"""The Cloud Quotas API (v1) stand-in: the capacity model's GPU limits as QuotaInfos of
aiplatform.googleapis.com, on the JobService's REST port (reference/apis.md §3; googleapis
google/api/cloudquotas/v1/resources.proto):

    GET /v1/projects/P/locations/global/services/S/quotaInfos?pageSize=N&pageToken=T  → {quotaInfos, nextPageToken}
    GET /v1/projects/P/locations/global/services/S/quotaInfos/QUOTA_ID               → QuotaInfo

One QuotaInfo per metric named in any region's quotas or in default_quotas, with one dimensionsInfos entry
per region that limits it and, for a default, one entry without dimensions; proto3 JSON leaves a zero out,
so a limit of 0 is `details: {}`. Quota ids are derived from the metric as Vertex's known ids are formed
(CustomModelTrainingA10080GBGPUsPerProjectPerRegion for custom_model_training_nvidia_a100_80gb_gpus;
local/FIDELITY.md). The location must be `global` (400 otherwise); an unknown quota id is 404. Faults
(JobServiceControl.refuse_quota_reads) answer with Google's 403 for a disabled API; every call is counted,
for tests of the client's cache.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import grpc

from local.jobservice.capacity import CapacityModel
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
    """The model's limits as QuotaInfo JSON, ordered by quota id."""
    regions_of: dict[str, dict[str, int]] = {metric: {} for metric in model.default_quotas}
    for region, capacity in sorted(model.regions.items()):
        for metric, limit in capacity.quotas.items():
            regions_of.setdefault(metric, {})[region] = limit
    infos = []
    for metric, limits in regions_of.items():
        entries: list[dict] = [
            {
                "dimensions": {"region": region},
                "details": _details(limit),
                "applicableLocations": [region],
            }
            for region, limit in limits.items()
        ]
        if metric in model.default_quotas:  # the entry without dimensions: every other region
            entries.append({"details": _details(model.default_quotas[metric])})
        infos.append(
            {
                "quotaId": quota_id(metric),
                "metric": metric,
                "service": QUOTA_SERVICE,
                "isPrecise": True,
                "isConcurrent": True,
                "containerType": "PROJECT",
                "dimensions": ["region"],
                "dimensionsInfos": entries,
            }
        )
    return sorted(infos, key=lambda info: info["quotaId"])


def _details(limit: int) -> dict:
    return {"value": str(limit)} if limit else {}  # proto3 JSON leaves a zero out


class QuotaReads:
    """Calls served so far, and refusals still to answer; for tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._refusals = 0

    def refuse_next(self, count: int) -> None:
        with self._lock:
            self._refusals += count

    def clear(self) -> None:
        with self._lock:
            self._refusals = 0

    def take(self) -> bool:
        """Count one call; True when it is to be refused."""
        with self._lock:
            self.count += 1
            refuse = self._refusals > 0
            self._refusals = max(0, self._refusals - 1)
            return refuse


def cloud_quotas_routes(model: Callable[[], CapacityModel], reads: QuotaReads) -> list[Route]:
    def parent(match: re.Match[str]) -> None:
        if reads.take():
            raise RestAbort(grpc.StatusCode.PERMISSION_DENIED, DISABLED_MESSAGE.format(project=match["project"]))
        if match["location"] != "global":
            raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, f"Location must be 'global', got {match['location']!r}.")

    def infos_of(match: re.Match[str]) -> list[dict]:
        return quota_infos(model()) if match["service"] == QUOTA_SERVICE else []

    def list_infos(request: RestRequest, match: re.Match[str]) -> RestResponse:
        parent(match)
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
        parent(match)
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
