"""The pure decisions on a ledger record: repeated deliveries, and what each Vertex state means."""

from __future__ import annotations

from datetime import timedelta

import pytest

from functions.cloud.job_snapshot import JobSnapshot, job_ref
from functions.intake.repeats import decide_on_existing
from functions.lifecycle.transitions import _silence, observe
from tests.unit.conftest import RECORD_JOB, RECORD_TIME, make_record

NOW = RECORD_TIME
JOB = RECORD_JOB
REF = job_ref(JOB, "us-central1", "p")
BUILTIN = {"trainer": {"builtin": "tabular"}}  # the built-in trainer writes the heartbeat hangs are judged by


record = make_record


def job(state: str, **fields) -> JobSnapshot:
    return JobSnapshot(name=JOB, state=state, create_time=NOW - timedelta(minutes=5), **fields)


@pytest.mark.parametrize(
    ("fields", "spec", "decision"),
    [
        ({"state": "submitted"}, "s1", "duplicate"),
        ({"state": "succeeded"}, "s1", "duplicate"),
        ({"state": "submitted"}, "s2", "conflict"),
        ({"state": "submitted", "explicit_id": False}, "s2", "duplicate"),
        ({"state": "claimed", "lease_until": NOW + timedelta(seconds=30)}, "s1", "wait"),
        ({"state": "claimed", "lease_until": NOW - timedelta(seconds=1)}, "s1", "take_over"),
        ({"state": "claimed", "lease_until": None, "not_before": NOW + timedelta(minutes=2)}, "s1", "duplicate"),
    ],
)
def test_repeated_delivery_decisions(fields, spec, decision):
    assert decide_on_existing(record(**fields), spec, NOW) == decision


def test_running_is_reported_once():
    rec = record()
    first = observe(rec, job("JOB_STATE_RUNNING", start_time=NOW), REF, NOW, 3600, None)
    assert [e.state for e in first.events] == ["running"] and rec.state == "running"
    assert observe(rec, job("JOB_STATE_RUNNING", start_time=NOW), REF, NOW, 3600, None).events == []


def test_success_asks_for_metrics_then_reports_missed_running_and_success():
    rec = record()
    done = job("JOB_STATE_SUCCEEDED", start_time=NOW - timedelta(minutes=4), end_time=NOW)
    assert observe(rec, done, REF, NOW, 3600, None).action == "load_metrics"
    assert rec.state == "submitted"
    transition = observe(rec, done, REF, NOW, 3600, {"val_accuracy": 0.9})
    assert [e.state for e in transition.events] == ["running", "succeeded"]
    assert transition.events[1].metrics == {"val_accuracy": 0.9}
    assert transition.events[1].duration_seconds == 240
    assert rec.state == "succeeded" and rec.final


@pytest.mark.parametrize(
    ("vertex_state", "reason", "advice"),
    [("JOB_STATE_QUEUED", "quota", "quota"), ("JOB_STATE_PENDING", "capacity", "flex_start")],
)
def test_waiting_longer_than_max_pending_is_stuck_for_its_reason_and_cancelled_once(vertex_state, reason, advice):
    """Guards issue 12 point 3: Vertex holds a job in QUEUED for quota, in PENDING for provisioning."""
    rec = record()
    waiting = job(vertex_state)
    assert observe(rec, waiting, REF, NOW, 3600, None).events == []
    transition = observe(rec, waiting, REF, NOW, 60, None)
    assert [(e.state, e.reason, e.job_state) for e in transition.events] == [("stuck", reason, vertex_state)]
    assert advice in transition.events[0].message and transition.action == "cancel"
    again = observe(rec, waiting, REF, NOW, 60, None)
    assert again.events == [] and again.action == "cancel"
    cancelled = observe(rec, job("JOB_STATE_CANCELLED", end_time=NOW), REF, NOW, 60, None)
    assert [(e.state, e.reason) for e in cancelled.events] == [("cancelled", reason)]
    assert "max_pending" in cancelled.events[0].message


