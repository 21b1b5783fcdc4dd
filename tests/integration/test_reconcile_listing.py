"""The reconcile sweep by listing (issue 25, point 9), on the live functions and the local JobService: one
ListCustomJobs of the deployment's waiting and running jobs a tick; a state change is seen from the listing, a job
missing from it has ended and only that one is read (GetCustomJob); every transition is published once; a listing
that fails leaves the tick to read each job, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from functions.ledger.keys import key_hash
from functions.lifecycle.sweep import Seen
from local.jobservice.client import wait_for_state
from tests.integration.deployment import Deployment, fake_node_request, serving

RUNNING, SUCCEEDED = 3, 4  # JobState


@pytest.fixture
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path) -> Iterator[Deployment]:
    """A deployment of the test's own: its ledger's active requests are only the test's."""
    with serving(jobservice, tmp_path) as deployed:
        yield deployed


def calls_during(control, act) -> tuple[object, dict[str, int]]:
    """What `act()` returned, and how many calls of each JobService method it made."""
    before = control.call_counts()
    result = act()
    after = control.call_counts()
    return result, {
        method: after[method] - before.get(method, 0) for method in after if after[method] != before.get(method, 0)
    }


def seen_on_entry(deployment: Deployment, request_key: str) -> Seen | None:
    blob = deployment.storage().bucket(deployment.control_bucket).get_blob(f"active/{key_hash(request_key)}")
    return Seen.from_metadata(blob.metadata or {}) if blob is not None else None


def test_a_state_change_is_seen_from_the_listing_and_only_the_ended_job_is_read(
    deployment, jobservice_control, job_client
):
    """Issue 25, point 9: a QUEUED → RUNNING change is read from the listing and an ended job — missing from the
    listing — is the one job read with GetCustomJob; each transition is published once. Before, each tick read every
    active request's job (here: two GetCustomJob, and as many as there are active requests)."""
    events = deployment.events()
    jobservice_control.hold_next_in_queue(seconds=4, count=2)  # both still wait at the first tick
    assert deployment.request(fake_node_request("listed-waits", "--sleep", "60")) == 200
    assert deployment.request(fake_node_request("listed-ends", "--sleep", "0.2")) == 200
    first = deployment.reconcile()  # sees both for the first time: reads each record, notes what it saw
    assert first["errors"] == 0
    waits = deployment.record("request:listed-waits")["job_name"]
    ends = deployment.record("request:listed-ends")["job_name"]
    wait_for_state(job_client, waits, [RUNNING])
    wait_for_state(job_client, ends, [SUCCEEDED])

    summary, calls = calls_during(jobservice_control, deployment.reconcile)

    assert calls == {"ListCustomJobs": 1, "GetCustomJob": 1}
    assert summary["errors"] == 0
    assert events.states("listed-waits") == ["accepted", "submitted", "running"]
    assert events.states("listed-ends")[-1] == "succeeded"
    assert seen_on_entry(deployment, "request:listed-waits").job_state == "JOB_STATE_RUNNING"
    assert seen_on_entry(deployment, "request:listed-ends") is None  # retired

    again, calls = calls_during(jobservice_control, deployment.reconcile)

    assert calls == {"ListCustomJobs": 1}  # nothing changed: no job and no record is read
    assert (again["active"], again["unchanged"], again["running"]) == (1, 1, 1)
    assert events.states("listed-waits").count("running") == 1
    assert events.states("listed-ends").count("succeeded") == 1
    job_client.cancel_custom_job(name=waits)


def test_a_tick_whose_listing_is_refused_reads_each_job_instead(deployment, jobservice_control, job_client):
    """Issue 25, point 9: the listing saves reads; without it (here PERMISSION_DENIED) the tick reads each request's
    job as before, and nothing is missed."""
    events = deployment.events()
    jobservice_control.hold_next_in_queue(seconds=3, count=2)  # both still wait at the first tick
    assert deployment.request(fake_node_request("unlisted-1", "--sleep", "0.2")) == 200
    assert deployment.request(fake_node_request("unlisted-2", "--sleep", "0.2")) == 200
    deployment.reconcile()
    for request_id in ("unlisted-1", "unlisted-2"):
        wait_for_state(job_client, deployment.record(f"request:{request_id}")["job_name"])
    jobservice_control.deny_next_calls(1, methods=("ListCustomJobs",))

    summary, calls = calls_during(jobservice_control, deployment.reconcile)

    assert calls == {"ListCustomJobs": 1, "GetCustomJob": 2}
    assert summary["errors"] == 0
    assert events.states("unlisted-1")[-1] == events.states("unlisted-2")[-1] == "succeeded"


def test_what_the_sweep_saw_is_kept_on_the_active_entry_and_a_stuck_job_is_looked_at_every_tick(
    deployment, jobservice_control, job_client
):
    """Issue 25, point 9: a job waiting to start is noted with the moment it will have waited max_pending; once it
    has, the tick looks at it (from the listing), declares it stuck and cancels it — and keeps looking until it
    ended, since a cancel may not take effect."""
    events = deployment.events()
    jobservice_control.hold_next_in_queue(seconds=60)
    request = fake_node_request("listed-stuck", scheduling={"max_pending": 3})
    assert deployment.request(request) == 200
    deployment.reconcile()
    seen = seen_on_entry(deployment, "request:listed-stuck")
    job = deployment.record("request:listed-stuck")["job_name"]
    assert seen is not None and (seen.job, seen.job_state) == (job, "JOB_STATE_QUEUED")
    created = job_client.get_custom_job(name=job).create_time
    assert abs((seen.look_again - created).total_seconds() - 4) < 1  # max_pending, and a second past it

    stuck = events.wait_for("listed-stuck", "stuck", act=deployment.reconcile)

    assert stuck.reason == "quota"
    assert seen_on_entry(deployment, "request:listed-stuck") is None  # looked at each tick until it has ended
    cancelled = events.wait_for("listed-stuck", "cancelled", act=deployment.reconcile)
    assert json.loads(cancelled.model_dump_json())["reason"] == "quota"
