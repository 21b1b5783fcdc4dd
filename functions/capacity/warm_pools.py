"""Warm pools (issue 43, point 2): capacity a team keeps warm as a Vertex persistent resource, managed by trainctl —
the SageMaker warm-pool semantics on Vertex, serverless.

The operator declares them per team and shape in the teams setting (functions/teams.py `WarmPool`: machine, GPUs,
boot disk, replicas, keep_alive). Then:

- **Routing, at submission.** A request of the team whose rung is exactly a pool's shape (same machine, GPUs and boot
  disk; standard scheduling, no reservation, no Reduction Server pool, the deployment's region, at most the pool's
  replicas) runs on the pool when it is RUNNING: its CustomJob carries `job_spec.persistent_resource_id`, and Vertex
  starts it on the pool's nodes without provisioning ("significantly reduces the job startup time":
  cloud.google.com/vertex-ai/docs/training/persistent-resource-train; the job's machine and disk must match the
  resource pool exactly, its replica_count at most the pool's — local/FIDELITY.md "Persistent resources"). While the
  pool is absent, the request notes the demand and runs as it would have (cold); the pool is made for later ones.
- **reconcile** creates a pool that has demand, watches it come up, adds up its idle time (no node used by a
  training job: `ResourcePool.used_replica_count`, Vertex's own figure, never anything a job wrote), charges that
  time at on-demand prices to the team's budget as it grows (functions/ledger/budget_records.py `pool_idle`: a pool
  is billed for all its running time, cloud.google.com/vertex-ai/docs/training/persistent-resource-overview; its busy
  time is the jobs' own cost), and deletes it once it has been idle `keep_alive` since its last job and its last
  routing. Events `pool_created` and `pool_deleted` go to the team's events once per pool life.

A routing and a deletion never cross: routing writes the record's `last_routed` by compare-and-swap, and the deletion
is decided in a compare-and-swap on the same record, so a pool is never deleted under a job just sent to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import logs
from functions.cloud.gcs import Conflict
from functions.cloud.ports import Events, PersistentResources, Storage
from functions.jobs.planning import Plan
from functions.ledger.budget_records import BudgetRecords, month_of
from functions.ledger.pool_records import PoolLedger, PoolRecord
from functions.ledger.record import Record
from functions.settings import Settings
from functions.teams import WarmPool
from schemas import catalog
from schemas.events import JobEvent, PoolCreated, PoolDeleted, Trigger
from schemas.request import TrainingJobRequest

POOL_LABEL = "trainctl_pool"
_RESOURCE_POOL_ID = "gpu"


@dataclass(frozen=True)
class DeclaredPool:
    team: str
    spec: WarmPool
    pool_id: str


def pool_id(control_bucket: str, team: str, spec: WarmPool) -> str:
    """The persistent resource's id: the same for the same deployment, team and shape (so creating again finds the
    first try's), within CreatePersistentResourceRequest's rule: at most 63 of /^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/."""
    digest = hashlib.sha256(repr((control_bucket, team, spec.shape())).encode()).hexdigest()[:8]
    return f"tc-{team}-{digest}"


def declared_pools(settings: Settings) -> Iterator[DeclaredPool]:
    teams = settings.teams
    if teams is None:
        return
    for team, config in teams.teams.items():
        for spec in config.warm_pools:
            yield DeclaredPool(team, spec, pool_id(settings.control_bucket, team, spec))


def matching_pool(request: TrainingJobRequest, plan: Plan, team: str | None, settings: Settings) -> DeclaredPool | None:
    """The team's pool this rung's job can run on, if any (see the module's rules)."""
    res = request.resources
    if (
        team is None
        or res.reservation is not None
        or res.persistent_resource is not None
        or request.scheduling.strategy != "standard"
        or plan.reduction_server.enabled
        or plan.region != settings.region
    ):
        return None
    wanted = (res.machine_type, res.accelerator_type, res.accelerator_count, res.boot_disk.type, res.boot_disk.size_gb)
    return next(
        (
            pool
            for pool in declared_pools(settings)
            if pool.team == team and pool.spec.shape() == wanted and res.replica_count <= pool.spec.replicas
        ),
        None,
    )


def resource_body(pool: DeclaredPool) -> dict[str, Any]:
    """The PersistentResource to create (REST JSON): one resource pool of the declared shape, with the machine and
    disk spec a job of that shape is planned with (functions/jobs/planning.py), so that the two match exactly."""
    spec = pool.spec
    machine: dict[str, Any] = {"machineType": spec.machine_type}
    if spec.accelerator_type:
        machine |= {"acceleratorType": spec.accelerator_type, "acceleratorCount": spec.accelerator_count}
    disk: dict[str, Any] = {"bootDiskSizeGb": spec.boot_disk.size_gb}
    disk_type = catalog.boot_disk_type_to_send(spec.machine_type, spec.boot_disk.type)
    if disk_type is not None:
        disk["bootDiskType"] = disk_type
    return {
        "displayName": f"trainctl warm pool of team {pool.team}",
        "labels": {POOL_LABEL: pool.pool_id, "team": pool.team},
        "resourcePools": [
            {"id": _RESOURCE_POOL_ID, "machineSpec": machine, "replicaCount": str(spec.replicas), "diskSpec": disk}
        ],
    }


def idle_rate_usd(spec: WarmPool) -> float:
    """What an idle hour of the whole pool costs at on-demand prices."""
    count = spec.accelerator_count or 0
    return catalog.node_hourly_price(spec.machine_type, spec.accelerator_type, count, False) * spec.replicas


class WarmPools:
    def __init__(
        self,
        settings: Settings,
        gcs: Storage,
        resources: PersistentResources | None,
        publisher: Events,
        budgets: BudgetRecords,
        clock: Callable[[], datetime],
    ):
        self.settings = settings
        self.ledger = PoolLedger(gcs, settings.control_bucket)
        self.resources = resources
        self.publisher = publisher
        self.budgets = budgets
        self.clock = clock

    # --- at submission -----------------------------------------------------------------------------------------

    def route(self, record: Record, request: TrainingJobRequest, plan: Plan) -> str | None:
        """Send this attempt's job to its team's warm pool when one of its shape is RUNNING (its CustomJob then names
        the pool: the persistent resource's id, returned); note the demand when the pool is absent."""
        pool = matching_pool(request, plan, record.team, self.settings) if self.resources is not None else None
        if pool is None:
            return None
        now = self.clock()

        def change(current: PoolRecord) -> bool:
            if current.phase == "running":
                current.last_routed = now
                return True
            if current.phase == "absent" and current.demand is None:
                current.demand = record.request_id
                return True
            return False

        current = self._change(pool, change)
        if current is None or current.phase != "running":
            return None
        plan.custom_job["job_spec"]["persistent_resource_id"] = pool.pool_id
        logs.info("routed to a warm pool", pool=pool.pool_id, request_id=record.request_id)
        return pool.pool_id

    # --- reconcile ---------------------------------------------------------------------------------------------

    def reconcile(self) -> dict[str, int]:
        """Each declared pool's step this tick; one that fails is logged and left to the next tick."""
        summary = {"pools_created": 0, "pools_deleted": 0}
        if self.resources is None:
            return {}
        for pool in declared_pools(self.settings):
            try:
                step = self._visit(pool)
            except Exception as exc:  # one pool's trouble never stops the others or the sweep
                logs.warning(f"warm pool {pool.pool_id}: {type(exc).__name__}: {exc}", pool=pool.pool_id)
                continue
            if step:
                summary[step] += 1
        return {k: v for k, v in summary.items() if v}

    def _visit(self, pool: DeclaredPool) -> str | None:
        assert self.resources is not None
        found = self.ledger.read(pool.pool_id)
        record = found[0] if found else PoolRecord(pool_id=pool.pool_id, team=pool.team)
        self._flush(pool, record)
        if record.phase == "absent":
            if record.demand is None:
                return None
            self.resources.create(pool.pool_id, resource_body(pool))  # False: an earlier try made it
            return "pools_created" if self._change(pool, lambda r: self._created(pool, r)) else None
        state = self.resources.get(pool.pool_id)
        now = self.clock()
        if state is None or state.state == "ERROR":
            error = "deleted outside trainctl" if state is None else (state.error or "Vertex could not provision it")
            if state is not None:
                self.resources.delete(pool.pool_id)
            return "pools_deleted" if self._change(pool, lambda r: self._deleted(pool, r, "failed", error)) else None
        if record.phase == "provisioning":
            if state.state == "RUNNING":
                self._change(pool, lambda r: self._ready(r, now))
            return None
        idle = state.used_replicas == 0
        current = self._change(pool, lambda r: self._count_idle(pool, r, idle, now))
        if current is None or current.phase != "running":
            return None
        self.budgets.change(
            pool.team,
            month_of(current.created or now),
            lambda month: month.charge_idle(current.life_key, current.idle_seconds, current.idle_usd),
        )
        if not idle:
            return None

        def delete_when_quiet(r: PoolRecord) -> bool:
            quiet_since = max(filter(None, (r.idle_since, r.last_routed)), default=None)
            if r.phase != "running" or quiet_since is None:
                return False
            if now - quiet_since < timedelta(seconds=pool.spec.keep_alive):
                return False
            return self._deleted(pool, r, "idle", None)

        deleted = self._change(pool, delete_when_quiet)
        if deleted is None or deleted.phase != "absent":
            return None
        self.resources.delete(pool.pool_id)
        return "pools_deleted"

    def _created(self, pool: DeclaredPool, record: PoolRecord) -> bool:
        if record.phase != "absent" or record.demand is None:
            return False
        now = self.clock()
        demand = record.demand
        record.life += 1
        record.phase, record.demand, record.created, record.ready = "provisioning", None, now, None
        record.idle_since = record.last_seen = record.last_routed = None
        record.idle_seconds = record.idle_usd = 0.0
        record.outbox, record.published = [], []
        message = (
            f"warm pool {pool.pool_id} created for team {pool.team}: {pool.spec.replicas} × {pool.spec.machine_type}"
        )
        record.queue(PoolCreated(**self._envelope(pool, record, message), demand=demand), now)
        return True

    @staticmethod
    def _ready(record: PoolRecord, now: datetime) -> bool:
        if record.phase != "provisioning":
            return False
        record.phase, record.ready, record.idle_since, record.last_seen = "running", now, now, now
        return True

    @staticmethod
    def _count_idle(pool: DeclaredPool, record: PoolRecord, idle: bool, now: datetime) -> bool:
        if record.phase != "running":
            return False
        if idle and record.idle_since is not None and record.last_seen is not None:
            record.idle_seconds += max(0.0, (now - record.last_seen).total_seconds())
            record.idle_usd = idle_rate_usd(pool.spec) * record.idle_seconds / 3600
        record.idle_since = (record.idle_since or now) if idle else None
        record.last_seen = now
        return True

    def _deleted(self, pool: DeclaredPool, record: PoolRecord, reason: str, error: str | None) -> bool:
        if record.phase == "absent":
            return False
        now = self.clock()
        lived = (now - record.created).total_seconds() if record.created else 0.0
        if reason == "idle":
            message = f"warm pool {pool.pool_id} deleted after {pool.spec.keep_alive} s idle"
        else:
            message = f"warm pool {pool.pool_id} is gone: {error}"
        event = PoolDeleted(
            **self._envelope(pool, record, message),
            reason=reason,
            lived_seconds=round(lived, 3),
            idle_seconds=round(record.idle_seconds, 3),
            idle_usd=round(record.idle_usd, 6),
            error=error,
        )
        record.queue(event, now)
        record.phase, record.idle_since, record.last_seen = "absent", None, None
        return True

    def _envelope(self, pool: DeclaredPool, record: PoolRecord, message: str) -> dict[str, Any]:
        assert self.resources is not None
        name = self.resources.resource_name(pool.pool_id)
        spec = pool.spec
        return {
            "request_id": f"{pool.pool_id}-{record.life}",
            "request_key": f"pool:{name}#{record.life}",
            "time": self.clock(),
            "message": message,
            "trigger": Trigger(kind="cli"),
            "team": pool.team,
            "pool": name,
            "machine_type": spec.machine_type,
            "accelerator_type": spec.accelerator_type,
            "accelerator_count": spec.accelerator_count,
            "replicas": spec.replicas,
            "keep_alive_seconds": spec.keep_alive,
        }

    # --- the record --------------------------------------------------------------------------------------------

    def _change(self, pool: DeclaredPool, change: Callable[[PoolRecord], bool]) -> PoolRecord | None:
        """Apply `change(record) -> changed` by compare-and-swap (None when another writer won: the next tick or
        delivery sees theirs), then publish what it queued."""
        found = self.ledger.read(pool.pool_id)
        record, generation = found if found else (PoolRecord(pool_id=pool.pool_id, team=pool.team), 0)
        queued = set(record.states_queued())
        if not change(record):
            return record
        try:
            self.ledger.write(record, generation)
        except Conflict:
            return None
        if set(record.states_queued()) - queued:
            self._flush(pool, record)
        return record

    def _flush(self, pool: DeclaredPool, record: PoolRecord) -> None:
        """Publish the pool's queued events, then mark them published (a failed mark publishes again: same ce-id)."""
        events: list[JobEvent] = record.due({"pool_created", "pool_deleted"}, self.clock() - timedelta(days=1))
        if not events:
            return
        for event in events:
            self.publisher.publish(event)
            logs.info(f"published {event.state}", pool=pool.pool_id, request_id=event.request_id)
        states: set[str] = {event.state for event in events}
        try:
            found = self.ledger.read(pool.pool_id)
            if found is not None:
                current, generation = found
                current.mark_published(states)
                self.ledger.write(current, generation)
        except Conflict:
            pass  # the next visit publishes them again, under the same ce-ids
