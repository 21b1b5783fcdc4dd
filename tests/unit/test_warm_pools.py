"""Warm pools (issue 43, point 2; functions/capacity/warm_pools.py) on the in-memory Cloud Storage, with Vertex's
PersistentResourceService stood in (the local stack's real one is tests/integration/test_warm_pools.py's): which jobs
a pool takes, routing only to a RUNNING pool, creation on demand, idle time charged to the team's budget, deletion
after keep_alive and never under a job just routed, each event once per pool life."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.capacity.warm_pools import WarmPools, declared_pools, matching_pool, pool_id, resource_body
from functions.cloud.pool_state import PoolState
from functions.jobs.planning import plan_custom_job
from functions.ledger.budget_records import BudgetRecords
from functions.ledger.pool_records import PoolLedger
from functions.settings import Settings
from functions.teams import Teams, WarmPool
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_record, make_request
from tests.unit.controller_harness import MemoryPublisher

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)
POOL = {"machine_type": "g2-standard-12", "replicas": 4, "keep_alive": "5m"}
L4 = {"machine_type": "g2-standard-12", "replica_count": 2}


@dataclass
class StandInResources:
    """Vertex's PersistentResourceService as the pools see it: what exists, in what state, how many nodes are used."""

    pools: dict[str, PoolState] = field(default_factory=dict)
    created: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def resource_name(self, resource_id: str) -> str:
        return f"projects/proj/locations/us-central1/persistentResources/{resource_id}"

    def get(self, resource_id: str) -> PoolState | None:
        return self.pools.get(resource_id)

    def create(self, resource_id: str, body: dict[str, Any]) -> bool:
        self.created.append((resource_id, body))
        if resource_id in self.pools:
            return False
        replicas = int(body["resourcePools"][0]["replicaCount"])
        self.pools[resource_id] = PoolState(self.resource_name(resource_id), "PROVISIONING", replicas, 0)
        return True

    def delete(self, resource_id: str) -> bool:
        self.deleted.append(resource_id)
        return self.pools.pop(resource_id, None) is not None

    def set(self, resource_id: str, **changes: Any) -> None:
        self.pools[resource_id] = dataclasses.replace(self.pools[resource_id], **changes)


@pytest.fixture
def team_settings(settings: Settings) -> Settings:
    teams = Teams.model_validate(
        {"default_team": "vision", "teams": {"vision": {"warm_pools": [POOL]}, "nlp": {}}, "shared_intake_open": True}
    )
    return dataclasses.replace(settings, teams=teams)


class Harness:
    def __init__(self, settings: Settings):
        self.now = NOW
        self.gcs = MemoryGcs()
        self.resources = StandInResources()
        self.publisher = MemoryPublisher()
        self.budgets = BudgetRecords(self.gcs, settings.control_bucket)
        self.settings = settings
        self.pools = WarmPools(settings, self.gcs, self.resources, self.publisher, self.budgets, lambda: self.now)
        (self.pool,) = declared_pools(settings)

    def submit(self, team: str = "vision", request_id: str = "r1", **resources: Any) -> str | None:
        request = make_request(resources=resources or L4)
        plan = plan_custom_job(request, self.settings, f"request:{request_id}")
        routed = self.pools.route(make_record(team=team, request_id=request_id), request, plan)
        assert plan.custom_job["job_spec"].get("persistent_resource_id") == routed
        return routed

    def tick(self, seconds: float = 0) -> dict[str, int]:
        self.now += timedelta(seconds=seconds)
        return self.pools.reconcile()

    def record(self):
        found = PoolLedger(self.gcs, self.settings.control_bucket).read(self.pool.pool_id)
        assert found is not None
        return found[0]

    def idle_charged(self) -> tuple[float, float]:
        month = self.budgets.figures("vision", "2026-11")
        return month.idle_seconds(), month.idle_usd()

    def running(self) -> None:
        """Demand, creation, provisioning, RUNNING: the pool up and idle."""
        assert self.submit() is None
        assert self.tick() == {"pools_created": 1}
        self.resources.set(self.pool.pool_id, state="RUNNING")
        assert self.tick(30) == {}
        assert self.record().phase == "running"


def test_a_pool_takes_a_job_of_its_exact_shape_of_its_own_team_only(team_settings):
    (pool,) = declared_pools(team_settings)

    def match(team: str = "vision", **sections: Any) -> bool:
        request = make_request(**({"resources": L4} | sections))
        return matching_pool(request, plan_custom_job(request, team_settings, "k"), team, team_settings) is not None

    assert match()
    assert not match(team="nlp")
    assert not match(resources={**L4, "replica_count": 5})  # more nodes than the pool holds
    assert not match(resources={**L4, "boot_disk": {"size_gb": 200}})  # another boot disk: Vertex would refuse it
    assert not match(resources={"machine_type": "g2-standard-24", "replica_count": 1})  # another machine
    assert not match(scheduling={"strategy": "spot"})  # Spot machines are not the pool's
    assert match(resources={**L4, "replica_count": 4})
    assert len(pool.pool_id) <= 63 and pool.pool_id == pool_id(team_settings.control_bucket, "vision", pool.spec)


