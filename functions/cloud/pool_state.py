"""What Vertex says of a persistent resource (functions/cloud/persistent_resources.py reads it; ports.py names it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PoolState:
    """What Vertex says of a persistent resource: its state (PROVISIONING, RUNNING, STOPPING, ERROR, …) and, over its
    resource pools, the nodes it holds and those training jobs use now (ResourcePool.used_replica_count)."""

    name: str
    state: str
    replicas: int
    used_replicas: int
    error: str = ""


def pool_state_of(body: dict[str, Any]) -> PoolState:
    pools = body.get("resourcePools") or []
    return PoolState(
        name=str(body.get("name", "")),
        state=str(body.get("state", "STATE_UNSPECIFIED")),
        replicas=sum(int(p.get("replicaCount") or 0) for p in pools),
        used_replicas=sum(int(p.get("usedReplicaCount") or 0) for p in pools),
        error=str((body.get("error") or {}).get("message", "")),
    )
