"""The capacity ladder and quota-aware admission on the local stack: the local JobService's capacity model
(stockouts, GPU quotas per region) and its Cloud Quotas stand-in, read by the controller through the real
API path. Guards issue 14 items 2 and 3 (and 4, the model they run on)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud.aiplatform_v1.types import JobState

from functions.cloud.gcs import Gcs
from functions.ledger.keys import key_hash
from functions.ledger.requests import Ledger
from functions.settings import Settings
from local.names import LOCAL_PROJECT
from schemas.errors import parse_request
from tests.integration.deployment import Deployment, fake_node_request
from trainctl.jobs import cancel_queued
from trainctl.plan import ladder_lines, quota_headroom

# V100s for the burst: no other test asks for them, so no job of another module can hold any.
V100_LIMIT, A100_LIMIT, A100_LIMIT_EUROPE = 8, 16, 8
V100 = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 2}
CAPACITY: dict[str, Any] = {
    "regions": {
        "us-central1": {
            "quotas": {
                "custom_model_training_nvidia_v100_gpus": V100_LIMIT,
                "custom_model_training_nvidia_a100_gpus": A100_LIMIT,
            },
            "machines": [
                {"machine_type": "n1-standard-4", "stockouts": "always"},
                # Vertex's three retries are spent before the job first runs: the next loss of capacity ends it.
                {"machine_type": "n1-standard-8", "stockouts": 3},
            ],
        },
        "europe-west4": {
            "quotas": {"custom_model_training_nvidia_a100_gpus": A100_LIMIT_EUROPE},
            "machines": [{"machine_type": "n1-standard-4", "stockouts": "always"}],
        },
    }
}
T4 = {"accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2}
ENDED = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}


@pytest.fixture(scope="module")
def ladder_deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    """A deployment that reads GPU quotas from the stand-in and may run jobs in europe-west4 too."""
    jobservice.control.set_capacity(CAPACITY)
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    deployed.create(tmp_path_factory.mktemp("functions"), TRAINCTL_ALLOWED_REGIONS="europe-west4")
    try:
        yield deployed
    finally:
        deployed.stop()
        jobservice.control.clear_capacity()


def states_seen(events, state: str) -> set[str]:
    """The requests that published `state` so far (one drain of the subscription for all of them)."""
    return {event.request_id for event, _ in events.drain() if event.state == state}


def v100_pool(deployment: Deployment) -> str:
    """trainctl's count of its V100 holdings (a fresh Blob: one that was read once keeps reading that generation)."""
    bucket = deployment.storage().bucket(deployment.control_bucket)
    return bucket.blob("quota/us-central1/custom_model_training_nvidia_v100_gpus.json").download_as_text()


def jobs_of(job_client, prefix: str, region: str = "us-central1") -> list[Any]:
    parent = f"projects/{LOCAL_PROJECT}/locations/{region}"
    found = job_client.list_custom_jobs(request={"parent": parent, "filter": "labels.trainctl_key:*"})
    return [job for job in found if job.labels.get("trainctl_request", "").startswith(prefix)]


def test_a_request_no_rung_of_which_fits_the_quota_is_rejected_at_once_naming_the_metric(ladder_deployment):
    deployment = ladder_deployment
    events = deployment.events()
    eight_a100 = {"machine_type": "a2-highgpu-8g", "replica_count": 3}
    request = fake_node_request(
        "too-big",
        "--sleep",
        "1",
        resources=eight_a100,
        scheduling={"timeout": "1h", "max_attempts": 2},
        fallbacks=[{"region": "europe-west4", "resources": eight_a100}],
    )
    assert deployment.request(request) == 200
    rejected = events.wait_for("too-big", "rejected", timeout=60)
    metric = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
    assert rejected.reason == "quota"
    assert rejected.errors[0].startswith(
        f"resources: needs 24 GPUs of {metric} in us-central1; the project's limit is {A100_LIMIT}."
    )
    assert rejected.errors[1].startswith(
        f"fallbacks[0].resources: needs 24 GPUs of {metric} in europe-west4; the project's limit is "
        f"{A100_LIMIT_EUROPE}."
    )
    assert deployment.record("request:too-big") is None
    assert events.states("too-big") == ["rejected"]


