"""Observation's branches on in-memory Cloud Storage with an injected clock (issue 29, points 5 and 6): a job deleted
from Vertex, compare-and-swap conflicts with another handler, the outbox giving up, metrics.json that is no object,
and records written before max_pending and max_silence were kept. The controller through its public calls
(tests/unit/controller_harness.py)."""

from __future__ import annotations

import pytest

from functions.cloud.errors import Transient
from functions.ledger.history import Outcome
from functions.ledger.keys import key_hash
from functions.ledger.requests import HISTORY_PREFIX, LEDGER_PREFIX
from schemas.events import Failed, Spend, Stuck
from tests.unit.controller_harness import STOCKOUT, InterferingGcs, harness
from trainctl.report import figures

RECORD = f"{LEDGER_PREFIX}{key_hash('request:r1')}.json"


@pytest.mark.parametrize("attempts", [1, 2])
def test_a_job_deleted_from_vertex_does_not_leave_its_request_active_for_ever(attempts):
    """Issue 29, point 5: GetCustomJob answers 404 for the request's job (someone deleted it). The request is not
    left active waiting for a job that will never end: with an attempt left it is submitted again, else it fails
    (internal) saying the job is gone and leaves the active index."""
    h = harness()
    assert h.submit(scheduling={"max_attempts": attempts}) == "submitted"
    del h.vertex.jobs[h.vertex.last()]
    h.clock.advance(minutes=5)

    h.ctl.reconcile()

    record = h.record()
    if attempts == 2:
        assert (record.state, record.attempt, len(h.vertex.created)) == ("submitted", 2, 2)
        assert h.publisher.states == ["accepted", "submitted", "retrying", "submitted"]
        assert h.events_of("retrying")[0].reason == "internal"
    else:
        assert (record.state, record.failure_reason) == ("failed", "internal")
        (failed,) = h.events_of("failed")
        assert isinstance(failed, Failed) and "the job no longer exists in Vertex AI" in failed.message
        assert h.active() == []


def running(h) -> str:
    """The request's job, running."""
    assert h.submit() == "submitted"
    job = h.vertex.last()
    h.vertex.set_state(job, "JOB_STATE_RUNNING", start_time=h.clock())
    h.clock.advance(minutes=1)
    return job


def test_a_record_changed_by_another_handler_while_it_is_observed_is_read_again_and_published_once():
    """Issue 29, point 6: between observation's read of the record and its compare-and-swap, another handler writes
    it (on_job_state and reconcile look at the same jobs). The swap fails before anything is published; the record is
    read again and the change made on it: `running` published once (without the second reading, the Conflict
    escapes: the log line's delivery is retried and the sweep counts an error)."""
    gcs = InterferingGcs(contested=RECORD)
    h = harness(gcs=gcs)
    running(h)
    gcs.interruptions = 1

    assert h.ctl.observe_record(key_hash("request:r1")) == "running"

    assert gcs.interruptions == 0, "the other handler did not get in"
    assert h.publisher.states == ["accepted", "submitted", "running"]
    assert h.record().state == "running" and h.record().outbox == []


def test_a_record_that_keeps_changing_is_given_up_as_transient_with_nothing_published():
    """Issue 29, point 6: a record another writer changes before every swap is given up after five readings, as
    Transient (the delivery is retried later), having published nothing."""
    gcs = InterferingGcs(contested=RECORD)
    h = harness(gcs=gcs)
    running(h)
    gcs.interruptions = 100

    with pytest.raises(Transient, match="kept changing while it was observed"):
        h.ctl.observe_record(key_hash("request:r1"))

    assert gcs.interruptions == 95, "read and tried five times"
    assert h.publisher.states == ["accepted", "submitted"]
    assert h.record().state == "submitted"


