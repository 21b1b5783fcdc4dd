"""The soak's model invariants read the labels the controller writes (a rename of the key label once made every
version look like one request's, so the soak reported duplicates that did not exist)."""

from __future__ import annotations

from types import SimpleNamespace

from bench.soak import model_invariants
from functions.models.versions import version_labels
from tests.unit.conftest import make_record, make_request

REQUEST = make_request(model={"name": "churn"}).model_dump(mode="json")


def version(key_hash: str) -> SimpleNamespace:
    """A registry version as the controller labels it (ListModelVersions gives its labels)."""
    labels = version_labels(make_record(key_hash=key_hash, request=REQUEST), "img")
    return SimpleNamespace(labels=labels, version_aliases=[])


def test_versions_of_different_requests_are_not_counted_as_one_requests_twice():
    assert (
        model_invariants([], {"churn": [version("a"), version("b")]}, set())["registry versions of one request twice"]
        == 0
    )
    assert (
        model_invariants([], {"churn": [version("a"), version("a"), version("b")]}, set())[
            "registry versions of one request twice"
        ]
        == 1
    )


def test_the_soaks_quota_invariant_counts_overlapping_on_demand_l4_jobs_only():
    """Issue 32 (the soak's invariant): GPUs of jobs that overlap in time add up; Spot jobs and one that ended
    before another was created do not."""
    from google.cloud.aiplatform_v1.types import CustomJob, Scheduling

    from bench.soak import most_l4_gpus_at_once

    def job(start: int, end: int, gpus: int, spot: bool = False) -> CustomJob:
        pool = {"machine_spec": {"accelerator_type": "NVIDIA_L4", "accelerator_count": gpus}, "replica_count": 1}
        strategy = Scheduling.Strategy.SPOT if spot else Scheduling.Strategy.STANDARD
        spec = {"worker_pool_specs": [pool], "scheduling": {"strategy": strategy}}
        return CustomJob(job_spec=spec, create_time={"seconds": start}, end_time={"seconds": end})

    assert most_l4_gpus_at_once([job(10, 20, 4), job(15, 30, 8), job(16, 17, 8, spot=True), job(30, 40, 4)]) == 12