def test_a_rung_that_can_never_fit_is_skipped_and_the_next_one_runs(ladder_deployment, job_client):
    deployment = ladder_deployment
    events = deployment.events()
    request = fake_node_request(
        "skip-big",
        "--sleep",
        "0.5",
        resources={"machine_type": "a2-highgpu-8g", "replica_count": 3},
        scheduling={"timeout": "1h", "max_attempts": 2},
        fallbacks=[{"resources": {"machine_type": "a2-highgpu-2g"}}],
    )
    assert deployment.request(request) == 200
    accepted = events.wait_for("skip-big", "accepted", timeout=60)
    assert [rung.rung for rung in accepted.skipped_rungs] == [0]
    assert "needs 24 GPUs" in accepted.skipped_rungs[0].outcome
    events.wait_for("skip-big", "succeeded", act=deployment.reconcile)
    [job] = jobs_of(job_client, "skip-big")
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == "a2-highgpu-2g"


def test_a_ladder_whose_every_rung_stocks_out_fails_listing_each_rung(ladder_deployment, job_client):
    deployment = ladder_deployment
    events = deployment.events()
    stocked_out = {"machine_type": "n1-standard-4", **T4}
    request = fake_node_request(
        "all-out",
        "--sleep",
        "0.5",
        resources=stocked_out,
        scheduling={"max_attempts": 3},
        fallbacks=[{"region": "europe-west4", "resources": stocked_out}],
    )
    assert deployment.request(request) == 200
    events.wait_for("all-out", "retrying", act=deployment.reconcile, timeout=120)
    [europe_job] = jobs_of(job_client, "all-out", "europe-west4")
    # The log sink's line names the job by id alone: on_job_state finds it in the ladder's other region.
    entry = {
        "resource": {"type": "ml_job", "labels": {"job_id": europe_job.name.rsplit("/", 1)[-1]}},
        "labels": {"ml.googleapis.com/job_state": "FAILED"},
    }
    line = deployment.push_body(json.dumps(entry).encode())
    failed = events.wait_for("all-out", "failed", act=lambda: deployment.post("on_job_state", line), timeout=120)
    assert failed.reason == "capacity"
    assert [(o.rung, o.attempts) for o in failed.rungs] == [(0, 1), (1, 1)]
    assert failed.rungs[0].outcome == "stocked out after Vertex's own retries"
    assert failed.rungs[1].outcome.startswith("failed (capacity)")
    assert "europe-west4" in failed.rungs[1].resources
    retrying = events.of("all-out", "retrying")
    assert [(e.rung, e.left_rung.rung) for e in retrying] == [(1, 0)]
    assert len(jobs_of(job_client, "all-out")) == 1 and len(jobs_of(job_client, "all-out", "europe-west4")) == 1
    assert events.states("all-out").count("failed") == 1


