"""The local JobService's API, through the stock Vertex JobServiceClient: create, get, list with
filters and paging, delete, and the errors Vertex returns (INVALID_ARGUMENT, NOT_FOUND)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool, unique_value

from local.jobservice.client import wait_for_state
from local.jobservice.servicer import MAX_PAGE_SIZE

pytestmark = pytest.mark.integration


def create(client: JobServiceClient, job: dict):
    return client.create_custom_job(parent=PARENT, custom_job=job)


def test_a_created_job_is_queued_with_a_numeric_id_and_a_create_time(job_client: JobServiceClient):
    job = create(job_client, custom_job(pool(), labels={"case": "create"}))

    assert job.name.startswith(f"{PARENT}/customJobs/")
    assert job.name.rsplit("/", 1)[1].isdigit()
    assert job.state == JobState.JOB_STATE_QUEUED
    assert job.create_time is not None
    assert job_client.get_custom_job(name=job.name).labels["case"] == "create"


def test_a_finished_job_has_start_end_and_update_times_in_order(job_client: JobServiceClient):
    job = create(job_client, custom_job(pool()))

    done = wait_for_state(job_client, job.name)

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert done.create_time <= done.start_time <= done.end_time <= done.update_time


def test_label_and_state_filters_return_exactly_the_matching_jobs(job_client: JobServiceClient):
    run = unique_value()
    succeeds = create(job_client, custom_job(pool(), labels={"run": run, "kind": "ok"}))
    fails = create(job_client, custom_job(pool("--exit-code", "1"), labels={"run": run, "kind": "bad"}))
    unlabelled = create(job_client, custom_job(pool("--exit-code", "1"), labels={"run": run}))
    for job in (succeeds, fails, unlabelled):
        wait_for_state(job_client, job.name)

    def names(filter_: str) -> set[str]:
        return {job.name for job in job_client.list_custom_jobs(request={"parent": PARENT, "filter": filter_})}

    assert names(f"labels.run={run}") == {succeeds.name, fails.name, unlabelled.name}
    assert names(f"labels.run={run} AND labels.kind=ok") == {succeeds.name}
    assert names(f'labels.run="{run}" AND labels.kind:*') == {succeeds.name, fails.name}
    assert names(f'labels.run={run} AND state="JOB_STATE_FAILED"') == {fails.name, unlabelled.name}
    assert names(f"labels.run={run} AND state!=JOB_STATE_FAILED") == {succeeds.name}
    assert names(f"labels.run={run} AND NOT labels.kind:*") == {unlabelled.name}
    assert names(f"labels.run={run} AND (labels.kind=ok OR labels.kind=bad)") == {succeeds.name, fails.name}


def test_listing_pages_through_every_job_once(job_client: JobServiceClient):
    run = unique_value()
    created = [create(job_client, custom_job(pool(), labels={"run": run})).name for _ in range(5)]

    pager = job_client.list_custom_jobs(request={"parent": PARENT, "filter": f"labels.run={run}", "page_size": 2})
    pages = list(pager.pages)

    assert [len(page.custom_jobs) for page in pages] == [2, 2, 1]
    assert [job.name for page in pages for job in page.custom_jobs] == created


def test_a_listing_by_label_and_waiting_or_running_states_pages_with_only_the_masked_fields(
    job_client: JobServiceClient, jobservice_control
):
    """Issue 25, point 9: what the reconcile sweep asks (a label, states joined by OR, a page size, a read mask) is
    answered as Vertex documents it, through the stock client: only matching jobs, page after page, each with only
    the fields the mask names."""
    run = unique_value()
    [queued, other] = jobservice_control.park_jobs(PARENT, custom_job(pool()), [{"run": run}, {"run": "x" + run}])
    running = create(job_client, custom_job(pool("--sleep", "60"), labels={"run": run}))
    ended = create(job_client, custom_job(pool(), labels={"run": run}))
    wait_for_state(job_client, running.name, [JobState.JOB_STATE_RUNNING])
    wait_for_state(job_client, ended.name)
    active = (
        f'labels.run="{run}" AND (state="JOB_STATE_QUEUED" OR state="JOB_STATE_PENDING" OR state="JOB_STATE_RUNNING")'
    )
    mask = {"paths": ["name", "state", "create_time", "start_time", "labels"]}

    pager = job_client.list_custom_jobs(request={"parent": PARENT, "filter": active, "page_size": 1, "read_mask": mask})
    pages = list(pager.pages)

    assert [[job.name for job in page.custom_jobs] for page in pages] == [[queued], [running.name]]
    assert pages[0].next_page_token and not pages[1].next_page_token
    listed = pages[1].custom_jobs[0]
    assert (listed.state, dict(listed.labels)) == (JobState.JOB_STATE_RUNNING, {"run": run})
    assert listed.create_time <= listed.start_time
    assert (listed.display_name, len(listed.job_spec.worker_pool_specs), listed.update_time) == ("", 0, None)
    job_client.cancel_custom_job(name=running.name)
    assert job_client.get_custom_job(name=queued).state == JobState.JOB_STATE_QUEUED  # nothing runs a parked job
    job_client.cancel_custom_job(name=queued)
    assert job_client.get_custom_job(name=queued).state == JobState.JOB_STATE_CANCELLED  # …until it is cancelled
    assert job_client.get_custom_job(name=other).state == JobState.JOB_STATE_QUEUED


def test_a_page_larger_than_the_maximum_is_cut_to_it_and_a_negative_one_is_refused(
    job_client: JobServiceClient, jobservice_control
):
    """Issue 25, point 9: AIP-158's rules for page_size, which Vertex documents only as "the standard list page
    size": larger than the maximum is coerced down to it, negative is INVALID_ARGUMENT; so is a mask naming a field
    CustomJob has not."""
    run = unique_value()
    names = jobservice_control.park_jobs(PARENT, custom_job(pool()), [{"run": run}] * (MAX_PAGE_SIZE + 1))
    request = {"parent": PARENT, "filter": f"labels.run={run}", "page_size": 5000}

    pages = list(job_client.list_custom_jobs(request=request).pages)

    assert [len(page.custom_jobs) for page in pages] == [MAX_PAGE_SIZE, 1]
    assert [job.name for page in pages for job in page.custom_jobs] == names
    jobservice_control.cap_list_pages(400)  # as Vertex's pages may hold fewer: its maximum is not documented
    assert [len(page.custom_jobs) for page in job_client.list_custom_jobs(request=request).pages] == [400, 400, 201]
    with pytest.raises(exceptions.InvalidArgument, match="page_size"):
        list(job_client.list_custom_jobs(request=request | {"page_size": -1}))
    with pytest.raises(exceptions.InvalidArgument, match="read_mask"):
        list(job_client.list_custom_jobs(request=request | {"read_mask": {"paths": ["colour"]}}))


def test_an_unknown_filter_field_is_invalid(job_client: JobServiceClient):
    with pytest.raises(exceptions.InvalidArgument, match="unsupported field"):
        list(job_client.list_custom_jobs(request={"parent": PARENT, "filter": "colour=red"}))


def test_a_deleted_job_is_gone(job_client: JobServiceClient):
    job = create(job_client, custom_job(pool()))
    wait_for_state(job_client, job.name)

    job_client.delete_custom_job(name=job.name).result(timeout=10)

    with pytest.raises(exceptions.NotFound):
        job_client.get_custom_job(name=job.name)


def test_a_running_job_cannot_be_deleted(job_client: JobServiceClient, tmp_path):
    job = create(job_client, custom_job(pool("--sleep", "60")))
    wait_for_state(job_client, job.name, [JobState.JOB_STATE_RUNNING])

    with pytest.raises(exceptions.FailedPrecondition):
        job_client.delete_custom_job(name=job.name)
    job_client.cancel_custom_job(name=job.name)
    wait_for_state(job_client, job.name)


@pytest.mark.parametrize("call", ["get_custom_job", "cancel_custom_job", "delete_custom_job"])
def test_an_unknown_job_is_not_found(job_client: JobServiceClient, call: str):
    with pytest.raises(exceptions.NotFound):
        getattr(job_client, call)(name=f"{PARENT}/customJobs/123")


def with_pools(*pools: dict) -> dict:
    return custom_job(*pools)


INVALID_JOBS = {
    "no worker pools": (with_pools(), "worker_pool_specs[0]"),
    "an empty first pool": (with_pools({}, pool()), "worker_pool_specs[0]"),
    "two primary replicas": (with_pools(pool(replicas=2)), "worker_pool_specs[0].replica_count"),
    "an accelerator type without a count": (
        with_pools(pool(count=0)),
        "Both `accelerator_type` and `accelerator_count` should be specified or none.",
    ),
    "a machine that does not take that GPU": (
        with_pools(pool(machine="n1-standard-4", accelerator="NVIDIA_TESLA_A100", count=1)),
        "worker_pool_specs[0].machine_spec.accelerator_type",
    ),
    "the wrong GPU count for a machine": (
        with_pools(pool(machine="a2-highgpu-1g", accelerator="NVIDIA_TESLA_A100", count=2)),
        "has exactly 1 NVIDIA_TESLA_A100",
    ),
    "a display name of 129 characters": (custom_job(pool(), display_name="x" * 129), "display_name"),
    "an upper-case label key": (custom_job(pool(), labels={"Team": "ml"}), "custom_job.labels.Team"),
    "a label value with a space": (custom_job(pool(), labels={"team": "m l"}), "custom_job.labels.team"),
}


@pytest.mark.parametrize("case", INVALID_JOBS, ids=list(INVALID_JOBS))
def test_vertex_rejects_it_with_invalid_argument(job_client: JobServiceClient, case: str):
    job, named_in_error = INVALID_JOBS[case]
    run = unique_value()
    job["labels"] = {**job["labels"], "run": run}

    with pytest.raises(exceptions.InvalidArgument) as error:
        create(job_client, job)

    assert named_in_error in error.value.message
    assert error.value.message.startswith("List of found errors:")
    assert list(job_client.list_custom_jobs(request={"parent": PARENT, "filter": f"labels.run={run}"})) == []
