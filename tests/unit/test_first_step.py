"""Time to first step and goodput (issue 43): the phase split and goodput arithmetic (functions/ledger/first_step.py),
the trainer's untrusted figures checked against its job's own times, and what a final event carries (Record)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from functions.ledger.first_step import first_step_split, goodput, trainer_figures
from functions.untrusted.job_outputs import Unreadable, parse_progress
from schemas.events import Failed, Succeeded, Timestamps
from tests.unit.conftest import RECORD_TIME, make_record

ACCEPTED = RECORD_TIME


def at(seconds: float):
    return ACCEPTED + timedelta(seconds=seconds)


JOB = Timestamps(created=at(100), started=at(160), ended=at(1000))


def test_the_phases_split_accepted_to_first_step_and_sum_to_it():
    split = first_step_split(ACCEPTED, queued_seconds=70, job=JOB, first_step=at(205.5))
    assert split is not None
    assert (split.queue_seconds, split.provisioning_seconds, split.startup_seconds) == (70, 60, 45.5)
    assert split.other_seconds == 30  # admission and submission: accepted → create less the queue
    assert split.total_seconds == 205.5
    parts = split.queue_seconds + split.provisioning_seconds + split.startup_seconds + split.other_seconds
    assert parts == pytest.approx(split.total_seconds)


def test_no_split_without_a_first_step_in_the_last_attempts_job():
    assert first_step_split(ACCEPTED, 0, JOB, None) is None
    assert first_step_split(ACCEPTED, 0, JOB, at(150)) is None  # before the job started: an earlier attempt's
    assert first_step_split(ACCEPTED, 0, None, at(200)) is None


def test_phases_never_go_negative_nor_beyond_the_whole_when_clocks_disagree():
    # Vertex's create time before the controller accepted it, and a queue longer than the whole.
    job = Timestamps(created=at(-30), started=at(10), ended=at(100))
    split = first_step_split(ACCEPTED, queued_seconds=500, job=job, first_step=at(20))
    assert split is not None
    phases = [split.queue_seconds, split.provisioning_seconds, split.startup_seconds, split.other_seconds]
    assert min(phases) >= 0 and sum(phases) == pytest.approx(split.total_seconds) == 20


def test_scheduling_goodput_is_every_attempts_running_time_over_accepted_to_end():
    figures = goodput(ACCEPTED, at(1000), earlier_run_seconds=160, job=JOB, steps_run=250, steps_kept=200)
    assert figures.running_seconds == 160 + 840
    assert figures.scheduling == 1.0
    assert figures.runtime == 0.8
    alone = goodput(ACCEPTED, at(1000), 0, JOB, None, None)
    assert (alone.scheduling, alone.runtime) == (0.84, None)


def test_a_request_that_never_ran_has_no_scheduling_goodput_to_speak_of_but_zero():
    figures = goodput(ACCEPTED, at(50), 0, None, None, None)
    assert (figures.scheduling, figures.running_seconds) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("first", "run", "kept", "believed"),
    [
        (at(200).timestamp(), 250, 200, (at(200), 250, 200)),
        (at(150).timestamp(), 250, 200, (None, 250, 200)),  # before the job started
        (at(1001).timestamp(), 250, 200, (None, 250, 200)),  # after it ended
        (1e300, 10, 20, (None, None, None)),  # beyond any date; more kept than run
    ],
)
def test_the_trainers_figures_are_believed_only_within_their_jobs_times(first, run, kept, believed):
    figures = trainer_figures(first, run, kept, JOB, now=at(2000))
    assert (figures.first_step, figures.steps_run, figures.steps_kept) == believed


def test_the_progress_record_bounds_the_new_figures():
    ok = parse_progress(json.dumps({"time": 1.0, "step": 3, "first_step": 1.5, "steps_run": 4}).encode())
    assert (ok.first_step, ok.steps_run) == (1.5, 4)
    with pytest.raises(Unreadable, match="steps_run"):
        parse_progress(json.dumps({"time": 1.0, "steps_run": -1}).encode())
    with pytest.raises(Unreadable, match="first_step"):
        parse_progress(json.dumps({"time": 1.0, "first_step": "soon"}).encode())


def test_a_final_event_carries_the_split_and_goodput_of_the_request():
    record = make_record(queued_seconds=70, earlier_run_seconds=100, steps_run=250, steps_kept=200)
    record.first_step = at(205.5)
    event = Succeeded(
        request_id="r1", request_key="request:r1", attempt=2, time=at(1010), message="done",
        artifacts=record.artifacts, timestamps=JOB,
    )  # fmt: skip
    record.add_events([event])
    published = record.outbox_events()[0]
    assert isinstance(published, Succeeded) and published.first_step and published.goodput
    assert published.first_step.startup_seconds == 45.5
    assert (published.goodput.running_seconds, published.goodput.runtime) == (940, 0.8)


def test_a_queue_stay_is_counted_when_the_request_leaves_the_queue():
    record = make_record(queued_since=at(10), queued_seconds=5)
    record.leave_queue(at(40))
    assert (record.queued_seconds, record.queued_since) == (35, None)
    record.leave_queue(at(90))  # not queued: nothing more
    assert record.queued_seconds == 35


def test_a_failed_attempt_adds_its_running_time():
    record = make_record()
    record.add_run(0.5)
    assert record.earlier_run_seconds == 1800
    event = Failed(
        request_id="r1", request_key="request:r1", attempt=2, time=at(1010), message="failed", reason="user",
        timestamps=Timestamps(created=at(2000), started=None, ended=at(2100)),
    )  # fmt: skip
    record.add_events([event])
    published = record.outbox_events()[0]
    assert isinstance(published, Failed) and published.goodput and published.first_step is None
    assert published.goodput.running_seconds == 1800
