"""Submission's branches on in-memory Cloud Storage with an injected clock (issue 29, points 2-4 and 6): quota held
while the ladder moves, the quota queue's ends, Vertex's quota refusal at create, the dataset preflight refused, and
a claim that reconcile takes over. The controller through its public calls (tests/unit/controller_harness.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from functions.cloud.gcs import StorageError
from functions.ledger.keys import key_hash
from local.memory_gcs import MemoryGcs
from schemas.events import Cancelled, Failed, Retrying
from tests.unit.controller_harness import (
    A100_POOL,
    A100_QUOTA,
    L4_POOL,
    L4_QUOTA,
    QUOTA_REFUSAL,
    STOCKOUT,
    harness,
)

L4 = {"machine_type": "g2-standard-24"}  # 2 × NVIDIA_L4
L4_RUNG = {"resources": L4, "strategy": "standard"}


def test_a_request_moving_down_the_ladder_to_another_gpu_type_gives_the_first_types_quota_back():
    """Issue 29, point 2: a request holding 2 A100s of trainctl's count stocks out and moves to its L4 rung: it then
    holds 2 L4s and the A100 pool ends empty (before, nothing released the rung it left; the request still being
    active, reconcile's clean-up never dropped it either, and the A100s stayed held from every queued request)."""
    h = harness(quotas={A100_QUOTA: 8, L4_QUOTA: 8})
    pools = h.ctl.quota_queue.pools
    assert h.submit(fallbacks=[L4_RUNG], scheduling={"max_attempts": 2}) == "submitted"
    assert (pools.held(A100_POOL), pools.held(L4_POOL)) == (2, 0)

    h.vertex.set_state(h.vertex.last(), "JOB_STATE_FAILED", error_code=8, error_message=STOCKOUT)
    h.clock.advance(minutes=5)
    h.ctl.reconcile()

    record = h.record()
    assert (record.state, record.rung, record.attempt, record.quota_pool) == ("submitted", 1, 2, L4_POOL)
    assert h.vertex.created[-1]["job_spec"]["worker_pool_specs"][0]["machine_spec"]["accelerator_type"] == "NVIDIA_L4"
    assert (pools.held(A100_POOL), pools.held(L4_POOL)) == (0, 2), "the A100s are still counted as held"
    assert pools.waiting(A100_POOL) == []


def fill(h, request_id: str, **sections) -> None:
    """Another request that holds the whole of a pool while its job runs."""
    assert h.submit(request_id, **sections) == "submitted"
    h.vertex.set_state(h.vertex.last(), "JOB_STATE_RUNNING", start_time=h.clock())


def test_a_quota_wait_beyond_max_pending_on_the_last_rung_fails_listing_every_rung():
    """Issue 29, point 3: both rungs' pools are full; the request waits on rung 0 past its max_pending, moves to rung
    1, waits there past its max_pending too, and fails (quota) with every rung's outcome; it holds and waits for
    nothing afterwards, and no job was ever created for it."""
    h = harness(quotas={A100_QUOTA: 2, L4_QUOTA: 2})
    fill(h, "a100-filler")
    fill(h, "l4-filler", resources=L4)
    pools = h.ctl.quota_queue.pools
    mine = key_hash("request:r1")

    ladder = [L4_RUNG | {"max_pending": "20m"}]
    assert h.submit(fallbacks=ladder, scheduling={"max_attempts": 2, "max_pending": "10m"}) == "queued"
    assert pools.waiting(A100_POOL) == [mine]

    h.clock.advance(minutes=9)
    h.ctl.reconcile()
    assert (h.record().state, h.record().rung) == ("queued", 0), "moved before max_pending"
    h.clock.advance(minutes=2)
    h.ctl.reconcile()
    assert (h.record().state, h.record().rung) == ("queued", 1)
    assert pools.waiting(A100_POOL) == [] and pools.waiting(L4_POOL) == [mine]

    h.clock.advance(minutes=21)
    h.ctl.reconcile()

    record = h.record()
    assert (record.state, record.failure_reason) == ("failed", "quota")
    (failed,) = h.events_of("failed")
    assert isinstance(failed, Failed) and failed.reason == "quota"
    assert [(o.rung, o.outcome) for o in failed.rungs or []] == [
        (0, "waited 11m in trainctl's queue for GPU quota, longer than max_pending"),
        (1, "waited 21m in trainctl's queue for GPU quota, longer than max_pending"),
    ]
    assert "the capacity ladder is exhausted (quota): rung 0 (" in failed.message
    assert pools.waiting(L4_POOL) == [] and pools.held(L4_POOL) == 2, "only the filler holds the L4s"
    assert len(h.vertex.created) == 2, "only the fillers' jobs"
    assert f"active/{mine}" not in h.active()


def test_a_quota_wait_beyond_max_pending_without_fallbacks_is_cancelled_for_quota():
    """Issue 29, point 3: with no ladder to move down, a request that waited in trainctl's queue longer than its
    max_pending is `cancelled` with reason quota (it never had a job), saying what to do."""
    h = harness(quotas={A100_QUOTA: 2})
    fill(h, "a100-filler")
    assert h.submit(scheduling={"max_pending": "10m"}) == "queued"
    h.clock.advance(minutes=11)

    summary = h.ctl.reconcile()

    assert summary.get("cancelled") == 1
    (cancelled,) = h.events_of("cancelled")
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "quota"
    assert cancelled.message.startswith("never submitted: waited 11m in trainctl's queue for GPU quota")
    assert h.record().state == "cancelled"
    assert h.ctl.quota_queue.pools.waiting(A100_POOL) == []
    assert len(h.vertex.created) == 1, "only the filler's job"


def test_a_quota_refusal_at_create_is_tried_again_by_reconcile_once_its_backoff_has_passed():
    """Issue 29, point 4: Vertex refuses the create for GPU quota; the request waits (`retrying`, attempt 2 not
    before two minutes), reconcile leaves it alone until then, and submits attempt 2 after."""
    h = harness()
    h.vertex.refusals.append(QUOTA_REFUSAL)
    assert h.submit(scheduling={"max_attempts": 2}) == "retrying"
    (retrying,) = h.events_of("retrying")
    assert isinstance(retrying, Retrying) and retrying.reason == "quota" and retrying.quota_metric == A100_QUOTA
    record = h.record()
    assert (record.state, record.attempt, record.not_before) == ("claimed", 2, h.clock() + timedelta(minutes=2))

    h.clock.advance(minutes=1)
    h.ctl.reconcile()
    assert h.vertex.created == [] and h.record().state == "claimed", "submitted before not_before"

    h.clock.advance(minutes=1, seconds=1)
    h.ctl.reconcile()
    record = h.record()
    assert (record.state, record.attempt) == ("submitted", 2)
    assert [job["labels"]["trainctl_attempt"] for job in h.vertex.created] == ["2"]
    assert h.publisher.states == ["accepted", "retrying", "submitted"]


def test_a_quota_refusal_at_create_with_no_attempts_left_fails_for_quota():
    """Issue 29, point 4: the second refusal finds no attempt left: `failed` (quota), naming the metric, and the
    request leaves the active index."""
    h = harness()
    h.vertex.refusals.extend([QUOTA_REFUSAL, QUOTA_REFUSAL])
    assert h.submit(scheduling={"max_attempts": 2}) == "retrying"
    h.clock.advance(minutes=3)
    h.ctl.reconcile()

    record = h.record()
    assert (record.state, record.failure_reason, record.attempt) == ("failed", "quota", 2)
    (failed,) = h.events_of("failed")
    assert failed.reason == "quota" and failed.quota_metric == A100_QUOTA
    assert h.vertex.created == [] and h.active() == []


class ListRefusedGcs(MemoryGcs):
    """Cloud Storage where the functions' account may not list the data bucket."""

    def objects_under(self, bucket, prefix):  # type: ignore[no-untyped-def]
        if bucket == "data-bucket":
            raise StorageError("Cloud Storage answered 403: permission denied", 403)
        return super().objects_under(bucket, prefix)


def test_a_dataset_the_controller_may_not_list_is_rejected_naming_the_permission():
    """Issue 29, point 6: the dataset preflight answered 403: the request is `rejected` saying which permission
    is missing on which bucket, nothing is claimed and no job created (before, the 403 escaped as a crash and the
    delivery was retried until it reached the dead-letter topic)."""
    h = harness(gcs=ListRefusedGcs())

    assert h.submit() == "rejected"

    (rejected,) = h.publisher.events
    assert rejected.errors == [
        "dataset.uri: gs://data-bucket/churn/ cannot be read by trainctl's controller (Cloud Storage answered 403); "
        "its service account needs storage.objects.list on gs://data-bucket"
    ]
    assert h.ctl.ledger.read(key_hash("request:r1")) is None and h.active() == []
    assert h.vertex.created == []


@pytest.mark.parametrize("late_by", [timedelta(seconds=-1), timedelta(seconds=1)])
def test_a_claim_left_by_a_handler_that_died_is_taken_over_by_reconcile_once_its_lease_runs_out(late_by):
    """Issue 29, point 6: a handler claimed the request and died before creating its job (Vertex was down). While
    its lease is live, reconcile leaves the claim alone; once it has run out, reconcile takes it over and submits
    the job once."""
    h = harness()
    h.vertex.refusals.append(Exception("the handler died here"))
    with pytest.raises(Exception, match="the handler died here"):
        h.submit()
    record = h.record()
    assert record.state == "claimed" and record.lease_until == h.clock() + timedelta(seconds=600)

    h.clock.now = record.lease_until + late_by
    h.ctl.reconcile()

    if late_by < timedelta(0):
        assert h.record().state == "claimed" and h.vertex.created == [], "a live claim was taken over"
    else:
        assert h.record().state == "submitted" and len(h.vertex.created) == 1
        assert h.publisher.states == ["accepted", "submitted"]