def test_the_outbox_gives_up_recording_what_it_published_after_five_conflicts_and_the_event_stays_queued():
    """Issue 29, point 6: `running` is saved in the outbox and published, but every swap that would mark it
    published meets another writer: after five the outbox gives up (Transient) rather than loop; the event stays
    in the record's outbox, so the next handler publishes it again under the same ce-id (consumers dedupe)."""
    gcs = InterferingGcs(contested=RECORD)
    h = harness(gcs=gcs)
    running(h)

    def another_writer_from_now_on() -> None:
        gcs.interruptions = 100

    h.publisher.then = another_writer_from_now_on

    with pytest.raises(Transient, match="could not record the published events of request:r1"):
        h.ctl.observe_record(key_hash("request:r1"))

    assert gcs.interruptions == 95, "tried five times"
    assert h.publisher.states == ["accepted", "submitted", "running"]
    record = h.record()
    assert record.state == "running"
    assert [e["state"] for e in record.outbox] == ["running"], "the published event is still queued"

    gcs.interruptions, h.publisher.then = 0, None  # the next handler, past the outbox's grace
    h.clock.advance(seconds=h.ctl.settings.outbox_grace + 1)
    h.ctl.observe_record(key_hash("request:r1"))
    assert h.publisher.events[-1].ce_id == h.publisher.events[-2].ce_id and h.record().outbox == []


def test_metrics_json_that_is_not_an_object_gives_a_success_without_metrics_saying_why():
    """Issue 29, point 6: the job succeeded and its metrics.json holds a JSON array. `succeeded` is published with
    no metrics and a message saying why, and the request ends (never a crash that keeps it active)."""
    h = harness()
    job = running(h)
    h.gcs.write("control", "runs/r1/model/metrics.json", "[0.9, 0.8]", 0)
    h.vertex.set_state(job, "JOB_STATE_SUCCEEDED", end_time=h.clock())

    assert h.ctl.observe_record(key_hash("request:r1")) == "succeeded"

    (succeeded,) = h.events_of("succeeded")
    assert succeeded.metrics == {}
    assert succeeded.message.endswith(
        "its metrics.json could not be read, so no metrics are reported: it holds a JSON array, not an object"
    )
    assert h.active() == []


def test_a_record_from_before_max_pending_and_max_silence_were_kept_takes_them_from_its_request():
    """Issue 29, point 6: a record written before the record kept max_pending and max_silence has neither; its
    request's scheduling gives them (here max_pending 10m): the job waiting 11 minutes is stuck and cancelled."""
    h = harness()
    assert h.submit(scheduling={"max_pending": "10m"}) == "submitted"
    job = h.vertex.last()
    found = h.ctl.ledger.read(key_hash("request:r1"))
    assert found is not None
    old, generation = found
    old.max_pending = old.max_silence = None
    h.ctl.ledger.replace(old, generation)

    h.clock.advance(minutes=9)
    h.ctl.reconcile()
    assert h.events_of("stuck") == [] and h.vertex.cancelled == []
    h.clock.advance(minutes=2)
    h.ctl.reconcile()

    (stuck,) = h.events_of("stuck")
    assert isinstance(stuck, Stuck) and (stuck.max_pending_seconds, stuck.pending_seconds) == (600, 660)
    assert h.vertex.cancelled == [job]
    assert h.record().max_pending is None, "the record is not rewritten with limits it never had"


def test_a_final_event_left_in_the_outbox_is_left_to_its_handler_within_the_grace_and_published_once_after():
    """Issue 29 (test_faults' unasserted "within the grace" reconcile, here with a clock instead of a restart that
    may outlast the grace): the job succeeded but Pub/Sub was down, so `succeeded` stays in the outbox. A sweep
    within the outbox's grace leaves it to its handler (which may still publish it) and keeps the request active, so
    that a later sweep comes back; past the grace that sweep publishes it, once, and retires the request."""
    h = harness()
    job = running(h)
    h.vertex.set_state(job, "JOB_STATE_SUCCEEDED", end_time=h.clock())
    h.publisher.down = True
    with pytest.raises(Transient, match="Pub/Sub is unavailable"):
        h.ctl.observe_record(key_hash("request:r1"))
    assert [e["state"] for e in h.record().outbox] == ["running", "succeeded"]
    h.publisher.down = False

    h.clock.advance(seconds=h.ctl.settings.outbox_grace - 1)
    h.ctl.reconcile()
    assert h.publisher.states == ["accepted", "submitted"], "published within the grace"
    assert [e["state"] for e in h.record().outbox] == ["running", "succeeded"]
    assert h.active() == [f"active/{key_hash('request:r1')}"], "retired with its final event unpublished"

    h.clock.advance(seconds=2)
    h.ctl.reconcile()
    h.ctl.reconcile()
    assert h.publisher.states == ["accepted", "submitted", "running", "succeeded"]
    assert h.record().outbox == [] and h.active() == []


