"""Compute Engine's reservations.get stand-in on the JobService's REST port (issue 43; local/FIDELITY.md
"Reservations"): the capacity file's reservations, and how many of their VMs the jobs on them hold.

    GET /compute/v1/projects/P/zones/Z/reservations/NAME  → Reservation (specificReservation: count, inUseCount,
                                                             instanceProperties: machineType, guestAccelerators)

An unknown reservation answers 404, as Compute Engine does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import grpc
from google.cloud.aiplatform_v1.types import CustomJob

from local.jobservice.capacity import CapacityModel
from local.jobservice.reservations import in_use
from local.jobservice.rest import RestAbort, RestRequest, RestResponse, Route


def compute_name(accelerator_type: str) -> str:
    """Vertex's GPU enum name as Compute Engine writes it (NVIDIA_TESLA_A100 → nvidia-tesla-a100)."""
    return accelerator_type.lower().replace("_", "-")


def reservation_routes(model: Callable[[], CapacityModel], jobs: Callable[[], Iterable[CustomJob]]) -> list[Route]:
    def get(request: RestRequest, match: re.Match[str]) -> RestResponse:
        name = f"projects/{match['project']}/zones/{match['zone']}/reservations/{match['name']}"
        found = model().reservations.get(name)
        if found is None:
            raise RestAbort(grpc.StatusCode.NOT_FOUND, f"The resource '{name}' was not found")
        body = {
            "kind": "compute#reservation",
            "name": match["name"],
            "zone": f"projects/{match['project']}/zones/{match['zone']}",
            "selfLink": f"https://www.googleapis.com/compute/v1/{name}",
            "specificReservationRequired": True,
            "status": "READY",
            "specificReservation": {
                "count": str(found.count),
                "inUseCount": str(in_use(name, jobs())),
                "instanceProperties": {
                    "machineType": found.machine_type,
                    "guestAccelerators": [
                        {
                            "acceleratorType": compute_name(found.accelerator_type),
                            "acceleratorCount": found.accelerator_count,
                        }
                    ],
                },
            },
        }
        return RestResponse(200, body)

    return [
        (
            "GET",
            re.compile(r"/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)"),
            get,
        )
    ]
