"""Spot's quota metric is uncertain (issue 40, point 12): Google's own quota helper maps Spot *training* to the
on-demand metric (only the Dynamic Workload Scheduler to the preemptible one), a Google sample's README to the
preemptible one. Until a source settles it, a Spot rung is gated on both (each that has a limit) and holds both of
trainctl's pools. The controller through its public calls, on in-memory stand-ins (tests/unit/controller_harness.py)."""

from __future__ import annotations

from schemas.catalog import quota_metrics
from tests.unit.controller_harness import L4_POOL, L4_QUOTA, harness

SPOT_L4_QUOTA = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus"
SPOT_L4_POOL = "us-central1/custom_model_training_preemptible_nvidia_l4_gpus"
L4 = {"machine_type": "g2-standard-24"}  # 2 × NVIDIA_L4
SPOT = {"strategy": "spot"}


def test_a_spot_rung_is_gated_on_the_preemptible_and_the_on_demand_metric():
    """FLEX_START draws on the preemptible metric (the Dynamic Workload Scheduler page, and Google's quota helper);
    on demand on its own metric; Spot on both, the preemptible one first (what Vertex's quota error names)."""
    assert quota_metrics("NVIDIA_L4", "spot") == (SPOT_L4_QUOTA, L4_QUOTA)
    assert quota_metrics("NVIDIA_L4", "SPOT") == (SPOT_L4_QUOTA, L4_QUOTA)
    assert quota_metrics("NVIDIA_L4", "flex_start") == (SPOT_L4_QUOTA,)
    assert quota_metrics("NVIDIA_L4", "standard") == (L4_QUOTA,)
    assert quota_metrics(None, "spot") == ("aiplatform.googleapis.com/custom_model_training_cpus",)


def test_a_spot_request_waits_while_the_on_demand_quota_is_full_though_the_preemptible_one_has_room():
    """Google's quota helper's reading: Spot training spends the on-demand quota, which an on-demand job fills; the
    Spot request waits for it (naming it) and holds its place in both pools until it ends."""
    h = harness(quotas={L4_QUOTA: 2, SPOT_L4_QUOTA: 8})
    pools = h.ctl.quota_queue.pools
    assert h.submit("on-demand", resources=L4) == "submitted"

    assert h.submit("spot", resources=L4, scheduling=SPOT) == "queued"

    [queued] = h.events_of("queued")
    assert queued.quota_metric == L4_QUOTA and "needs 2 of " + L4_QUOTA in queued.message
    record = h.record("spot")
    assert record.quota_pools == [SPOT_L4_POOL, L4_POOL]
    assert (pools.held(SPOT_L4_POOL), pools.held(L4_POOL), pools.waiting(L4_POOL)) == (2, 2, [record.key_hash])
    assert len(h.vertex.created) == 1, "no job for the Spot request while the on-demand quota is full"


def test_a_spot_request_waits_while_the_preemptible_quota_is_full_though_the_on_demand_one_has_room():
    """The README's reading: Spot spends the preemptible quota; another Spot job holding it makes this one wait."""
    h = harness(quotas={L4_QUOTA: 8, SPOT_L4_QUOTA: 2})
    assert h.submit("first-spot", resources=L4, scheduling=SPOT) == "submitted"

    assert h.submit("second-spot", resources=L4, scheduling=SPOT) == "queued"

    [queued] = h.events_of("queued")
    assert queued.quota_metric == SPOT_L4_QUOTA


def test_a_spot_job_holds_both_pools_and_gives_both_back_when_it_ends():
    h = harness(quotas={L4_QUOTA: 8, SPOT_L4_QUOTA: 8})
    pools = h.ctl.quota_queue.pools
    assert h.submit("spot", resources=L4, scheduling=SPOT) == "submitted"
    assert (pools.held(SPOT_L4_POOL), pools.held(L4_POOL)) == (2, 2)

    h.vertex.set_state(h.vertex.last(), "JOB_STATE_SUCCEEDED", start_time=h.clock(), end_time=h.clock())
    h.clock.advance(minutes=5)
    h.ctl.reconcile()

    assert h.record("spot").state == "succeeded"
    assert (pools.held(SPOT_L4_POOL), pools.held(L4_POOL)) == (0, 0)


def test_an_ended_spot_request_lets_go_of_both_pools_at_once():
    """The release itself (reconcile's sweep of inactive holders would catch a leak only later): both pools."""
    h = harness(quotas={L4_QUOTA: 8, SPOT_L4_QUOTA: 8})
    pools = h.ctl.quota_queue.pools
    assert h.submit("spot", resources=L4, scheduling=SPOT) == "submitted"
    record = h.record("spot")
    record.state = "succeeded"

    h.ctl.quota_queue.release(record)

    assert (pools.held(SPOT_L4_POOL), pools.held(L4_POOL)) == (0, 0)


def test_only_the_metric_with_a_limit_gates_and_a_rung_that_never_fits_either_is_skipped():
    """A metric Cloud Quotas gives no limit for is not gated (as before); a Spot rung needing more GPUs than either
    limit can never run and is skipped, naming that metric."""
    only_on_demand = harness(quotas={L4_QUOTA: 2})
    assert only_on_demand.submit("on-demand", resources=L4) == "submitted"
    assert only_on_demand.submit("spot", resources=L4, scheduling=SPOT) == "queued"
    assert only_on_demand.record("spot").quota_pools == [L4_POOL]

    only_preemptible = harness(quotas={SPOT_L4_QUOTA: 8})
    assert only_preemptible.submit("on-demand", resources=L4) == "submitted"  # not gated: no on-demand limit
    assert only_preemptible.submit("spot", resources=L4, scheduling=SPOT) == "submitted"
    assert only_preemptible.record("spot").quota_pools == [SPOT_L4_POOL]

    too_small = harness(quotas={L4_QUOTA: 1, SPOT_L4_QUOTA: 8})
    assert too_small.submit("spot", resources=L4, scheduling=SPOT) == "rejected"
    [rejected] = too_small.events_of("rejected")
    assert f"needs 2 GPUs of {L4_QUOTA} in us-central1; the project's limit is 1" in " ".join(rejected.errors)