def test_every_attempt_a_request_ran_is_counted_in_its_outcome_at_its_rungs_price():
    """A request's final event and its outcome count what each of its attempts ran, not only the last: `trainctl
    report`'s GPU-hours and cost, each team's monthly spend against its budget and the BigQuery view
    gpu_hours_by_label read it. Here attempt 1 runs an hour on 2 A100s and
    stocks out; attempt 2 runs two hours on the L4 rung and succeeds. Before, the outcome held the last attempt's run
    at the first rung's price: 4 GPU-hours at the A100 price instead of 6 GPU-hours at each rung's own."""
    h = harness()
    assert h.submit(fallbacks=[{"resources": {"machine_type": "g2-standard-24"}}], scheduling={"max_attempts": 2})
    a100, l4 = (rung.hourly_usd for rung in h.record().ladder)
    assert a100 is not None and l4 is not None and a100 != l4

    first = h.vertex.last()
    h.vertex.set_state(first, "JOB_STATE_RUNNING", start_time=h.clock())
    h.clock.advance(hours=1)
    h.vertex.set_state(first, "JOB_STATE_FAILED", end_time=h.clock(), error_code=8, error_message=STOCKOUT)
    h.ctl.reconcile()
    second = h.vertex.last()
    assert second != first and h.record().rung == 1
    h.vertex.set_state(second, "JOB_STATE_RUNNING", start_time=h.clock())
    h.clock.advance(hours=2)
    h.vertex.set_state(second, "JOB_STATE_SUCCEEDED", end_time=h.clock())
    h.ctl.reconcile()

    [filed] = h.gcs.names("control", HISTORY_PREFIX)  # the outcome as the history index files it
    outcome = Outcome.model_validate_json(h.gcs.read("control", filed)[0])
    assert (outcome.state, outcome.attempt) == ("succeeded", 2)
    assert (outcome.gpu_hours, outcome.cost_usd) == (2 * 1 + 2 * 2, round(a100 * 1 + l4 * 2, 2))
    assert figures([outcome])["estimated_cost_usd"] == round(a100 + 2 * l4, 2)
    [succeeded] = h.events_of("succeeded")
    assert succeeded.spent == Spend(gpu_hours=6, estimated_cost_usd=round(a100 + 2 * l4, 2))


def test_a_runs_spend_is_kept_finer_than_a_report_rounds_its_totals():
    """`trainctl report` sums the `spent` of many requests and rounds the total to 4 places of GPU-hours and to
    cents. Each request's own figure must be finer, or the total drifts by up to half a unit per request (a report
    of three seconds-long fake-node jobs was 0.0011 GPU-hours against the events' 0.0012)."""
    h = harness()
    assert h.submit()
    job = h.vertex.last()
    h.vertex.set_state(job, "JOB_STATE_RUNNING", start_time=h.clock())
    h.clock.advance(seconds=1.5)
    h.vertex.set_state(job, "JOB_STATE_SUCCEEDED", end_time=h.clock())
    h.ctl.reconcile()
    [succeeded] = h.events_of("succeeded")
    gpus, hourly = h.record().attempt_price
    assert succeeded.spent is not None
    assert succeeded.spent.gpu_hours == pytest.approx(gpus * 1.5 / 3600, abs=1e-6)
    assert succeeded.spent.estimated_cost_usd == pytest.approx(hourly * 1.5 / 3600, abs=1e-4)