def test_requests_beyond_the_quota_wait_in_trainctl_and_are_released_in_arrival_order(ladder_deployment, job_client):
    """Ten requests of 2 V100 GPUs against a limit of 8: four run, six wait (state queued), released in the
    order they came as jobs end; trainctl never has more than 8 V100 GPUs in jobs that have not ended."""
    deployment = ladder_deployment
    events = deployment.events()
    ids = [f"burst-{index}" for index in range(10)]
    for request_id in ids:
        assert deployment.request(fake_node_request(request_id, "--sleep", "1", resources=V100)) == 200
    queued = [request_id for request_id in ids if request_id in states_seen(events, "queued")]
    assert queued == ids[4:], "the first four fit the quota; the rest wait, in the order they came"
    assert events.of("burst-9", "queued")[0].ahead == 5
    # `trainctl plan --quota` sees the same: the limit from Cloud Quotas, what trainctl's jobs hold of it.
    settings = Settings.from_env(deployment.settings_env())
    [(info, line)] = ladder_lines(
        parse_request(fake_node_request("plan", resources=V100)), settings, quota_headroom(settings)
    )
    assert (info["quota_limit"], info["quota_held"]) == (V100_LIMIT, V100_LIMIT)
    assert line.endswith("quota custom_model_training_nvidia_v100_gpus: limit 8, trainctl holds 8, headroom 0")

    def in_flight() -> list[str]:
        return [job.labels["trainctl_request"] for job in jobs_of(job_client, "burst-") if job.state not in ENDED]

    deadline = time.monotonic() + 120
    while in_flight():  # the first four jobs end; trainctl has not looked yet
        assert time.monotonic() < deadline, in_flight()
        time.sleep(0.3)
    deployment.reconcile()
    started = sorted(job.labels["trainctl_request"] for job in jobs_of(job_client, "burst-"))
    assert started == ids[:8], "one tick sees the four jobs end and lets the next four in line go, in order"

    deadline = time.monotonic() + 200
    while not set(ids) <= states_seen(events, "succeeded"):
        assert time.monotonic() < deadline, {request_id: events.states(request_id) for request_id in ids}
        assert len(in_flight()) * 2 <= V100_LIMIT
        started = {job.labels["trainctl_request"] for job in jobs_of(job_client, "burst-")}
        released = [request_id for request_id in queued if request_id in started]
        assert released == queued[: len(released)], "released out of arrival order"
        deployment.reconcile()
    every = events.drain()
    assert all([e.state for e, _ in every if e.request_id == request_id].count("succeeded") == 1 for request_id in ids)
    assert deployment.record("request:burst-9")["state"] == "succeeded"


def test_a_stocked_out_rung_moves_down_and_the_next_resumes_from_its_checkpoint(
    ladder_deployment, jobservice_control, job_client
):
    """Rung 0 (2 × T4) runs and checkpoints, then loses its capacity after Vertex's retries are spent: the
    ladder moves to rung 1 (2 × A100), whose job resumes from rung 0's checkpoint (the step count goes on)."""
    deployment = ladder_deployment
    events = deployment.events()
    rows = "\n".join(f"{i % 7},{(i * 13) % 11},{int(i % 7 > 3)}" for i in range(1500))
    deployment.upload("ladder-data/part-0.csv", "a,b,y\n" + rows + "\n")
    request = {
        "api_version": "trainctl/v1",
        "request_id": "ladder-resume",
        "dataset": {"uri": f"gs://{deployment.data_bucket}/ladder-data/", "target": "y"},
        "trainer": {
            "builtin": "tabular",
            "hyperparameters": {"epochs": 30, "batch_size": 16, "checkpoint_every_steps": 10, "hidden_sizes": [64]},
        },
        "resources": {"machine_type": "n1-standard-8", **T4},
        "scheduling": {"restart_job_on_worker_restart": False, "max_attempts": 2},
        "fallbacks": [{"resources": {"machine_type": "a2-highgpu-2g"}}],
    }
    assert deployment.request(request) == 200
    job_name = deployment.record("request:ladder-resume")["job_name"]
    checkpoints = deployment.storage().bucket(deployment.control_bucket)
    deadline = time.monotonic() + 180
    while not any(
        b.name.endswith("COMMITTED") for b in checkpoints.list_blobs(prefix="runs/ladder-resume/checkpoints/")
    ):
        assert time.monotonic() < deadline, "rung 0 never committed a checkpoint"
        time.sleep(0.2)
    jobservice_control.preempt(job_name)

    succeeded = events.wait_for("ladder-resume", "succeeded", act=deployment.reconcile, timeout=240)
    [retrying] = events.of("ladder-resume", "retrying")
    assert (retrying.rung, retrying.left_rung.outcome) == (1, "stocked out after Vertex's own retries")
    assert succeeded.attempt == 2
    assert succeeded.metrics["resumed_from_step"] >= 10, "rung 1 started from rung 0's checkpoint"
    assert job_client.get_custom_job(name=job_name).state == JobState.JOB_STATE_FAILED
    second = deployment.record("request:ladder-resume")["job_name"]
    assert job_client.get_custom_job(name=second).job_spec.worker_pool_specs[0].machine_spec.machine_type == (
        "a2-highgpu-2g"
    )


