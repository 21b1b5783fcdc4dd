"""What Vertex accepts by machine series: boot disks, the machines the trainer image can run on, display names,
and how honest the prices are (issue 12 points 6, 7, 16 and 17)."""

from __future__ import annotations

import dataclasses

import pytest

from functions.jobs.admission import admission_problems
from functions.jobs.planning import plan_custom_job
from schemas import catalog
from schemas.errors import RequestInvalid
from schemas.events import CostEstimate, cost_summary
from schemas.request import MAX_DISPLAY_NAME
from tests.unit.conftest import make_request

KEY = "request:churn-1"


def disk_specs(settings, **resources) -> list[dict]:
    plan = plan_custom_job(make_request(resources=resources), settings, KEY)
    return [pool["disk_spec"] for pool in plan.custom_job["job_spec"]["worker_pool_specs"][:2]]


@pytest.mark.parametrize("machine_type", ["a4-highgpu-8g", "g4-standard-96"])
def test_hyperdisk_only_machines_get_hyperdisk_balanced_by_default(settings, machine_type):
    """Guards issue 12 point 6: A4 and G4 boot only from Hyperdisk, and Vertex's documented default for them is
    pd-ssd, so planning sends hyperdisk-balanced itself instead of the pd-ssd it used to send everywhere."""
    for spec in disk_specs(settings, machine_type=machine_type, replica_count=2):
        assert spec == {"boot_disk_type": "hyperdisk-balanced", "boot_disk_size_gb": 100}


@pytest.mark.parametrize("machine_type", ["a2-highgpu-2g", "a3-highgpu-8g", "a3-ultragpu-8g", "g2-standard-24"])
def test_no_boot_disk_type_is_sent_where_vertex_default_is_right(settings, machine_type):
    """Guards issue 12 point 6: where Vertex's own default fits the series (pd-ssd; hyperdisk-balanced on A3
    Ultra), the type the user did not choose is left to Vertex."""
    assert disk_specs(settings, machine_type=machine_type) == [{"boot_disk_size_gb": 100}]


def test_an_explicit_boot_disk_choice_is_sent_as_chosen(settings):
    """Guards issue 12 point 6: a type the user chose is sent, even where it is Vertex's default."""
    specs = disk_specs(settings, machine_type="a2-highgpu-2g", boot_disk={"type": "pd-standard", "size_gb": 200})
    assert specs == [{"boot_disk_type": "pd-standard", "boot_disk_size_gb": 200}]


@pytest.mark.parametrize(
    ("machine_type", "disk", "allowed"),
    [
        ("a3-ultragpu-8g", "pd-ssd", "hyperdisk-balanced"),
        ("a4-highgpu-8g", "pd-standard", "hyperdisk-balanced"),
        ("g4-standard-48", "pd-ssd", "hyperdisk-balanced"),
        ("a2-highgpu-2g", "hyperdisk-balanced", "pd-ssd, pd-standard"),
    ],
)
def test_an_incompatible_boot_disk_is_refused_with_the_rule(machine_type, disk, allowed):
    """Guards issue 12 point 6: an explicit boot disk the machine series cannot boot from is refused, naming
    resources.boot_disk.type and the types that machine takes."""
    resources = {"machine_type": machine_type, "boot_disk": {"type": disk}}
    if machine_type == "g4-standard-48":
        resources["replica_count"] = 2
    with pytest.raises(RequestInvalid) as caught:
        make_request(resources=resources)
    assert [str(e) for e in caught.value.errors] == [
        f"resources.boot_disk.type: {machine_type} does not take a {disk} boot disk; allowed: {allowed}"
    ]


def test_every_catalog_machine_has_its_series_boot_disks():
    """Guards issue 12 point 6: each machine's series is in the boot disk table, and its default is allowed."""
    for name in catalog.MACHINES:
        series = [p for p in catalog.BOOT_DISKS_BY_SERIES if name.startswith(p + "-")]
        assert series, name
        disks = catalog.boot_disks(name)
        assert disks.default in disks.allowed, name
        assert set(disks.allowed) <= set(catalog.BOOT_DISK_TYPES), name


