"""Persistent-resource rungs at admission (issue 43, point 2): a rung that names a Vertex persistent resource
(`resources.persistent_resource`) is read (functions/cloud/persistent_resources.py) before the request is claimed, and
refused, naming the rule, when Vertex would refuse its job:

- the resource must exist in the deployment's project and region, and not be stopping or failed;
- each of the job's worker pools must match one of the resource's pools exactly — machine type, GPUs, boot disk type
  ("default is pd-ssd": DiskSpec.boot_disk_type) — with at most its replicas (its replica count or autoscaling max):
  cloud.google.com/vertex-ai/docs/training/persistent-resource-train, local/FIDELITY.md "Persistent resources".

A resource that cannot be read for another reason (a permission) is a refusal naming why, never a retry loop: asking
again changes nothing until someone acts. A team's warm pools are not named by requests (functions/capacity/
warm_pools.py): this is for a cluster the team runs itself.
"""

from __future__ import annotations

from typing import Any

from functions.cloud.pool_state import ResourcePoolShape
from functions.cloud.ports import PersistentResources
from functions.cloud.vertex import CallRejected
from functions.jobs.planning import plan_custom_job
from functions.settings import Settings
from schemas.request import TrainingJobRequest, rung_prefix

RULE = (
    "Vertex runs a job on a persistent resource only when each worker pool matches one of its resource pools exactly "
    "(machine type, GPUs, boot disk type) within that pool's replicas"
)
DEFAULT_BOOT_DISK = "pd-ssd"  # DiskSpec.boot_disk_type: "default is pd-ssd"
_UNUSABLE = {"STOPPING": "being deleted", "ERROR": "failed"}


def _same_shape(worker_pool: dict[str, Any], pool: ResourcePoolShape) -> bool:
    machine, disk = worker_pool["machine_spec"], worker_pool.get("disk_spec") or {}
    return (
        machine["machine_type"] == pool.machine_type
        and machine.get("accelerator_type") == pool.accelerator_type
        and int(machine.get("accelerator_count") or 0) == pool.accelerator_count
        and (disk.get("boot_disk_type") or DEFAULT_BOOT_DISK) == (pool.boot_disk_type or DEFAULT_BOOT_DISK)
    )


def persistent_problems(request: TrainingJobRequest, reader: PersistentResources, settings: Settings) -> list[str]:
    """Why each rung naming a persistent resource cannot run on it (empty: every such rung can)."""
    errors: list[str] = []
    for rung in request.rungs():
        resource_id = rung.resources.persistent_resource
        if resource_id is None:
            continue
        field = f"{rung_prefix(rung.index)}resources.persistent_resource"
        name = reader.resource_name(resource_id)
        try:
            state = reader.get(resource_id)
        except CallRejected as exc:
            errors.append(
                f"{field}: {name} cannot be read ({exc}); the controller needs aiplatform.persistentResources.get"
            )
            continue
        if state is None:
            errors.append(f"{field}: {name} does not exist (a persistent resource is of the deployment's region)")
            continue
        if state.state in _UNUSABLE:
            errors.append(f"{field}: {name} is {_UNUSABLE[state.state]} ({state.state}); no job can start on it")
            continue
        plan = plan_custom_job(request, settings, "admission", 1, rung.index)
        taken: dict[int, int] = {}  # resource pool → the job's nodes on it (worker pools of one shape share it)
        for index, worker_pool in enumerate(plan.custom_job["job_spec"]["worker_pool_specs"]):
            match = next((i for i, pool in enumerate(state.pools) if _same_shape(worker_pool, pool)), None)
            if match is not None:
                taken[match] = taken.get(match, 0) + int(worker_pool["replica_count"])
                continue
            machine = worker_pool["machine_spec"]
            gpus = (
                f" with {machine['accelerator_count']} × {machine['accelerator_type']}"
                if "accelerator_type" in machine
                else ""
            )
            disk = (worker_pool.get("disk_spec") or {}).get("boot_disk_type") or DEFAULT_BOOT_DISK
            has = "; ".join(pool.words() for pool in state.pools) or "no pools"
            errors.append(
                f"{field}: worker pool {index} ({machine['machine_type']}{gpus}, {disk}) matches none of {name}'s "
                f"pools ({has}); {RULE}"
            )
        for match, nodes in sorted(taken.items()):
            pool = state.pools[match]
            if nodes > pool.max_replicas:
                errors.append(f"{field}: the job needs {nodes} nodes of {name}'s pool ({pool.words()}); {RULE}")
    return errors
