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

from functions.capacity.ladder import ladder_of
from functions.capacity.reserved import ReservationRefused, mark_reserved
from functions.cloud.reservations import (
    ComputeReservations,
    ReservationState,
    ReservationUnreadable,
    state_of,
    vertex_accelerator,
)
from functions.intake.delivery import spec_hash
from functions.jobs.planning import RESERVATION_NAME_KEY, plan_custom_job
from local.jobservice.capacity import CapacityError, parse_capacity
from local.jobservice.reservations import on_reservation, reservation_problems, reserved_vms
from schemas.errors import RequestInvalid
from tests.docs import doc
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
    page = doc("capacity.md")
    assert all(line in page for line in ladder[:3]), "docs/capacity.md's Reservations example is what plan prints"


def test_plan_gcloud_writes_the_reservation_affinity(tmp_path):
    result = _plan(str(ROOT / "examples/ladder-reserved-spot-ondemand.yaml"), "--gcloud", str(tmp_path))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    affinity = config["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"]
    assert affinity["reservationAffinityType"] == "SPECIFIC_RESERVATION"
    assert affinity["key"] == RESERVATION_NAME_KEY
    assert affinity["values"][0].endswith("/zones/us-central1-a/reservations/a2-res")


# Admission: the reservation read, its shape matched exactly, and the ladder gated on its free VMs.


class FakeReservations:
    def __init__(self, **states: ReservationState | Exception):
        self.states = states
        self.asked: list[str] = []

    def get(self, name: str) -> ReservationState:
        self.asked.append(name)
        found = self.states[name.rsplit("/", 1)[-1]]
        if isinstance(found, Exception):
            raise found
        return found


def held(count: int, in_use: int, machine: str = "a2-highgpu-2g", gpus: int = 2) -> ReservationState:
    return ReservationState(
        "projects/proj/zones/us-central1-a/reservations/a2-res", machine, "NVIDIA_TESLA_A100", gpus, count, in_use
    )


def reserved_ladder(replicas: int = 1):
    return make_request(
        resources=RESERVED | {"replica_count": replicas},
        scheduling={"max_attempts": 3},
        fallbacks=[
            {"strategy": "spot", "resources": {"machine_type": "a2-highgpu-2g", "replica_count": replicas}},
            {"resources": {"machine_type": "a2-highgpu-2g", "replica_count": replicas}},
        ],
    )


def test_a_reservation_of_another_shape_is_refused_naming_the_rule():
    request = reserved_ladder()
    reader = FakeReservations(**{"a2-res": held(4, 0, machine="a2-highgpu-1g", gpus=1)})
    with pytest.raises(ReservationRefused) as refused:
        mark_reserved(request, ladder_of(request, "us-central1"), reader, "proj")
    assert refused.value.errors == [
        "resources.reservation: reservation projects/proj/zones/us-central1-a/reservations/a2-res holds a2-highgpu-1g "
        "with 1 × NVIDIA_TESLA_A100; this rung asks for a2-highgpu-2g with 2 × NVIDIA_TESLA_A100; Vertex uses a "
        "reservation only for the exact machine shape"
    ]
    assert reader.asked == ["projects/proj/zones/us-central1-a/reservations/a2-res"]


def test_an_unreadable_reservation_is_a_refusal_naming_why():
    request = reserved_ladder()
    reader = FakeReservations(**{"a2-res": ReservationUnreadable("it needs compute.reservations.get on project proj")})
    with pytest.raises(ReservationRefused) as refused:
        mark_reserved(request, ladder_of(request, "us-central1"), reader, "proj")
    assert refused.value.errors == ["resources.reservation: it needs compute.reservations.get on project proj"]


def test_the_reserved_rung_is_used_while_the_reservation_has_room_then_skipped_down():
    request = reserved_ladder(replicas=2)
    room = mark_reserved(request, ladder_of(request, "us-central1"), FakeReservations(**{"a2-res": held(4, 2)}), "p")
    assert [rung.skipped for rung in room] == [None, None, None]
    full = mark_reserved(request, ladder_of(request, "us-central1"), FakeReservations(**{"a2-res": held(4, 3)}), "p")
    assert full[0].skipped == (
        "reservation projects/proj/zones/us-central1-a/reservations/a2-res is full: 3 of its 4 VMs in use, this rung "
        "needs 2"
    )
    assert [rung.skipped for rung in full[1:]] == [None, None]
    small = mark_reserved(request, ladder_of(request, "us-central1"), FakeReservations(**{"a2-res": held(1, 0)}), "p")
    assert small[0].skipped is not None and "which holds 1" in small[0].skipped


def test_a_full_reservation_on_the_only_rung_is_not_skipped_the_job_waits_for_it():
    request = make_request(resources=RESERVED)
    rungs = mark_reserved(request, ladder_of(request, "us-central1"), FakeReservations(**{"a2-res": held(2, 2)}), "p")
    assert rungs[0].skipped is None