def test_a_wait_in_trainctls_queue_longer_than_the_rungs_max_pending_moves_down_the_ladder(ladder_deployment):
    deployment = ladder_deployment
    events = deployment.events()
    filler = fake_node_request("v100-filler", "--sleep", "5", resources=V100 | {"replica_count": 4})
    assert deployment.request(filler) == 200
    request = fake_node_request(
        "queue-then-move",
        "--sleep",
        "0.5",
        resources=V100,
        scheduling={"max_pending": 1, "max_attempts": 2},  # the shortest wait a request may name
        fallbacks=[{"resources": {"machine_type": "a2-highgpu-2g"}}],
    )
    assert deployment.request(request) == 200
    assert events.of("queue-then-move", "queued")[0].held == V100_LIMIT
    # Reconcile ticks from the start: the ones within max_pending leave the request queued (the filler holds the
    # quota for 5 s), and a tick after it moves the request down; no sleep past max_pending is needed.
    retrying = events.wait_for("queue-then-move", "retrying", act=deployment.reconcile, timeout=60)
    assert (retrying.reason, retrying.rung) == ("quota", 1)
    assert retrying.left_rung.outcome.startswith("waited ") and "in trainctl's queue for GPU quota" in (
        retrying.left_rung.outcome
    )
    submitted = events.wait_for("queue-then-move", "submitted", timeout=30)
    assert submitted.attempt == 2
    events.wait_for("queue-then-move", "succeeded", act=deployment.reconcile, timeout=120)


def test_a_queued_request_can_be_cancelled_before_it_has_a_job(ladder_deployment):
    """`trainctl cancel` of a request waiting for quota: reconcile ends it (`cancelled`) and it waits no more."""
    deployment = ladder_deployment
    events = deployment.events()
    filler = fake_node_request("v100-filler-2", "--sleep", "5", resources=V100 | {"replica_count": 4})
    assert deployment.request(filler) == 200
    assert deployment.request(fake_node_request("cancel-queued", "--sleep", "0.5", resources=V100)) == 200
    assert deployment.record("request:cancel-queued")["state"] == "queued"
    assert key_hash("request:cancel-queued") in v100_pool(deployment)
    assert cancel_queued(Ledger(Gcs(LOCAL_PROJECT), deployment.control_bucket), "cancel-queued")
    cancelled = events.wait_for("cancel-queued", "cancelled", act=deployment.reconcile, timeout=60)
    assert cancelled.reason is None and "while it waited for GPU quota" in cancelled.message
    assert key_hash("request:cancel-queued") not in v100_pool(deployment)
    assert deployment.record("request:cancel-queued")["state"] == "cancelled"
    assert events.states("cancel-queued") == ["accepted", "queued", "cancelled"]


def test_plan_quota_says_a_gpu_without_a_listed_limit_is_not_gated_and_logs_nothing(ladder_deployment, capsys):
    """Guards issue 28, point 5: `trainctl plan --quota` said `unknown` for a GPU the capacity model leaves
    unlimited (the stand-in lists no quota for it), and the lookup printed JSON warning lines among the plan."""
    settings = Settings.from_env(ladder_deployment.settings_env())
    request = parse_request(fake_node_request("plan-t4", resources={"machine_type": "n1-standard-16", **T4}))

    [(info, line)] = ladder_lines(request, settings, quota_headroom(settings))

    assert capsys.readouterr().out == ""
    assert info["quota_limit"] is None
    assert line.endswith(
        "quota custom_model_training_nvidia_t4_gpus: no limit listed (CustomModelTrainingT4GPUsPerProjectPerRegion "
        "is not in Cloud Quotas), not gated; trainctl holds 0"
    )
