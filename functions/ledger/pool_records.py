"""The control bucket's record of each warm pool a team keeps (issue 43; functions/capacity/warm_pools.py), changed
only by compare-and-swap:

  warm-pools/<pool id>.json   PoolRecord

One record per declared pool, kept across its lives (a life: from a creation to its deletion). It holds its own outbox
(functions/ledger/event_box.py), emptied at each new life.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from functions.cloud.ports import Storage
from functions.ledger.event_box import EventBox

POOLS_PREFIX = "warm-pools/"
PoolPhase = Literal["absent", "provisioning", "running"]


class PoolRecord(EventBox):
    model_config = ConfigDict(extra="forbid")

    pool_id: str
    team: str
    life: int = Field(0, ge=0, description="How many times the pool was created (its current life's number).")
    phase: PoolPhase = "absent"
    demand: str | None = Field(None, description="The request whose arrival asks for the pool while it is absent.")
    created: datetime | None = None
    ready: datetime | None = None
    last_routed: datetime | None = Field(None, description="When a job was last sent to it.")
    idle_since: datetime | None = None
    last_seen: datetime | None = Field(None, description="reconcile's last look at it (idle time adds up between).")
    idle_seconds: float = 0.0
    idle_usd: float = 0.0

    @property
    def life_key(self) -> str:
        return f"{self.pool_id}#{self.life}"


class PoolLedger:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    @staticmethod
    def object_name(pool_id: str) -> str:
        return f"{POOLS_PREFIX}{pool_id}.json"

    def read(self, pool_id: str) -> tuple[PoolRecord, int] | None:
        found = self._gcs.read(self.bucket, self.object_name(pool_id))
        if found is None:
            return None
        return PoolRecord.model_validate_json(found[0]), found[1]

    def write(self, record: PoolRecord, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`; 0 creates it); the new generation."""
        return self._gcs.write(self.bucket, self.object_name(record.pool_id), record.model_dump_json(), generation)