def test_a_job_cancelled_by_request_has_no_stuck_reason():
    cancelled = observe(record(), job("JOB_STATE_CANCELLED", end_time=NOW), REF, NOW, 60, None)
    assert [(e.state, e.reason) for e in cancelled.events] == [("cancelled", None)]


@pytest.mark.parametrize("vertex_state", ["JOB_STATE_PENDING", "JOB_STATE_QUEUED"])
def test_a_job_vertex_restarts_by_itself_is_never_stuck(vertex_state):
    """Guards issue 12 point 4: after a preemption Vertex restarts the same job; waiting again for machines
    long after it was created is not waiting to start."""
    rec = record(state="running")
    restarting = job(vertex_state, start_time=NOW - timedelta(minutes=4))
    transition = observe(rec, restarting, REF, NOW, 60, None)
    assert transition.events == [] and transition.action == "none"
    assert (rec.state, rec.attempt, rec.stuck) == ("running", 1, False)


def test_a_job_vertex_failed_for_quota_names_the_metric_and_what_to_do():
    """Guards issue 12 point 3: FAILED with code 8 and Vertex's quota text is reason quota, with the metric."""
    metric = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
    failed = job(
        "JOB_STATE_FAILED",
        end_time=NOW,
        error_code=8,
        error_message=f"The following quota metrics exceed quota limits: {metric}",
    )
    transition = observe(record(), failed, REF, NOW, 3600, None)
    [event] = transition.events
    assert (event.state, event.reason, event.quota_metric) == ("failed", "quota", metric)
    assert "Ask for more of this quota" in event.message


def test_preemption_with_attempts_left_is_retried_on_a_new_attempt():
    rec = record(state="running")
    preempted = job(
        "JOB_STATE_FAILED", start_time=NOW, error_code=9, error_message="Resources are insufficient in region: x."
    )
    transition = observe(rec, preempted, REF, NOW, 3600, None)
    assert [(e.state, e.reason, e.attempt) for e in transition.events] == [("retrying", "preemption", 1)]
    assert transition.action == "resubmit"
    assert (rec.state, rec.attempt, rec.job_name) == ("claimed", 2, None)


@pytest.mark.parametrize(
    ("code", "message", "started", "outcome"),
    [
        (9, "Resources are insufficient in region: us-central1.", False, ("retrying", "capacity")),
        (9, "Resources are insufficient in region: us-central1.", True, ("retrying", "preemption")),
        (13, "Internal error occurred for the current attempt.", True, ("retrying", "internal")),
        (8, "The following quota metrics exceed quota limits: x", False, ("failed", "quota")),
        (3, "The replica workerpool0-0 exited with a non-zero status of 1.", True, ("failed", "user")),
        (3, "Invalid image", False, ("failed", "invalid")),
    ],
)  # fmt: skip
def test_only_failures_that_new_gpus_can_cure_are_tried_again(code, message, started, outcome):
    """Issue 29 (a constant asserted against itself, replaced by what it decides): with attempts left and no
    ladder, a job lost to capacity, preemption or an internal error is tried again; quota (the same shape would
    be refused again), the user's code and an invalid job end the request."""
    failed = job("JOB_STATE_FAILED", start_time=NOW if started else None, error_code=code, error_message=message)
    transition = observe(record(state="running"), failed, REF, NOW, 3600, None, "no more is known.")
    assert [(e.state, e.reason) for e in transition.events if e.state != "running"] == [outcome]


