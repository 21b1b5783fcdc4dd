"""A run a newer run of its model replaced (issue 42, model.concurrency replace; Record.superseded_by): its job is
cancelled again until the cancel takes effect, it ends `cancelled` (reason superseded), it is never tried again, and
a success that beat its cancel registers no version."""

from __future__ import annotations

from datetime import timedelta

from functions.cloud.errors import Transient
from functions.cloud.job_snapshot import JobSnapshot, job_ref
from functions.lifecycle.transitions import observe
from tests.unit.conftest import RECORD_JOB, RECORD_TIME, make_record
from tests.unit.test_promotion_failures import NOW, FailingRegistry, controller

REF = job_ref(RECORD_JOB, "us-central1", "p")


def job(state: str, **fields) -> JobSnapshot:
    return JobSnapshot(name=RECORD_JOB, state=state, create_time=RECORD_TIME - timedelta(minutes=5), **fields)


def test_a_superseded_run_is_cancelled_again_until_its_cancel_takes_effect():
    for state in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
        rec = make_record(state="running", superseded_by="r2")
        assert observe(rec, job(state, start_time=RECORD_TIME), REF, RECORD_TIME, 3600, None).action == "cancel"


def test_its_cancel_ends_it_cancelled_for_being_superseded():
    rec = make_record(state="running", superseded_by="r2")
    transition = observe(rec, job("JOB_STATE_CANCELLED", start_time=RECORD_TIME), REF, RECORD_TIME, 3600, None)
    [cancelled] = transition.events
    assert (cancelled.state, cancelled.reason, rec.state) == ("cancelled", "superseded", "cancelled")
    assert "superseded by r2" in cancelled.message


def test_a_superseded_run_that_failed_is_never_tried_again():
    rec = make_record(state="running", superseded_by="r2")
    preempted = job(
        "JOB_STATE_FAILED", start_time=RECORD_TIME, error_code=9, error_message="Resources are insufficient"
    )
    transition = observe(rec, preempted, REF, RECORD_TIME, 3600, None)
    assert transition.action == "none" and rec.state == "failed" and rec.attempt == 1


def test_a_superseded_run_that_succeeded_in_the_race_registers_no_version():
    """Its job succeeded before the cancel took effect: `succeeded` (what happened), then `held` saying why, and the
    Model Registry is never called: the newer run is the model's."""
    registry = FailingRegistry(Transient("must not be called"))
    ctl, publisher, _ = controller(registry, [NOW])
    found = ctl.ledger.read("abc")
    assert found is not None
    record, generation = found
    record.superseded_by = "r2"
    ctl.ledger.replace(record, generation)

    assert ctl.observe_record("abc") == "succeeded"
    assert [e.state for e in publisher.published] == ["succeeded", "held"]
    assert publisher.published[1].version is None and "superseded by r2" in publisher.published[1].message
    assert registry.calls == []
