"""The local PersistentResourceService's create rules (local/jobservice/persistent_resources.py), as pure checks:
the id pattern of CreatePersistentResourceRequest, ResourcePool's replica and autoscaling rules, and the fields the
local stack refuses rather than ignores."""

from __future__ import annotations

import pytest
from google.cloud.aiplatform_v1.types import PersistentResource

from local.jobservice.persistent_resources import ID_RE, pool_capacity, resource_problems, unsupported_fields

MACHINE = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2}


def problems(*pools: dict) -> list[tuple[str, str]]:
    return resource_problems(PersistentResource(resource_pools=list(pools)))


@pytest.mark.parametrize(
    ("resource_id", "valid"),
    [("a", True), ("warm-pool-1", True), ("a" * 63, True), ("a" * 64, False), ("1pool", False),
     ("pool-", False), ("Pool", False), ("pool_1", False)],
)  # fmt: skip
def test_ids_follow_the_create_requests_pattern(resource_id: str, valid: bool):
    """Guards issue 43 point 4: /^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/, at most 63 characters."""
    assert bool(ID_RE.fullmatch(resource_id)) is valid


def test_a_resource_needs_pools_and_each_pool_a_known_machine():
    assert [f for f, _ in problems()] == ["persistent_resource.resource_pools"]
    assert [f for f, _ in problems({"replica_count": 1})] == [
        "persistent_resource.resource_pools[0].machine_spec.machine_type"
    ]
    unknown = problems({"machine_spec": {"machine_type": "n9-huge"}, "replica_count": 1})
    assert [f for f, _ in unknown] == ["persistent_resource.resource_pools[0].machine_spec.machine_type"]


@pytest.mark.parametrize(
    ("pool", "fields"),
    [
        ({"replica_count": 2}, []),
        ({"replica_count": 0}, ["replica_count"]),
        ({"autoscaling_spec": {"min_replica_count": 1, "max_replica_count": 4}}, []),
        (
            {"autoscaling_spec": {"min_replica_count": 0, "max_replica_count": 4}},
            ["autoscaling_spec.min_replica_count"],
        ),
        (
            {"autoscaling_spec": {"min_replica_count": 3, "max_replica_count": 3}},
            ["autoscaling_spec.min_replica_count"],
        ),
        ({"autoscaling_spec": {"min_replica_count": 1}}, ["autoscaling_spec.max_replica_count"]),
        ({"replica_count": 5, "autoscaling_spec": {"min_replica_count": 1, "max_replica_count": 4}}, ["replica_count"]),
        ({"replica_count": 1, "autoscaling_spec": {"min_replica_count": 2, "max_replica_count": 4}}, ["replica_count"]),
    ],
)
def test_replica_and_autoscaling_rules(pool: dict, fields: list[str]):
    """Guards issue 43 point 4: ResourcePool.AutoscalingSpec: min ≤ replica_count ≤ max, min < max, and "for
    Persistent Resource, the min_replica_count must be > 0"; without autoscaling, at least one replica."""
    found = problems({"machine_spec": MACHINE, **pool})
    assert [f.removeprefix("persistent_resource.resource_pools[0].") for f, _ in found] == fields


def test_a_job_may_take_up_to_the_pools_replica_count_or_autoscaling_maximum():
    resource = PersistentResource(
        resource_pools=[
            {"machine_spec": MACHINE, "replica_count": 2},
            {"machine_spec": MACHINE, "replica_count": 1, "autoscaling_spec": {"min_replica_count": 1,
                                                                             "max_replica_count": 5}},
        ]
    )  # fmt: skip
    assert [pool_capacity(pool) for pool in resource.resource_pools] == [2, 5]


def test_what_the_local_stack_does_not_model_is_refused_not_ignored():
    """A pool's reservation affinity and a Ray runtime are refused (UNIMPLEMENTED), naming the field."""
    affinity = {
        "reservation_affinity_type": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/p/zones/z/reservations/r"],
    }
    reserved = {**MACHINE, "reservation_affinity": affinity}
    resource = PersistentResource(
        resource_pools=[{"machine_spec": reserved, "replica_count": 1}],
        resource_runtime_spec={"ray_spec": {"image_uri": "ray"}},
    )
    assert [f for f, _ in unsupported_fields(resource)] == [
        "persistent_resource.resource_runtime_spec.ray_spec",
        "persistent_resource.resource_pools[0].machine_spec.reservation_affinity",
    ]
