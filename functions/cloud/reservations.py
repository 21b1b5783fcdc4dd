"""Compute Engine reservations, read at admission (issue 43): a reservation's machine shape, how many VMs it holds and
how many are in use, over REST (reservations.get, compute/v1; local/FIDELITY.md "Reservations").

GET {endpoint}/compute/v1/projects/P/zones/Z/reservations/NAME answers a Reservation whose `specificReservation`
holds `count` (VMs reserved), `inUseCount` (VMs consuming it) and `instanceProperties` (`machineType`, a name, and
`guestAccelerators`: [{acceleratorType, acceleratorCount}], Compute Engine's lowercase GPU names such as
nvidia-tesla-a100). The controller's account needs compute.reservations.get on the reservation's project (Terraform
grants it on the deployment's; a shared reservation's owner grants it on its own).

https://compute.googleapis.com, or `compute_endpoint` (the local stack's stand-in on the JobService's REST port).
A reservation that cannot be read for good (refused, missing) is ReservationUnreadable, which admission turns into a
refusal naming the permission; an unreachable API is Transient (the event is redelivered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from functions.cloud.errors import Transient
from functions.cloud.failures import NOT_FOUND, PERMISSION_DENIED, RESOURCE_EXHAUSTED, TRANSIENT_CALL_CODES
from functions.cloud.rest import google_error, request_json, rest_session
from functions.cloud.retry import Retryable, RetryPolicy
from schemas import catalog

API = "https://compute.googleapis.com"
POLICY = RetryPolicy(attempts=3, first_pause=0.5, max_pause=4.0, call_timeout=15.0)
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
PERMISSION = "compute.reservations.get"


class ReservationUnreadable(Exception):
    """The reservation cannot be read, and asking again will not change that: the message says why."""


@dataclass(frozen=True)
class ReservationState:
    """What admission needs of a reservation: its VMs' shape (Vertex's names) and how many are free."""

    name: str  # projects/P/zones/Z/reservations/N
    machine_type: str
    accelerator_type: str | None  # NVIDIA_TESLA_A100 (Vertex's enum); None: the reservation holds no GPUs
    accelerator_count: int
    count: int
    in_use: int

    @property
    def free(self) -> int:
        return max(0, self.count - self.in_use)

    def shape(self) -> str:
        gpus = f"{self.accelerator_count} × {self.accelerator_type}" if self.accelerator_type else "no GPUs"
        return f"{self.machine_type} with {gpus}"


def vertex_accelerator(compute_name: str) -> str:
    """Compute Engine's GPU name (nvidia-tesla-a100, nvidia-h100-80gb) as Vertex's AcceleratorType enum names it
    (NVIDIA_TESLA_A100, NVIDIA_H100_80GB): the same words, upper case, underscores."""
    return compute_name.rsplit("/", 1)[-1].upper().replace("-", "_")


def state_of(name: str, body: dict[str, Any]) -> ReservationState:
    """A Reservation resource's JSON as admission reads it. A machine with built-in GPUs (A2, A3, G2) may list none:
    the machine's own are then its shape (the catalog's)."""
    specific = body.get("specificReservation") or {}
    properties = specific.get("instanceProperties") or {}
    machine_type = str(properties.get("machineType", "")).rsplit("/", 1)[-1]
    accelerators = properties.get("guestAccelerators") or []
    accelerator_type: str | None = None
    count = 0
    if accelerators:
        accelerator_type = vertex_accelerator(str(accelerators[0].get("acceleratorType", "")))
        count = int(accelerators[0].get("acceleratorCount", 0))
    elif (machine := catalog.machine(machine_type)) is not None and machine.accelerator_optimized:
        accelerator_type, count = machine.builtin_accelerator, machine.builtin_count or 0
    return ReservationState(
        name=name,
        machine_type=machine_type,
        accelerator_type=accelerator_type,
        accelerator_count=count,
        count=int(specific.get("count", 0)),
        in_use=int(specific.get("inUseCount", 0)),
    )


class ComputeReservations:
    def __init__(self, endpoint: str = "", policy: RetryPolicy = POLICY):
        self._endpoint = endpoint
        self._policy = policy
        self._session: Any = None
        self._base = ""

    def get(self, name: str) -> ReservationState:
        """The reservation `name` (projects/P/zones/Z/reservations/N)."""
        if self._session is None:  # built on first use: in the cloud this reads the credentials
            try:
                self._session, self._base = rest_session(self._endpoint or None, API, _SCOPES)
            except Exception as exc:  # google.auth's DefaultCredentialsError and kin
                raise Transient(f"no credentials for Compute Engine: {exc}") from None
        url = f"{self._base}/compute/v1/{name}"

        def attempt(timeout: float) -> dict[str, Any]:
            status, body = request_json(self._session, "GET", url, timeout, "Compute Engine")
            if status < 300 and isinstance(body, dict):
                return body
            code, message = google_error(status, body)
            if code in TRANSIENT_CALL_CODES or code == RESOURCE_EXHAUSTED:
                raise Retryable(f"reservations.get {name} {status} (code {code}): {message}")
            raise ReservationUnreadable(_unreadable(name, code, status, message))

        return state_of(name, self._policy.call("reservations.get", attempt))


def _unreadable(name: str, code: int, status: int, message: str) -> str:
    """Why a reservation cannot be read, in words that say what to do."""
    if code == NOT_FOUND:
        return f"reservation {name} does not exist (Compute Engine: {message})"
    if code == PERMISSION_DENIED or status in (401, 403):
        project = name.split("/")[1] if name.startswith("projects/") else "?"
        return (
            f"trainctl's controller may not read reservation {name}: it needs {PERMISSION} on project {project} "
            f"(Compute Engine: {message})"
        )
    return f"Compute Engine refused reservations.get {name} with {status}: {message}"