def test_the_pool_is_made_with_the_machine_and_disk_a_job_of_its_shape_is_planned_with(team_settings):
    (pool,) = declared_pools(team_settings)
    body = resource_body(pool)
    request = make_request(resources=L4)
    worker = plan_custom_job(request, team_settings, "k").custom_job["job_spec"]["worker_pool_specs"][0]
    (resource_pool,) = body["resourcePools"]
    assert resource_pool["replicaCount"] == "4"
    assert resource_pool["machineSpec"] == {
        "machineType": worker["machine_spec"]["machine_type"],
        "acceleratorType": worker["machine_spec"]["accelerator_type"],
        "acceleratorCount": worker["machine_spec"]["accelerator_count"],
    }
    assert resource_pool["diskSpec"]["bootDiskSizeGb"] == worker["disk_spec"]["boot_disk_size_gb"]
    assert resource_pool["diskSpec"].get("bootDiskType") == worker["disk_spec"].get("boot_disk_type")


def test_a_warm_pool_is_declared_with_bounds_and_one_per_shape():
    with pytest.raises(ValueError, match="keep_alive"):
        WarmPool.model_validate({**POOL, "keep_alive": "5s"})
    with pytest.raises(ValueError, match="one pool per shape"):
        Teams.model_validate({"default_team": "a", "teams": {"a": {"warm_pools": [POOL, {**POOL, "replicas": 2}]}}})
    assert WarmPool.model_validate(POOL).accelerator_type == "NVIDIA_L4"  # the machine's own GPU filled in


def test_the_first_request_notes_demand_and_runs_cold_then_later_ones_run_on_the_pool(team_settings):
    h = Harness(team_settings)
    assert h.submit() is None  # absent: this job runs as it would have
    assert h.record().demand == "r1" and h.resources.created == []
    assert h.tick() == {"pools_created": 1}
    assert [e.state for e in h.publisher.events] == ["pool_created"]
    (created,) = h.publisher.events
    assert created.demand == "r1" and created.team == "vision" and created.request_id == f"{h.pool.pool_id}-1"
    assert h.submit(request_id="r2") is None  # provisioning: not yet
    h.resources.set(h.pool.pool_id, state="RUNNING")
    h.tick(30)
    assert h.submit(request_id="r3") == h.pool.pool_id
    assert h.submit(team="nlp", request_id="r4") is None
    assert h.tick() == {} and [e.state for e in h.publisher.events] == ["pool_created"]  # once per life


def test_idle_time_is_charged_to_the_team_and_the_pool_is_deleted_after_keep_alive(team_settings):
    h = Harness(team_settings)
    h.running()
    h.tick(60)
    assert h.idle_charged()[0] == 60
    h.resources.set(h.pool.pool_id, used_replicas=2)  # a job on it: not idle
    h.tick(120)
    assert h.idle_charged()[0] == 60 and h.record().idle_since is None
    h.resources.set(h.pool.pool_id, used_replicas=0)
    h.tick(60)  # idle again from here
    assert h.tick(299) == {} and h.resources.deleted == []
    assert h.tick(1) == {"pools_deleted": 1}
    assert h.resources.deleted == [h.pool.pool_id]
    seconds, usd = h.idle_charged()
    assert seconds == 60 + 300 and usd == pytest.approx(h.record().idle_usd) and usd > 0
    deleted = h.publisher.events[-1]
    assert deleted.state == "pool_deleted" and deleted.reason == "idle" and deleted.idle_seconds == seconds
    assert h.record().phase == "absent"
    assert h.submit(request_id="r9") is None and h.tick() == {"pools_created": 1}  # a second life
    assert h.publisher.events[-1].request_id == f"{h.pool.pool_id}-2"
    assert h.idle_charged()[0] == seconds  # the first life's charge stays


def test_a_job_routed_to_an_idle_pool_keeps_it_alive_for_another_keep_alive(team_settings):
    h = Harness(team_settings)
    h.running()
    h.tick(250)
    assert h.submit(request_id="late") == h.pool.pool_id  # routed; Vertex has not started it yet (0 nodes used)
    assert h.tick(100) == {}  # idle 350 s, but the routing was 100 s ago
    assert h.tick(200) == {"pools_deleted": 1}


