"""Reservation rungs on the local stack (issue 43, points 1 and 4): the capacity file's reservations, served by the
local JobService's reservations.get stand-in, read by the controller's adapter at admission through the real API path.

Acceptance: a ladder of reserved → Spot → on-demand uses the reservation until it is full, then moves down; a shape
that does not match the reservation is refused at admission naming the rule."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.types import JobState

from functions.cloud.reservations import ComputeReservations
from local.names import LOCAL_PROJECT
from tests.integration.deployment import Deployment, fake_node_request

ZONE = "us-central1-a"
RESERVATION = f"projects/{LOCAL_PROJECT}/zones/{ZONE}/reservations/a2-res"
CAPACITY: dict[str, Any] = {
    "regions": {
        # On-demand A2 machines are stocked out for ever: only the reservation (or Spot) can run them.
        "us-central1": {"machines": [{"machine_type": "a2-highgpu-2g", "strategy": "standard", "stockouts": "always"}]}
    },
    "reservations": {
        "a2-res": {"project": LOCAL_PROJECT, "zone": ZONE, "machine_type": "a2-highgpu-2g", "count": 2},
    },
}
A2 = {"machine_type": "a2-highgpu-2g"}
RESERVED = A2 | {"reservation": {"affinity": "specific", "name": "a2-res", "zone": ZONE}}
LADDER = {
    "resources": RESERVED,
    "scheduling": {"timeout": "1h", "max_attempts": 3},
    "fallbacks": [{"strategy": "spot", "resources": A2}, {"resources": A2}],
}
ENDED = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}


@pytest.fixture(scope="module")
def reserved_deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    jobservice.control.set_capacity(CAPACITY)
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    deployed.create(tmp_path_factory.mktemp("functions"))
    try:
        yield deployed
    finally:
        deployed.stop()
        jobservice.control.clear_capacity()


def jobs_of(job_client, request_id: str) -> list[Any]:
    parent = f"projects/{LOCAL_PROJECT}/locations/us-central1"
    found = job_client.list_custom_jobs(request={"parent": parent, "filter": "labels.trainctl_key:*"})
    return [job for job in found if job.labels.get("trainctl_request") == request_id]


def running(job_client, request_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        jobs = jobs_of(job_client, request_id)
        if jobs and jobs[0].state == JobState.JOB_STATE_RUNNING:
            return jobs[0]
        assert time.monotonic() < deadline, [job.state for job in jobs]
        time.sleep(0.3)


def test_a_reserved_ladder_uses_the_reservation_until_it_is_full_then_moves_down(reserved_deployment, job_client):
    deployment = reserved_deployment
    events = deployment.events()
    reservations = ComputeReservations(deployment.vertex_endpoint)
    assert (reservations.get(RESERVATION).count, reservations.get(RESERVATION).in_use) == (2, 0)
    on_reservation = []
    for request_id in ("res-a", "res-b"):
        assert deployment.request(fake_node_request(request_id, "--sleep", "20", **LADDER)) == 200
        accepted = events.wait_for(request_id, "accepted", timeout=60)
        assert accepted.skipped_rungs == [] or accepted.skipped_rungs is None
        job = running(job_client, request_id)  # never stocked out: its machines are reserved
        on_reservation.append(job)
    assert reservations.get(RESERVATION).in_use == 2
    for job in on_reservation:
        affinity = job.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity
        assert list(affinity.values) == [RESERVATION] and affinity.key == "compute.googleapis.com/reservation-name"
        assert job.job_spec.scheduling.strategy.name == "STANDARD"
    # The reservation is full: the third request's reserved rung is skipped, and it runs on Spot.
    assert deployment.request(fake_node_request("res-c", "--sleep", "0.5", **LADDER)) == 200
    accepted = events.wait_for("res-c", "accepted", timeout=60)
    assert [rung.rung for rung in accepted.skipped_rungs] == [0]
    assert accepted.skipped_rungs[0].outcome == (
        f"reservation {RESERVATION} is full: 2 of its 2 VMs in use, this rung needs 1"
    )
    events.wait_for("res-c", "succeeded", act=deployment.reconcile, timeout=120)
    [spot] = jobs_of(job_client, "res-c")
    assert spot.job_spec.scheduling.strategy.name == "SPOT"
    assert not spot.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity.values
    for request_id in ("res-a", "res-b"):
        events.wait_for(request_id, "succeeded", act=deployment.reconcile, timeout=120)
    assert reservations.get(RESERVATION).in_use == 0


def test_a_shape_that_does_not_match_the_reservation_is_refused_at_admission_naming_the_rule(reserved_deployment):
    deployment = reserved_deployment
    events = deployment.events()
    other = {"machine_type": "a2-highgpu-1g", "replica_count": 2, "reservation": RESERVED["reservation"]}
    assert deployment.request(fake_node_request("res-shape", resources=other)) == 200
    rejected = events.wait_for("res-shape", "rejected", timeout=60)
    assert rejected.errors == [
        f"resources.reservation: reservation {RESERVATION} holds a2-highgpu-2g with 2 × NVIDIA_TESLA_A100; this rung "
        "asks for a2-highgpu-1g with 1 × NVIDIA_TESLA_A100; Vertex uses a reservation only for the exact machine shape"
    ]
    assert deployment.record("request:res-shape") is None


def test_a_reservation_that_does_not_exist_is_a_refusal_not_a_retry_loop(reserved_deployment):
    deployment = reserved_deployment
    events = deployment.events()
    missing = A2 | {"reservation": {"affinity": "specific", "name": "no-such-res", "zone": ZONE}}
    assert deployment.request(fake_node_request("res-missing", resources=missing)) == 200
    rejected = events.wait_for("res-missing", "rejected", timeout=60)
    assert rejected.errors[0].startswith(
        f"resources.reservation: reservation projects/{LOCAL_PROJECT}/zones/{ZONE}/reservations/no-such-res does "
        "not exist"
    )


def test_the_local_vertex_refuses_a_job_of_another_shape_on_a_reservation(reserved_deployment, job_client):
    """What CreateCustomJob answers for a machine spec that does not match the reservation it names."""
    pool = {
        "machine_spec": {
            "machine_type": "a2-highgpu-1g",
            "accelerator_type": "NVIDIA_TESLA_A100",
            "accelerator_count": 1,
            "reservation_affinity": {
                "reservation_affinity_type": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": [RESERVATION],
            },
        },
        "replica_count": 1,
        "container_spec": {"image_uri": "localhost/tests/fake-node:1"},
    }
    parent = f"projects/{LOCAL_PROJECT}/locations/us-central1"
    job = {"display_name": "shape", "job_spec": {"worker_pool_specs": [pool]}}
    with pytest.raises(exceptions.InvalidArgument) as refused:
        job_client.create_custom_job(parent=parent, custom_job=job)
    assert refused.value.grpc_status_code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"does not match reservation {RESERVATION}" in refused.value.message
