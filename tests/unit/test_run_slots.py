"""Who holds a model's run slot, and what a new trigger of the model makes of it (issue 42, model.concurrency;
functions/intake/run_policy.py): the decision table, on the in-memory Cloud Storage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from functions.controller import Controller
from functions.intake.run_policy import Go, RunPolicy, Skip
from functions.ledger.keys import key_hash
from functions.ledger.requests import Ledger
from functions.ledger.run_slots import RunSlot
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_record, make_request
from tests.unit.test_promotion_failures import Publisher, SucceededJobs

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LEASE = 600
HOLDER = "h" * 64
PREPARED: Any = SimpleNamespace(plan=SimpleNamespace(cost=SimpleNamespace(gpus=8)), start=0)


def policy() -> RunPolicy:
    gcs = MemoryGcs()
    settings = Settings(project="p", control_bucket="control", events_topic="e", trainer_image="img", lease=LEASE)
    ctl = Controller(settings, Ledger(gcs, "control"), gcs, Publisher(), SucceededJobs, clock=lambda: NOW)
    return ctl.submission.policy


def trigger(concurrency: str, request_id: str = "new") -> Any:
    return make_request(request_id=request_id, model={"name": "churn", "concurrency": concurrency})


def hold(p: RunPolicy, since: datetime = NOW, **record: Any) -> None:
    """The slot names HOLDER (request "old"); with `record` fields, its ledger record exists in that state."""
    p.slots.write(RunSlot(model_id="churn", key_hash=HOLDER, request_id="old", since=since), 0)
    if record:
        p.ledger.create(make_record(key="request:old", key_hash=HOLDER, request_id="old", **record))


def decide(p: RunPolicy, concurrency: str) -> Skip | Go:
    return p.before_claim(trigger(concurrency), "request:new", PREPARED)


@pytest.mark.parametrize("concurrency", ["skip", "replace"])
def test_a_free_model_is_taken(concurrency):
    p = policy()
    assert decide(p, concurrency) == Go(None)
    slot, _ = p.slots.read("churn")
    assert slot is not None and (slot.request_id, slot.key_hash) == ("new", key_hash("request:new"))


@pytest.mark.parametrize("state", ["submitted", "running", "claimed", "queued"])
def test_an_active_run_skips_a_skip_trigger_and_is_replaced_by_a_replace_trigger(state):
    p = policy()
    hold(p, state=state)
    skipped = decide(p, "skip")
    assert isinstance(skipped, Skip) and (skipped.reason, skipped.blocking_request) == ("running", "old")
    assert skipped.saved_gpu_hours == 8 * make_request().scheduling.timeout / 3600
    assert p.slots.read("churn")[0].request_id == "old", "a skipped trigger leaves the slot alone"
    assert decide(p, "replace") == Go(HOLDER)
    assert p.slots.read("churn")[0].supersedes == HOLDER


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled", "skipped"])
def test_an_ended_run_leaves_the_model_free(state):
    p = policy()
    hold(p, state=state)
    assert decide(p, "skip") == Go(None)


def test_a_holder_without_a_record_is_active_for_a_lease_then_free():
    p = policy()
    hold(p, since=NOW - timedelta(seconds=LEASE - 1))
    assert isinstance(decide(p, "skip"), Skip)
    p = policy()
    hold(p, since=NOW - timedelta(seconds=LEASE + 1))
    assert decide(p, "replace") == Go(None), "past its lease it replaces nothing: there is nothing to cancel"


def test_a_redelivery_of_the_holder_goes_on_with_what_it_decided():
    p = policy()
    hold(p, state="running")
    assert decide(p, "replace") == Go(HOLDER)
    assert decide(p, "replace") == Go(HOLDER), "the same request again: the slot is its own"


def test_allow_never_reads_or_writes_the_slot():
    p = policy()
    hold(p, state="running")
    generation = p.slots.read("churn")[1]
    assert decide(p, "allow") == Go(None)
    assert p.slots.read("churn")[1] == generation


def test_a_replaced_run_waiting_in_the_queue_ends_at_once_and_a_running_one_is_left_to_the_observers():
    """The newer run's submission marks the older superseded: one with no job, waiting for quota, ends `cancelled`
    (superseded) there and then; one with a job is only marked, for reconcile to cancel."""
    for state, ends in (("queued", True), ("running", False)):
        p = policy()
        model = trigger("replace", "old").model_dump(mode="json")
        older = make_record(key="request:old", key_hash=HOLDER, request_id="old", state=state, request=model)
        if state == "queued":
            older.job_name = None
        p.ledger.create(older)
        p.ledger.mark_active(HOLDER)
        newer = make_record(key="request:new", key_hash="n" * 64, request_id="new", request=model, supersedes=HOLDER)
        p.supersede_older(newer)
        found = p.ledger.read(HOLDER)
        assert found is not None
        record = found[0]
        assert record.superseded_by == "new" and record.final == ends
        published = [e.state for e in p.outbox.publisher.published]  # type: ignore[attr-defined]
        assert published == (["superseded", "cancelled"] if ends else ["superseded"])
        if ends:
            assert p.outbox.publisher.published[-1].reason == "superseded"  # type: ignore[attr-defined]