def test_a_pool_vertex_could_not_provision_is_deleted_and_said_so(team_settings):
    h = Harness(team_settings)
    h.submit()
    h.tick()
    h.resources.set(h.pool.pool_id, state="ERROR", error="no capacity for g2-standard-12")
    assert h.tick(30) == {"pools_deleted": 1}
    deleted = h.publisher.events[-1]
    assert deleted.reason == "failed" and deleted.error == "no capacity for g2-standard-12"
    assert h.resources.deleted == [h.pool.pool_id] and h.record().phase == "absent"


def test_creating_again_after_a_lost_record_write_finds_the_first_pool(team_settings):
    h = Harness(team_settings)
    h.submit()
    h.resources.create(h.pool.pool_id, resource_body(h.pool))  # an earlier tick made it, then died before its write
    assert h.tick() == {"pools_created": 1}
    assert len(h.resources.pools) == 1 and [e.state for e in h.publisher.events] == ["pool_created"]


# --- a rung that names a persistent resource (resources.persistent_resource) -----------------------------------


def _shape(machine: str = "g2-standard-12", gpus: int = 1, disk: str | None = None, replicas: int = 4):
    from functions.cloud.pool_state import ResourcePoolShape

    return ResourcePoolShape(machine, "NVIDIA_L4", gpus, disk, replicas)


def test_a_named_persistent_resource_is_refused_with_spot_a_reservation_or_another_region():
    from schemas.errors import RequestInvalid, parse_request
    from tests.unit.conftest import BASE_REQUEST

    def errors(**sections: Any) -> str:
        with pytest.raises(RequestInvalid) as refused:
            parse_request(BASE_REQUEST | sections)
        return str(refused.value)

    named = {**L4, "persistent_resource": "my-cluster"}
    assert "a spot rung cannot" in errors(resources=named, scheduling={"strategy": "spot"})
    reservation = {"affinity": "specific", "name": "r", "zone": "us-central1-a"}
    assert "not both" in errors(resources={**named, "reservation": reservation})
    assert "cannot name another region" in errors(
        resources=L4, fallbacks=[{"region": "europe-west4", "resources": named}]
    )
    assert "persistent_resource" in errors(resources={**L4, "persistent_resource": "Bad_Id"})


def test_a_named_persistent_resource_is_the_jobs_and_never_a_warm_pools(team_settings):
    request = make_request(resources={**L4, "persistent_resource": "my-cluster"})
    plan = plan_custom_job(request, team_settings, "k")
    assert plan.custom_job["job_spec"]["persistent_resource_id"] == "my-cluster"
    assert matching_pool(request, plan, "vision", team_settings) is None


def test_admission_refuses_a_persistent_resource_vertex_would_not_run_the_job_on(settings):
    from functions.capacity.persistent import RULE, persistent_problems

    resources = StandInResources()
    request = make_request(resources={**L4, "persistent_resource": "my-cluster"})
    assert persistent_problems(request, resources, settings) == [
        "resources.persistent_resource: projects/proj/locations/us-central1/persistentResources/my-cluster does not "
        "exist (a persistent resource is of the deployment's region)"
    ]
    name = resources.resource_name("my-cluster")
    resources.pools["my-cluster"] = PoolState(name, "RUNNING", 4, 0, pools=(_shape(),))
    assert persistent_problems(request, resources, settings) == []
    for pools in ((_shape(machine="g2-standard-24", gpus=2),), (_shape(disk="pd-standard"),)):
        resources.pools["my-cluster"] = PoolState(name, "RUNNING", 4, 0, pools=pools)
        errors = persistent_problems(request, resources, settings)
        assert [e.split(" (")[0] for e in errors] == [f"resources.persistent_resource: worker pool {i}" for i in (0, 1)]
        assert errors[0].startswith(
            "resources.persistent_resource: worker pool 0 (g2-standard-12 with 1 × NVIDIA_L4, pd-ssd) matches none"
        ) and errors[0].endswith(RULE)
    # The job's two worker pools (its chief, its other node) share the one pool of their shape: 2 nodes of it.
    resources.pools["my-cluster"] = PoolState(name, "RUNNING", 1, 0, pools=(_shape(replicas=1),))
    assert persistent_problems(request, resources, settings) == [
        f"resources.persistent_resource: the job needs 2 nodes of {name}'s pool (g2-standard-12 with 1 × NVIDIA_L4, "
        f"the default disk, up to 1 nodes); {RULE}"
    ]
    resources.pools["my-cluster"] = PoolState(name, "STOPPING", 4, 0, pools=(_shape(),))
    assert "is being deleted" in persistent_problems(request, resources, settings)[0]