def test_arm_machines_are_not_in_the_catalog():
    """Guards issue 12 point 6 and issue 17 item 3: A4X runs Arm CPUs and the trainer image is amd64 only, so
    neither A4X nor its GB200 GPU (found on no other machine) can be asked for."""
    assert not [name for name in catalog.MACHINES if name.startswith("a4x-")]
    assert "NVIDIA_GB200" not in catalog.ACCELERATORS
    with pytest.raises(RequestInvalid) as caught:
        make_request(resources={"machine_type": "a4x-highgpu-4g", "accelerator_type": "NVIDIA_GB200"})
    assert "unknown machine type 'a4x-highgpu-4g'" in str(caught.value.errors[0])


def test_a_tenth_attempt_of_a_128_character_name_fits_vertex_limit(settings):
    """Guards issue 12 point 7: Vertex takes display names of at most 128 characters; " (attempt 10)" used to
    push a 128-character name to 129."""
    request = make_request(display_name="n" * MAX_DISPLAY_NAME)
    name = plan_custom_job(request, settings, KEY, attempt=10).custom_job["display_name"]
    assert len(name) == MAX_DISPLAY_NAME == 128
    assert name == "n" * (128 - len(" (attempt 10)")) + " (attempt 10)"


def test_a_short_name_keeps_its_whole_text_on_a_retry(settings):
    """Guards issue 12 point 7: only names that would overflow are shortened."""
    name = plan_custom_job(make_request(display_name="churn"), settings, KEY, attempt=10).custom_job["display_name"]
    assert name == "churn (attempt 10)"


def test_the_cost_guardrail_calls_its_estimate_approximate_and_dates_it(settings):
    """Guards issue 12 point 16: the catalog's prices are approximate, so the refusal says "about" and when the
    prices were taken, not "up to". (The figure: test_admission.py::test_cost_ceiling_counts_the_whole_timeout.)"""
    s = dataclasses.replace(settings, max_cost_usd=100.0)
    request = make_request(scheduling={"timeout": "24h"})
    plan = plan_custom_job(request, s, KEY)
    (found,) = [str(p) for p in admission_problems(request, s, plan.output_dir)]
    assert found.startswith("scheduling.timeout: guardrail max_cost_usd: this job can cost about $")
    assert f"/h for 1d, approximate prices taken {catalog.PRICES_TAKEN})" in found
    assert "up to" not in found


def test_the_control_bucket_is_listed_once_among_allowed_output_buckets(settings):
    """Guards issue 12 point 17 (second half): an operator who also lists the control bucket among the output
    buckets sees each bucket once in the refusal, in the order given, and the control bucket only as the request's
    own folder there (issue 24, point 4: the rest of it is other requests' and the ledger)."""
    s = dataclasses.replace(
        settings,
        allowed_output_buckets=("models", "proj-trainctl-control", "models"),
        allowed_image_prefixes=("us-docker.pkg.dev/p/",),
    )
    request = make_request(output_dir="gs://elsewhere/out/", trainer={"image": "us-docker.pkg.dev/p/t:1"})
    plan = plan_custom_job(request, s, KEY)
    assert [str(p) for p in admission_problems(request, s, plan.output_dir)] == [
        "output_dir: guardrail allowed_output_buckets: bucket elsewhere is not allowed; "
        "allowed: models (or this request's own folder gs://proj-trainctl-control/custom-runs/churn-1/)"
    ]


def test_the_event_cost_summary_is_approximate_and_dated():
    """Guards issue 12 point 16: the words for an `accepted` event's cost say "about" and the prices' date; and
    issue 28, point 5: the larger figure is the worst case for the whole timeout, not the price of the run."""
    cost = CostEstimate(hourly_usd=8.82, max_usd=211.68, gpus=2, nodes=1, prices_as_of="2026-11-22")
    assert cost_summary(cost) == (
        "about $8.82/h, at most $211.68 if it runs its whole timeout (approximate prices taken 2026-11-22)"
    )