def test_compute_engines_gpu_names_are_vertexs_and_a_built_in_machine_may_list_none():
    body = {
        "specificReservation": {
            "count": "3",
            "inUseCount": "1",
            "instanceProperties": {"machineType": "a2-highgpu-2g"},
        }
    }
    state = state_of("projects/p/zones/z/reservations/r", body)
    assert (state.machine_type, state.accelerator_type, state.accelerator_count, state.free) == (
        "a2-highgpu-2g",
        "NVIDIA_TESLA_A100",
        2,
        2,
    )
    assert vertex_accelerator("nvidia-h100-80gb") == "NVIDIA_H100_80GB"
    assert vertex_accelerator("nvidia-tesla-a100") == "NVIDIA_TESLA_A100"


# The local stack's capacity file: reservations, and what its Vertex refuses of a job on one.


def test_the_capacity_file_takes_reservations_and_names_a_wrong_key():
    model = parse_capacity(
        {
            "reservations": {
                "a2-res": {"project": "p", "zone": "us-central1-a", "machine_type": "a2-highgpu-2g", "count": 2}
            }
        }
    )
    held = model.reservations["projects/p/zones/us-central1-a/reservations/a2-res"]
    assert (held.shape(), held.count) == (("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2), 2)
    assert model.limit("us-central1", "reservation:projects/p/zones/us-central1-a/reservations/a2-res") == 2
    with pytest.raises(CapacityError, match=r"reservations.r.count: required"):
        parse_capacity({"reservations": {"r": {"project": "p", "zone": "z", "machine_type": "a2-highgpu-2g"}}})
    with pytest.raises(CapacityError, match=r"reservations.r: unknown key 'gpus'"):
        parse_capacity({"reservations": {"r": {"gpus": 2}}})


class _Answer:
    def __init__(self, status: int, body: dict):
        self.status_code, self._body = status, body

    def json(self) -> dict:
        return self._body


class _Session:
    def __init__(self, answer: _Answer):
        self.answer = answer
        self.urls: list[str] = []

    def request(self, method: str, url: str, timeout: float) -> _Answer:
        assert method == "GET"
        self.urls.append(url)
        return self.answer


def _adapter(status: int, body: dict) -> tuple[ComputeReservations, _Session]:
    adapter = ComputeReservations("http://compute.invalid")
    session = _Session(_Answer(status, body))
    adapter._session, adapter._base = session, "http://compute.invalid"
    return adapter, session


def test_the_adapter_reads_the_reservation_by_its_full_name_and_names_the_permission_when_refused():
    name = "projects/owner-1/zones/us-central1-a/reservations/a2-res"
    body = {"specificReservation": {"count": "2", "instanceProperties": {"machineType": "a2-highgpu-2g"}}}
    adapter, session = _adapter(200, body)
    assert adapter.get(name).free == 2
    assert session.urls == [f"http://compute.invalid/compute/v1/{name}"]
    # Compute Engine's errors carry no `status` name: the HTTP status says which.
    refused = {"error": {"code": 403, "message": "Required 'compute.reservations.get' permission"}}
    with pytest.raises(ReservationUnreadable, match=r"it needs compute\.reservations\.get on project owner-1"):
        _adapter(403, refused)[0].get(name)
    with pytest.raises(ReservationUnreadable, match="does not exist"):
        _adapter(404, {"error": {"code": 404, "message": "not found"}})[0].get(name)


def test_the_local_vertex_refuses_more_vms_than_the_reservation_holds_and_a_job_on_it_meets_no_stockout():
    model = parse_capacity(
        {
            "reservations": {
                "a2-res": {"project": "p", "zone": "us-central1-a", "machine_type": "a2-highgpu-2g", "count": 2}
            }
        }
    )
    name = "projects/p/zones/us-central1-a/reservations/a2-res"
    spec = {
        "machine_type": "a2-highgpu-2g",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 2,
        "reservation_affinity": {
            "reservation_affinity_type": "SPECIFIC_RESERVATION",
            "key": RESERVATION_NAME_KEY,
            "values": [name],
        },
    }

    def job(workers: int) -> CustomJob:
        pools = [{"machine_spec": spec, "replica_count": 1}]
        pools += [{"machine_spec": spec, "replica_count": workers}] if workers else []
        return CustomJob(display_name="j", job_spec={"worker_pool_specs": pools})

    assert reservation_problems(job(1), model) == [] and on_reservation(job(1), model)
    assert reserved_vms(job(1)) == {f"reservation:{name}": 2}
    assert reservation_problems(job(2), model) == [
        ("custom_job.job_spec.worker_pool_specs", f"The job needs 3 VMs of reservation {name}, which holds 2.")
    ]
