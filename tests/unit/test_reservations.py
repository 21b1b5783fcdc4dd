"""Reservation rungs (issue 43, point 1): the request's `resources.reservation` rules, the CustomJob's
machine_spec.reservation_affinity, the cost of a reserved rung, and what `trainctl plan` shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from google.cloud.aiplatform_v1 import CustomJob, ReservationAffinity

from functions.intake.delivery import spec_hash
from functions.jobs.planning import RESERVATION_NAME_KEY, plan_custom_job
from schemas.errors import RequestInvalid
from tests.unit.conftest import make_request

ROOT = Path(__file__).parents[2]
KEY = "request:churn-1"
SPECIFIC = {"affinity": "specific", "name": "a2-res", "zone": "us-central1-a"}
RESERVED = {"machine_type": "a2-highgpu-2g", "reservation": SPECIFIC}


def problems(**sections) -> list[str]:
    with pytest.raises(RequestInvalid) as refused:
        make_request(**sections)
    return [str(error) for error in refused.value.errors]


def test_a_specific_reservation_needs_its_name_and_zone_and_any_takes_neither():
    found = problems(resources={"machine_type": "a2-highgpu-2g", "reservation": {"affinity": "specific"}})
    assert any(p.startswith("resources.reservation.name: required with affinity `specific`") for p in found), found
    assert any(p.startswith("resources.reservation.zone: required with affinity `specific`") for p in found), found
    found = problems(resources={"machine_type": "a2-highgpu-2g", "reservation": {"affinity": "any", "name": "r"}})
    assert found == ["resources.reservation.name: only with affinity `specific`"], found


def test_a_reservation_is_refused_on_a_spot_or_flex_start_rung():
    found = problems(resources=RESERVED, scheduling={"strategy": "spot", "max_attempts": 3})
    assert any(p.startswith("resources.reservation: a reservation holds on-demand VMs") for p in found), found
    found = problems(fallbacks=[{"strategy": "flex_start", "resources": RESERVED}])
    assert any(p.startswith("fallbacks[0].resources.reservation: a reservation holds on-demand VMs") for p in found)


def test_the_reservations_zone_must_be_in_the_rungs_region():
    found = problems(fallbacks=[{"region": "europe-west4", "resources": RESERVED}])
    assert "fallbacks[0].resources.reservation.zone: us-central1-a is not in the rung's region europe-west4" in found


def test_a_request_without_a_reservation_keeps_its_spec_hash():
    """The hash a record keeps is unchanged by the new field, on a fallback's resources too (_LATER_DEFAULTS; the
    request's own resources: test_model_block's pinned hash). The figure is what trainctl computed before issue 43."""
    plain = make_request(fallbacks=[{"strategy": "spot", "resources": {"machine_type": "a2-highgpu-2g"}}])
    assert spec_hash(plain) == "b08c7b9b66a92013fc074ccce2d79a0b1d884534091ae208d0f5666cab814431"
    assert spec_hash(make_request(resources=RESERVED)) != spec_hash(make_request())


def test_a_specific_reservation_is_named_in_every_gpu_pool_by_its_full_resource_name(settings):
    request = make_request(resources=RESERVED | {"replica_count": 2})
    plan = plan_custom_job(request, settings, KEY)
    pools = plan.custom_job["job_spec"]["worker_pool_specs"]
    affinity = {
        "reservation_affinity_type": "SPECIFIC_RESERVATION",
        "key": RESERVATION_NAME_KEY,
        "values": ["projects/proj/zones/us-central1-a/reservations/a2-res"],
    }
    gpu_pools = [pool for pool in pools if "accelerator_type" in pool["machine_spec"]]
    assert len(gpu_pools) == 2 and all(pool["machine_spec"]["reservation_affinity"] == affinity for pool in gpu_pools)
    assert all("reservation_affinity" not in pool["machine_spec"] for pool in pools if pool not in gpu_pools)
    job = CustomJob.from_json(json.dumps(plan.custom_job))  # Vertex's own message takes it
    spec = job.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity
    assert spec.reservation_affinity_type == ReservationAffinity.Type.SPECIFIC_RESERVATION
    assert list(spec.values) == ["projects/proj/zones/us-central1-a/reservations/a2-res"]


def test_a_shared_reservation_names_its_owner_project_and_any_names_nothing(settings):
    shared = make_request(resources={"machine_type": "a2-highgpu-2g", "reservation": SPECIFIC | {"project": "owner-1"}})
    spec = plan_custom_job(shared, settings, KEY).custom_job["job_spec"]["worker_pool_specs"][0]["machine_spec"]
    assert spec["reservation_affinity"]["values"] == ["projects/owner-1/zones/us-central1-a/reservations/a2-res"]
    anyone = make_request(resources={"machine_type": "a2-highgpu-2g", "reservation": {"affinity": "any"}})
    spec = plan_custom_job(anyone, settings, KEY).custom_job["job_spec"]["worker_pool_specs"][0]["machine_spec"]
    assert spec["reservation_affinity"] == {"reservation_affinity_type": "ANY_RESERVATION"}
    plain = plan_custom_job(make_request(), settings, KEY).custom_job["job_spec"]["worker_pool_specs"][0]
    assert "reservation_affinity" not in plain["machine_spec"]


def test_a_reserved_rungs_gpus_are_already_paid(settings):
    reserved = plan_custom_job(make_request(resources=RESERVED), settings, KEY).cost
    on_demand = plan_custom_job(make_request(), settings, KEY).cost
    assert reserved.reserved is True and reserved.hourly_usd == 0 and reserved.gpus == on_demand.gpus == 2
    assert on_demand.reserved is False and on_demand.hourly_usd > 0
    anyone = make_request(resources={"machine_type": "a2-highgpu-2g", "reservation": {"affinity": "any"}})
    assert plan_custom_job(anyone, settings, KEY).cost.hourly_usd == on_demand.hourly_usd  # may run on-demand


def _plan(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "trainctl", "plan", *args], capture_output=True, text=True, env=env)


def test_plan_shows_the_reservation_and_the_ladder_says_its_gpus_are_paid():
    result = _plan(str(ROOT / "examples/ladder-reserved-spot-ondemand.yaml"))
    assert result.returncode == 0, result.stderr
    assert "reservation       SPECIFIC_RESERVATION projects/" in result.stdout, result.stdout
    assert "/zones/us-central1-a/reservations/a2-res (every GPU node consumes it" in result.stdout
    ladder = result.stdout.split("capacity ladder", 1)[1].splitlines()[1:]
    assert "reservation us-central1-a/a2-res" in ladder[0] and "already paid" in ladder[0], ladder
    assert "already paid" not in ladder[1] and "already paid" not in ladder[2]


def test_plan_gcloud_writes_the_reservation_affinity(tmp_path):
    result = _plan(str(ROOT / "examples/ladder-reserved-spot-ondemand.yaml"), "--gcloud", str(tmp_path))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    affinity = config["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"]
    assert affinity["reservationAffinityType"] == "SPECIFIC_RESERVATION"
    assert affinity["key"] == RESERVATION_NAME_KEY
    assert affinity["values"][0].endswith("/zones/us-central1-a/reservations/a2-res")
