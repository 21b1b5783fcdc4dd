"""Compute Engine reservations on the local stack (issue 43): what the capacity file's `reservations` hold, which jobs
consume them and what CreateCustomJob refuses (local/FIDELITY.md "Reservations"); compute_rest.py serves them.

A job consumes a reservation when its GPU worker pools' machine_spec.reservation_affinity is SPECIFIC_RESERVATION
with key compute.googleapis.com/reservation-name and the reservation's full name as its one value. Its VMs count as in
use while the job holds its machines (PENDING, RUNNING, CANCELLING), as its GPUs count against the quota.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.cloud.aiplatform_v1.types import CustomJob, JobState, MachineSpec, ReservationAffinity

from local.jobservice.capacity import RESERVATION_DEMAND, CapacityModel

RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"
HOLDING_STATES = frozenset({JobState.JOB_STATE_PENDING, JobState.JOB_STATE_RUNNING, JobState.JOB_STATE_CANCELLING})
_SPECIFIC = ReservationAffinity.Type.SPECIFIC_RESERVATION


def reservation_of(spec: MachineSpec) -> str | None:
    """The reservation a machine spec names (SPECIFIC_RESERVATION's one value), else None."""
    affinity = spec.reservation_affinity
    if affinity.reservation_affinity_type != _SPECIFIC or not affinity.values:
        return None
    return str(affinity.values[0])


def reserved_vms(job: CustomJob) -> dict[str, int]:
    """VMs the job takes of each reservation, keyed as a capacity demand (RESERVATION_DEMAND + the full name)."""
    demand: dict[str, int] = {}
    for pool in job.job_spec.worker_pool_specs:
        name = reservation_of(pool.machine_spec)
        if name is not None:
            key = RESERVATION_DEMAND + name
            demand[key] = demand.get(key, 0) + pool.replica_count
    return demand


def on_reservation(job: CustomJob, model: CapacityModel) -> bool:
    """Whether every GPU pool of the job runs on a reservation the model holds: its machines are already there, so
    the machine rule's stockouts do not reach it."""
    pools = [pool for pool in job.job_spec.worker_pool_specs if pool.machine_spec.accelerator_count]
    return bool(pools) and all(reservation_of(pool.machine_spec) in model.reservations for pool in pools)


def reservation_problems(job: CustomJob, model: CapacityModel) -> list[tuple[str, str]]:
    """What CreateCustomJob refuses of a job's reservation affinity (INVALID_ARGUMENT): a SPECIFIC_RESERVATION without
    the key and one full name, a reservation that does not exist, or one whose VMs are another machine shape."""
    problems: list[tuple[str, str]] = []
    for key, vms in reserved_vms(job).items():
        found = model.reservations.get(key.removeprefix(RESERVATION_DEMAND))
        if found is not None and vms > found.count:
            problems.append(
                (
                    "custom_job.job_spec.worker_pool_specs",
                    f"The job needs {vms} VMs of reservation {found.name}, which holds {found.count}.",
                )
            )
    for index, pool in enumerate(job.job_spec.worker_pool_specs):
        spec = pool.machine_spec
        affinity = spec.reservation_affinity
        if affinity.reservation_affinity_type != _SPECIFIC:
            continue
        path = f"custom_job.job_spec.worker_pool_specs[{index}].machine_spec.reservation_affinity"
        if affinity.key != RESERVATION_NAME_KEY or len(affinity.values) != 1:
            problems.append((path, f"SPECIFIC_RESERVATION needs key {RESERVATION_NAME_KEY} and one value"))
            continue
        name = str(affinity.values[0])
        found = model.reservations.get(name)
        if found is None:
            problems.append((f"{path}.values", f"Reservation {name} does not exist."))
            continue
        shape = (spec.machine_type, spec.accelerator_type.name, spec.accelerator_count)
        if shape != found.shape():
            problems.append(
                (
                    path,
                    f"The machine spec ({shape[0]} with {shape[2]} {shape[1]}) does not match reservation {name} "
                    f"({found.machine_type} with {found.accelerator_count} {found.accelerator_type}).",
                )
            )
    return problems


def in_use(name: str, jobs: Iterable[CustomJob]) -> int:
    return sum(reserved_vms(job).get(RESERVATION_DEMAND + name, 0) for job in jobs if job.state in HOLDING_STATES)
