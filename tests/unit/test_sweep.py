"""The reconcile sweep's decisions (issue 25, point 9): which active requests a tick looks at, from one listing of
the deployment's waiting and running jobs and what the sweep last saw of each request. Pure."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from functions.cloud.job_snapshot import JobSnapshot
from functions.lifecycle.sweep import (
    NOTHING_SEEN,
    RELOOK_EVERY,
    WINDOW_JOBS,
    Listing,
    Seen,
    listing_windows,
    listings,
    next_look,
    seen_after,
    unchanged,
)
from tests.unit.conftest import RECORD_JOB, RECORD_TIME, make_record

NOW = RECORD_TIME + timedelta(hours=2)
QUEUED = JobSnapshot(RECORD_JOB, "JOB_STATE_QUEUED", create_time=RECORD_TIME)
RUNNING = JobSnapshot(RECORD_JOB, "JOB_STATE_RUNNING", create_time=RECORD_TIME, start_time=RECORD_TIME)
LISTING = Listing({RECORD_JOB: RUNNING}, frozenset({"us-central1"}), NOW)
SEEN = Seen(RECORD_JOB, "JOB_STATE_RUNNING", "running", NOW + timedelta(minutes=30))
BUILTIN = {"trainer": {"builtin": "tabular"}}


def test_a_job_listed_in_the_state_last_seen_with_nothing_due_is_left_alone():
    assert unchanged(SEEN, LISTING, NOW)


@pytest.mark.parametrize(
    ("seen", "listing", "why"),
    [
        (None, LISTING, "never seen settled (new, stuck, events in its outbox)"),
        (SEEN, Listing({RECORD_JOB: QUEUED}, LISTING.regions, NOW), "listed in another state"),
        (SEEN, Listing({}, LISTING.regions, NOW), "missing from the listing: it has ended"),
        (SEEN, Listing({RECORD_JOB: RUNNING}, frozenset(), NOW), "its region could not be listed"),
        (Seen(RECORD_JOB, "JOB_STATE_RUNNING", "running", NOW), LISTING, "a decision is due"),
        (Seen(RECORD_JOB + "0", "JOB_STATE_RUNNING", "running", SEEN.look_again), LISTING, "another job was seen"),
    ],
)
def test_a_request_is_looked_at_when_the_listing_cannot_vouch_for_it(seen, listing, why):
    assert not unchanged(seen, listing, NOW), why


def test_the_listing_gives_the_job_unless_it_ended_or_the_record_has_seen_it_since():
    record = make_record(state="running", job_state="JOB_STATE_RUNNING")
    assert LISTING.job_of(record) == RUNNING
    assert Listing({}, LISTING.regions, NOW).job_of(record) is None  # ended: read it (GetCustomJob)
    assert Listing({RECORD_JOB: RUNNING}, frozenset(), NOW).job_of(record) is None  # region not listed
    later = make_record(state="running", job_state="JOB_STATE_SUCCEEDED", updated=NOW + timedelta(seconds=1))
    assert LISTING.job_of(later) is None  # the record knows more than the listing
    assert LISTING.job_of(make_record(state="running", job_state="JOB_STATE_RUNNING", updated=later.updated))


def test_what_was_seen_survives_the_active_entrys_metadata_and_nothing_reads_as_nothing():
    assert Seen.from_metadata(SEEN.metadata()) == SEEN
    created = Seen(RECORD_JOB, "JOB_STATE_RUNNING", "running", SEEN.look_again, RECORD_TIME)
    assert Seen.from_metadata(created.metadata()) == created
    assert Seen.from_metadata(NOTHING_SEEN) is None
    assert Seen.from_metadata({}) is None
    assert Seen.from_metadata(SEEN.metadata() | {"seen": "0"}) is None  # another version's
    assert Seen.from_metadata(SEEN.metadata() | {"look_again": "soon"}) is None


def test_a_waiting_job_is_looked_at_again_when_it_will_have_waited_max_pending():
    record = make_record(request=BUILTIN, job_state="JOB_STATE_QUEUED")
    max_pending = timedelta(hours=2, minutes=5)  # NOW is two hours after the job was created
    seen = seen_after(record, QUEUED, NOW, int(max_pending.total_seconds()), max_silence=1800, progress=None)
    due = RECORD_TIME + max_pending + timedelta(seconds=1)
    assert seen == Seen(RECORD_JOB, "JOB_STATE_QUEUED", "submitted", due, created=RECORD_TIME)
    assert seen.look_again < next_look(record.key_hash, NOW)


def test_a_running_built_in_job_is_looked_at_again_when_its_heartbeat_will_have_stood_still_max_silence():
    record = make_record(request=BUILTIN, state="running", job_state="JOB_STATE_RUNNING")
    heard = NOW - timedelta(minutes=10)
    seen = seen_after(record, RUNNING, NOW, 3600, 1800, {"time": heard.timestamp(), "step": 7})
    assert seen is not None and seen.look_again == heard + timedelta(minutes=30, seconds=1)
    no_heartbeat_yet = seen_after(record, RUNNING, NOW, 3600, 1800, {})
    assert no_heartbeat_yet is not None and no_heartbeat_yet.look_again == NOW + timedelta(minutes=30, seconds=1)


def test_a_job_with_nothing_due_is_looked_at_again_within_the_relook_period():
    record = make_record(request={"trainer": {"image": "x"}}, state="running", job_state="JOB_STATE_RUNNING")
    seen = seen_after(record, RUNNING, NOW, 3600, 1800, None)
    assert seen is not None and NOW < seen.look_again <= NOW + RELOOK_EVERY
    assert seen.look_again == next_look(record.key_hash, NOW)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"state": "succeeded"}, "ended"),
        ({"stuck": True}, "stuck: its cancel is sent again each tick until it takes effect"),
        ({"outbox": [{"ce_id": "x"}]}, "events wait in its outbox"),
        ({"state": "claimed", "job_name": None}, "resubmitted: no job yet"),
        ({"job_name": RECORD_JOB + "0"}, "its job is another one"),
    ],
)
def test_a_request_that_is_not_settled_is_seen_as_nothing(fields, why):
    assert seen_after(make_record(request=BUILTIN), RUNNING, NOW, 3600, 1800, None) is not None
    assert seen_after(make_record(**({"request": BUILTIN} | fields)), RUNNING, NOW, 3600, 1800, None) is None, why


def test_each_tick_comes_round_to_a_small_share_of_the_requests():
    """Each request's turn comes once every RELOOK_EVERY, at a moment set by its key: spread over the period, so
    that a tick a sixtieth of the period after all were seen at once re-reads about a sixtieth of them, not all."""
    keys = [f"{i:064x}" for i in range(6000)]
    due_soon = sum(next_look(key, NOW) <= NOW + RELOOK_EVERY / 60 for key in keys)
    assert 50 <= due_soon <= 150
    assert all(NOW < next_look(key, NOW) <= NOW + RELOOK_EVERY for key in keys[:100])
    later = next_look(keys[0], NOW) + timedelta(seconds=1)
    assert next_look(keys[0], later) - next_look(keys[0], NOW) == RELOOK_EVERY  # the same moment, a period on


def test_the_regions_listed_are_the_deployments_and_those_of_jobs_last_seen():
    europe = Seen("projects/p/locations/europe-west4/customJobs/2", "JOB_STATE_RUNNING", "running", NOW)
    assert listings("us-central1", [None, SEEN, europe]) == {
        "europe-west4": [(None, None)],
        "us-central1": [(None, None)],
    }
    assert listings("us-central1", []) == {"us-central1": [(None, None)]}


def test_a_region_with_many_jobs_is_listed_in_create_time_windows_that_leave_no_job_out():
    """Vertex documents no maximum page size: a region of many jobs is listed in windows side by side, each about
    WINDOW_JOBS of the jobs last seen, their bounds whole seconds, the first and last open so that new jobs (and
    jobs of unknown time) are in one."""
    created = [RECORD_TIME + timedelta(seconds=i * 7.3) for i in range(3 * WINDOW_JOBS + 10)]
    windows = listing_windows(created)
    assert len(windows) == 4
    assert windows[0][0] is None and windows[-1][1] is None
    assert all(window[1] == after[0] for window, after in itertools.pairwise(windows))
    assert all(bound.microsecond == 0 for window in windows for bound in window if bound is not None)
    inside = [sum(1 for t in created if (a is None or t >= a) and (b is None or t < b)) for a, b in windows]
    assert sum(inside) == len(created) and max(inside) - min(inside) < WINDOW_JOBS // 10
    assert listing_windows(created[: WINDOW_JOBS - 1]) == [(None, None)]
    assert len(listing_windows(created * 20)) == 8  # at most MAX_WINDOWS
