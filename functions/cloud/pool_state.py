"""What Vertex says of a persistent resource (functions/cloud/persistent_resources.py reads it; ports.py names it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResourcePoolShape:
    """One resource pool: the machines a job's worker pool must match exactly to run there, and at most how many
    (persistent-resource-train: machine type and disk type as the pool's; replica count ≤ its replica count or its
    autoscaling max). `boot_disk_type` None: the field left out (Vertex's default)."""

    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    boot_disk_type: str | None
    max_replicas: int

    def words(self) -> str:
        gpus = f" with {self.accelerator_count} × {self.accelerator_type}" if self.accelerator_type else ""
        disk = self.boot_disk_type or "the default disk"
        return f"{self.machine_type}{gpus}, {disk}, up to {self.max_replicas} nodes"


@dataclass(frozen=True)
class PoolState:
    """What Vertex says of a persistent resource: its state (PROVISIONING, RUNNING, STOPPING, ERROR, …), its resource
    pools, and over them the nodes it holds and those training jobs use now (ResourcePool.used_replica_count)."""

    name: str
    state: str
    replicas: int
    used_replicas: int
    error: str = ""
    pools: tuple[ResourcePoolShape, ...] = ()


def _shape(pool: dict[str, Any]) -> ResourcePoolShape:
    machine, disk = pool.get("machineSpec") or {}, pool.get("diskSpec") or {}
    accelerator = str(machine.get("acceleratorType") or "") or None
    if accelerator == "ACCELERATOR_TYPE_UNSPECIFIED":
        accelerator = None
    replicas = int(pool.get("replicaCount") or 0)
    autoscaling = pool.get("autoscalingSpec") or {}
    return ResourcePoolShape(
        machine_type=str(machine.get("machineType", "")),
        accelerator_type=accelerator,
        accelerator_count=int(machine.get("acceleratorCount") or 0),
        boot_disk_type=str(disk.get("bootDiskType") or "") or None,
        max_replicas=max(replicas, int(autoscaling.get("maxReplicaCount") or 0)),
    )


def pool_state_of(body: dict[str, Any]) -> PoolState:
    pools = body.get("resourcePools") or []
    return PoolState(
        name=str(body.get("name", "")),
        state=str(body.get("state", "STATE_UNSPECIFIED")),
        replicas=sum(int(p.get("replicaCount") or 0) for p in pools),
        used_replicas=sum(int(p.get("usedReplicaCount") or 0) for p in pools),
        error=str((body.get("error") or {}).get("message", "")),
        pools=tuple(_shape(p) for p in pools),
    )