def test_user_errors_and_exhausted_attempts_fail():
    user = job(
        "JOB_STATE_FAILED",
        start_time=NOW,
        error_code=3,
        error_message="The replica workerpool0-0 exited with a non-zero status of 3.",
    )
    rec = record(state="running")
    assert observe(rec, user, REF, NOW, 3600, None).action == "diagnose"  # look for the cause first
    assert rec.state == "running"
    (failed,) = observe(rec, user, REF, NOW, 3600, None, "The dataset gs://d/x/ has no objects.").events
    assert (failed.state, failed.reason) == ("failed", "user")
    assert failed.message.endswith("non-zero status of 3. The dataset gs://d/x/ has no objects.")
    note = "The trainer reported: LabelsChanged: the champion scores 0.02 on these rows against 0.95 on its reference"
    (data,) = observe(record(state="running"), user, REF, NOW, 3600, None, note, data_failure=True).events
    assert (data.state, data.reason) == ("failed", "data")
    assert data.message.startswith(f"job {user.job_id} failed (data): {note} (The replica"), "the cause comes first"
    internal = job("JOB_STATE_FAILED", start_time=NOW, error_code=13, error_message="Internal error occurred")
    last = record(state="running", attempt=3)
    assert [(e.state, e.reason) for e in observe(last, internal, REF, NOW, 3600, None).events] == [
        ("failed", "internal")
    ]


def test_outbox_never_queues_the_same_event_twice():
    rec = record()
    transition = observe(rec, job("JOB_STATE_RUNNING", start_time=NOW), REF, NOW, 3600, None)
    assert rec.add_events(transition.events) == {transition.events[0].ce_id}
    assert rec.add_events(transition.events) == set()
    assert len(rec.outbox) == 1
    rec.mark_published({transition.events[0].ce_id})
    assert rec.add_events(transition.events) == set()
    assert rec.outbox == []


def test_a_running_job_first_asks_for_its_progress_when_silence_is_judged():
    rec = record(request=BUILTIN)
    transition = observe(rec, job("JOB_STATE_RUNNING", start_time=NOW), REF, NOW, 3600, None, max_silence=600)
    assert (transition.action, transition.events, rec.state) == ("load_progress", [], "submitted")


@pytest.mark.parametrize(
    "progress",
    [
        {},  # the job writes no progress record (a custom image): never judged
        {"step": 10, "time": (NOW - timedelta(seconds=60)).timestamp(), "state": "training"},
        {"step": 99, "time": (NOW - timedelta(hours=5)).timestamp(), "state": "finished"},
        {"step": 10, "time": "yesterday", "state": "training"},
    ],
)
def test_a_running_job_that_advances_or_reports_nothing_is_left_running(progress):
    rec = record(request=BUILTIN)
    transition = observe(
        rec, job("JOB_STATE_RUNNING", start_time=NOW), REF, NOW, 3600, None, max_silence=600, progress=progress
    )
    assert [e.state for e in transition.events] == ["running"] and transition.action == "none"
    assert not rec.stuck


def test_a_running_job_whose_progress_stood_still_is_hung_then_resubmitted():
    """Issue 16 item 5: a RUNNING job that no longer trains is stuck (hang), cancelled, then a new attempt."""
    rec = record(state="running", request=BUILTIN)
    stale = {"step": 42, "time": (NOW - timedelta(minutes=45)).timestamp(), "state": "training"}
    running = job("JOB_STATE_RUNNING", start_time=NOW - timedelta(hours=1))
    transition = observe(rec, running, REF, NOW, 3600, None, max_silence=1800, progress=stale)
    [stuck] = transition.events
    assert (stuck.state, stuck.reason, stuck.silent_seconds, stuck.max_silence_seconds) == ("stuck", "hang", 2700, 1800)
    assert "step 42" in stuck.message and transition.action == "cancel"
    assert observe(rec, running, REF, NOW, 3600, None, max_silence=1800, progress=stale).action == "cancel"
    cancelled = job("JOB_STATE_CANCELLED", start_time=NOW - timedelta(hours=1), end_time=NOW)
    transition = observe(rec, cancelled, REF, NOW, 3600, None, max_silence=1800)
    assert [(e.state, e.reason, e.attempt) for e in transition.events] == [("retrying", "hang", 1)]
    assert transition.action == "resubmit" and (rec.state, rec.attempt, rec.stuck) == ("claimed", 2, False)


