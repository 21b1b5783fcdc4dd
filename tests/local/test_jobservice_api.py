"""The local JobService's API, through the stock Vertex JobServiceClient: create, get, list with
filters and paging, delete, and the errors Vertex returns (INVALID_ARGUMENT, NOT_FOUND)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool, unique_value

from local.jobservice.client import wait_for_state

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
