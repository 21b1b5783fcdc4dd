"""Warm pools end to end on the local stack (issue 43, points 2 and 4): the team's pool is a persistent resource in
the local PersistentResourceService, created by reconcile when a request of its shape arrives, taking the team's later
jobs of that shape without the capacity model's cold-provisioning delay, and deleted after keep_alive idle, its idle
time in the team's budget.

Acceptance: a burst runs on a warm pool that trainctl creates and later deletes, and the team's budget shows its idle
time. Nothing here asserts how fast anything went: only that the cold job was held for the configured delay and the
jobs on the pool were not, what names what, and the pool's life in events."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from functions.capacity.warm_pools import pool_id
from functions.cloud.persistent_resources import PersistentResources
from functions.teams import WarmPool
from local.names import LOCAL_PROJECT, LOCAL_REGION
from schemas.events import PoolCreated, PoolDeleted, Succeeded
from tests.integration.deployment import TRAINER_STAND_IN, Deployment, builtin_request, serving

COLD_SECONDS = 4  # the capacity model's provisioning delay for cold nodes
SHAPE = {"machine_type": "g2-standard-24"}  # 2 × L4: a one-node job is a valid request
POOL = {**SHAPE, "replicas": 2, "keep_alive": "10s"}
# The team reads the stand-in's dataset folders (builtin_request writes them under stand-in/).
TEAMS = {
    "default_team": "ml",
    "teams": {"ml": {"warm_pools": [POOL], "reads": ["stand-in/"]}},
    "shared_intake_open": True,
}


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    try:
        with serving(
            jobservice,
            tmp_path_factory.mktemp("functions"),
            capacity={"provisioning": COLD_SECONDS},
            settings_for=teams_setting,
            TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN,
        ) as deployed:
            yield deployed
    finally:
        jobservice.control.clear_capacity()


def teams_setting(deployment: Deployment) -> dict[str, str]:
    return {"TRAINCTL_TEAMS": json.dumps(TEAMS | {"data_bucket": deployment.data_bucket})}


def run(deployment: Deployment, *request_ids: str, **resources: str) -> list[Succeeded]:
    events = deployment.events()
    for request_id in request_ids:
        document = builtin_request(deployment, request_id, "--sleep", "1", "--steps", "5", "--metrics", "{}",
                                   resources=SHAPE | resources)  # fmt: skip
        assert deployment.request(document) == 200
    done = [events.wait_for(r, "succeeded", timeout=120, act=deployment.reconcile) for r in request_ids]
    assert all(isinstance(e, Succeeded) for e in done)
    return done  # type: ignore[return-value]


def job_of(job_client: Any, request_id: str) -> Any:
    parent = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
    jobs = job_client.list_custom_jobs(request={"parent": parent, "filter": "labels.trainctl_key:*"})
    (job,) = [job for job in jobs if job.labels.get("trainctl_request") == request_id]
    return job


def provisioning(job: Any) -> float:
    return (job.start_time - job.create_time).total_seconds()


def test_a_burst_runs_on_a_warm_pool_trainctl_creates_and_deletes_and_the_team_pays_its_idle_time(
    deployment, job_client, monkeypatch
):
    pid = pool_id(deployment.control_bucket, "ml", WarmPool.model_validate(POOL))
    resources = PersistentResources(LOCAL_PROJECT, LOCAL_REGION, deployment.vertex_endpoint)
    events = deployment.events()

    # The first request of the shape runs cold (held the capacity model's delay) and asks for the pool.
    run(deployment, "wp-first")
    first = job_of(job_client, "wp-first")
    assert first.job_spec.persistent_resource_id == "" and provisioning(first) >= COLD_SECONDS
    created = events.wait_for(f"{pid}-1", "pool_created", act=deployment.reconcile)
    assert isinstance(created, PoolCreated) and (created.team, created.demand, created.replicas) == (
        "ml",
        "wp-first",
        2,
    )

    # Once Vertex says RUNNING (after the same cold delay: the pool's nodes are provisioned once), reconcile opens it.
    deadline = time.monotonic() + 60
    while (state := resources.get(pid)) is None or state.state != "RUNNING" or not _phase_running(deployment, pid):
        assert time.monotonic() < deadline, state
        deployment.reconcile()
        time.sleep(0.5)

    # The burst runs on the pool: its jobs name it and skip the cold delay.
    run(deployment, "wp-a", "wp-b")
    for request_id in ("wp-a", "wp-b"):
        job = job_of(job_client, request_id)
        assert job.job_spec.persistent_resource_id == pid
        assert provisioning(job) < COLD_SECONDS

    # Idle for keep_alive: deleted, its idle time charged to the team and shown with its budget.
    deleted = events.wait_for(f"{pid}-1", "pool_deleted", timeout=90, act=deployment.reconcile)
    assert isinstance(deleted, PoolDeleted) and deleted.reason == "idle"
    assert deleted.idle_seconds > 0 and deleted.idle_usd > 0
    assert resources.get(pid) is None
    monkeypatch.setenv("TRAINCTL_TEAMS", teams_setting(deployment)["TRAINCTL_TEAMS"])
    report = json.loads(deployment.cli(monkeypatch, "report", "--by", "team", "--json"))
    assert report["budgets"]["ml"]["pool_idle_seconds"] == pytest.approx(deleted.idle_seconds, abs=0.1)
    assert report["budgets"]["ml"]["pool_idle_usd"] == pytest.approx(deleted.idle_usd, abs=0.01)


def _phase_running(deployment: Deployment, pid: str) -> bool:
    blob = deployment.storage().bucket(deployment.control_bucket).blob(f"warm-pools/{pid}.json")
    return blob.exists() and json.loads(blob.download_as_bytes())["phase"] == "running"


def test_a_rung_runs_on_a_persistent_resource_it_names_and_one_it_cannot_run_on_is_refused_at_admission(
    deployment, job_client
):
    from functions.capacity.persistent import RULE
    from functions.capacity.warm_pools import DeclaredPool, resource_body

    resources = PersistentResources(LOCAL_PROJECT, LOCAL_REGION, deployment.vertex_endpoint)
    # A cluster the team runs itself, of the shape its warm pool would be (built as trainctl builds a pool).
    body = resource_body(DeclaredPool("ml", WarmPool.model_validate(POOL), "team-cluster"))
    assert resources.create("team-cluster", body)
    try:
        deadline = time.monotonic() + 60
        while (state := resources.get("team-cluster")) is None or state.state != "RUNNING":
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        run(deployment, "pr-own", persistent_resource="team-cluster")
        job = job_of(job_client, "pr-own")
        assert job.job_spec.persistent_resource_id == "team-cluster" and provisioning(job) < COLD_SECONDS

        events = deployment.events()
        other = {"machine_type": "g2-standard-12", "replica_count": 2, "persistent_resource": "team-cluster"}
        document = builtin_request(deployment, "pr-other", "--sleep", "1", resources=other)
        assert deployment.request(document) == 200
        rejected = events.wait_for("pr-other", "rejected")
        assert rejected.errors and all(RULE in error for error in rejected.errors), rejected.errors
        assert rejected.errors[0].startswith("resources.persistent_resource: worker pool 0 (g2-standard-12")
    finally:
        resources.delete("team-cluster")