@pytest.mark.parametrize(
    ("written", "why"),
    [
        (NOW - timedelta(hours=2), "before the job started: an earlier attempt's record, or a forgery"),
        (NOW + timedelta(days=365), "ahead of now by more than clock skew"),
    ],
)
def test_a_heartbeat_this_job_cannot_have_written_is_no_evidence_of_a_hang(written, why):
    """Issue 24, point 5: a forged progress.json with an old time had the job declared hung and cancelled."""
    rec = record(state="running", request=BUILTIN)
    forged = {"step": 1, "time": written.timestamp(), "state": "training"}
    running = job("JOB_STATE_RUNNING", start_time=NOW - timedelta(hours=1))
    transition = observe(rec, running, REF, NOW, 3600, None, max_silence=60, progress=forged)
    assert (transition.events, transition.action, rec.stuck) == ([], "none", False), why


@pytest.mark.parametrize(
    ("written", "silence"),
    [
        (NOW - timedelta(minutes=10), 600.0),
        (NOW - timedelta(hours=1), 3600.0),  # written the moment the job started
        (NOW - timedelta(hours=1, seconds=1), None),  # before it started
        (NOW + timedelta(seconds=299), 0.0),  # the trainer's clock a little ahead of the controller's
        (NOW + timedelta(seconds=301), None),  # further ahead: not a time it wrote
    ],
)
def test_the_silence_of_a_heartbeat_counts_only_times_the_job_can_have_written(written, silence):
    """Issue 24, point 5: _silence is the evidence a hang is judged by; None is no evidence either way."""
    progress = {"step": 1, "time": written.timestamp(), "state": "training"}
    assert _silence(progress, NOW, NOW - timedelta(hours=1)) == silence


def test_a_heartbeat_a_little_ahead_of_the_controllers_clock_is_fresh():
    rec = record(state="running", request=BUILTIN)
    ahead = {"step": 1, "time": (NOW + timedelta(seconds=30)).timestamp(), "state": "training"}
    running = job("JOB_STATE_RUNNING", start_time=NOW - timedelta(hours=1))
    assert observe(rec, running, REF, NOW, 3600, None, max_silence=60, progress=ahead).action == "none"


def test_a_custom_images_job_is_never_judged_for_hangs():
    """Issue 24, point 5: custom images share one service account, so the heartbeat beside one of their jobs may
    be another job's forgery; only the built-in trainer's requests are judged (and read no progress.json)."""
    rec = record(state="running", request={"trainer": {"image": "us-docker.pkg.dev/p/r/img:1"}})
    stale = {"step": 42, "time": (NOW - timedelta(minutes=45)).timestamp(), "state": "training"}
    running = job("JOB_STATE_RUNNING", start_time=NOW - timedelta(hours=1))
    assert observe(rec, running, REF, NOW, 3600, None, max_silence=1800).action == "none"
    transition = observe(rec, running, REF, NOW, 3600, None, max_silence=1800, progress=stale)
    assert (transition.events, transition.action, rec.stuck) == ([], "none", False)


def test_a_success_says_what_of_its_metrics_could_not_be_used():
    """Issue 24, point 5: an unreadable metrics.json is reported as such, and the request still ends."""
    rec = record(state="running")
    done = job("JOB_STATE_SUCCEEDED", start_time=NOW - timedelta(minutes=3), end_time=NOW)
    note = "its metrics.json could not be read, so no metrics are reported: document is nested more than 32 levels"
    [succeeded] = observe(rec, done, REF, NOW, 3600, {}, metrics_note=note).events
    assert (succeeded.state, succeeded.metrics, rec.state) == ("succeeded", {}, "succeeded")
    assert succeeded.message == f"job 123 succeeded in 3m; {note}"


def test_a_hung_job_without_attempts_left_fails_for_hang():
    rec = record(state="running", attempt=3, max_attempts=3, stuck=True, failure_reason="hang")
    cancelled = job("JOB_STATE_CANCELLED", start_time=NOW - timedelta(hours=1), end_time=NOW)
    [failed] = observe(rec, cancelled, REF, NOW, 3600, None).events
    assert (failed.state, failed.reason, rec.state) == ("failed", "hang", "failed")
