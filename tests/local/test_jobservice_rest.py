"""The local JobService over Vertex's REST mapping: the stock `JobServiceClient` with `transport="rest"`
(the transport the Vertex SDK uses with `api_transport="rest"`) and plain HTTP, on the same jobs and the
same rules as gRPC; refusals in Google's REST error shape with the HTTP status of their gRPC code."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
import requests
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient, JobState
from google.rpc import error_details_pb2
from job_specs import PARENT, custom_job, pool, unique_value

from local.jobservice.client import wait_for_state
from local.jobservice.rest import HTTP_STATUS
from local.jobservice.standalone import JobServiceProcess

pytestmark = pytest.mark.integration

# What the SDK's REST transport adds to every request (reference/apis.md §1).
INTEGER_ENUMS = "%24alt=json%3Benum-encoding%3Dint"


@pytest.fixture
def rest_client(jobservice: JobServiceProcess) -> JobServiceClient:
    return JobServiceClient(
        transport="rest",
        client_options={"api_endpoint": jobservice.rest_url.rstrip("/")},
        credentials=AnonymousCredentials(),
    )


def url(jobservice: JobServiceProcess, path: str) -> str:
    return f"{jobservice.rest_url}v1/{path}"


def invalid_job() -> dict[str, Any]:
    """Two of Vertex's INVALID_ARGUMENT rules broken: a count without a type, and no image."""
    return {
        "displayName": "invalid",
        "jobSpec": {
            "workerPoolSpecs": [
                {"replicaCount": "1", "machineSpec": {"machineType": "n1-standard-8", "acceleratorCount": 2}}
            ]
        },
    }


def test_the_rest_transport_creates_gets_lists_and_cancels_jobs_the_grpc_clients_see(
    rest_client: JobServiceClient, job_client: JobServiceClient
):
    """Guards issue 13 item 1: REST on the same store and behaviour as gRPC."""
    run = unique_value()
    finished = rest_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool(), labels={"run": run}))
    running = rest_client.create_custom_job(
        parent=PARENT, custom_job=custom_job(pool("--sleep", "60"), labels={"run": run, "kind": "long"})
    )
    assert finished.state == JobState.JOB_STATE_QUEUED
    assert wait_for_state(rest_client, finished.name).state == JobState.JOB_STATE_SUCCEEDED
    assert job_client.get_custom_job(name=finished.name).state == JobState.JOB_STATE_SUCCEEDED  # one store

    listed = rest_client.list_custom_jobs(request={"parent": PARENT, "filter": f"labels.run={run}", "page_size": 1})
    assert [page.custom_jobs[0].name for page in listed.pages] == [finished.name, running.name]
    long_ones = rest_client.list_custom_jobs(
        request={"parent": PARENT, "filter": f"labels.run={run} AND labels.kind:*"}
    )
    assert [job.name for job in long_ones] == [running.name]

    rest_client.cancel_custom_job(name=running.name)
    assert wait_for_state(job_client, running.name).state == JobState.JOB_STATE_CANCELLED


def test_the_rest_transport_sends_the_read_mask_and_gets_only_those_fields(
    jobservice: JobServiceProcess, rest_client: JobServiceClient, jobservice_control
):
    """Issue 25, point 9: the mask travels as `readMask=name,createTime,…` (a FieldMask's JSON form), as the
    controller sends it too, and the listing carries only those fields."""
    run = unique_value()
    [parked] = jobservice_control.park_jobs(PARENT, custom_job(pool()), [{"run": run}])
    request = {"parent": PARENT, "filter": f'labels.run="{run}"', "read_mask": {"paths": ["name", "create_time"]}}

    (listed,) = rest_client.list_custom_jobs(request=request)

    assert (listed.name, listed.state, listed.display_name, dict(listed.labels)) == (parked, 0, "", {})
    assert listed.create_time is not None
    query = {"filter": f'labels.run="{run}"', "readMask": "name,state,createTime,labels"}
    (plain,) = requests.get(url(jobservice, f"{PARENT}/customJobs"), params=query, timeout=10).json()["customJobs"]
    assert set(plain) == {"name", "state", "createTime", "labels"}


def test_delete_returns_a_finished_operation_that_can_be_read_back(
    jobservice: JobServiceProcess, rest_client: JobServiceClient
):
    """Guards issue 13 item 1: delete is a long-running operation, as Vertex returns it, and operations GET works."""
    job = rest_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool()))
    wait_for_state(rest_client, job.name)

    deleted = requests.delete(url(jobservice, job.name), timeout=10)

    assert deleted.status_code == 200, deleted.text
    operation = deleted.json()
    assert operation["name"].startswith(f"{PARENT}/operations/")
    assert operation["done"] is True
    assert operation["metadata"]["@type"] == "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata"
    assert operation["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    assert requests.get(url(jobservice, operation["name"]), timeout=10).json() == operation
    with pytest.raises(exceptions.NotFound):
        rest_client.get_custom_job(name=job.name)
    assert requests.get(url(jobservice, f"{PARENT}/operations/1"), timeout=10).status_code == 404


def test_enums_are_names_unless_the_request_asks_for_integers(jobservice: JobServiceProcess):
    """Guards issue 13 item 1: json_format's mapping, and `$alt=json;enum-encoding=int` as the SDK sends it."""
    body = {
        "displayName": "enums",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "replicaCount": "1",
                    "machineSpec": {"machineType": "n1-standard-8", "acceleratorType": 5, "acceleratorCount": 2},
                    "containerSpec": {"imageUri": "localhost/tests/fake-node:latest"},
                }
            ]
        },
    }

    as_numbers = requests.post(url(jobservice, f"{PARENT}/customJobs?{INTEGER_ENUMS}"), json=body, timeout=10).json()
    as_names = requests.get(url(jobservice, f"{as_numbers['name']}?alt=json"), timeout=10).json()

    assert as_numbers["state"] == JobState.JOB_STATE_QUEUED.value
    assert as_numbers["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == 5
    assert as_names["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_T4"
    assert as_names["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"  # int64 as a string


def test_the_same_invalid_job_is_refused_with_the_same_status_over_grpc_and_rest(
    jobservice: JobServiceProcess, job_client: JobServiceClient
):
    """Guards issue 13 acceptance (c) and item 1's error shape: INVALID_ARGUMENT, HTTP 400, the same message
    and the same BadRequest field violations over both protocols."""
    with pytest.raises(exceptions.InvalidArgument) as over_grpc:
        job_client.create_custom_job(parent=PARENT, custom_job=CustomJob.from_json(json.dumps(invalid_job())))

    refused = requests.post(url(jobservice, f"{PARENT}/customJobs"), json=invalid_job(), timeout=10)

    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"] == over_grpc.value.message
    (detail,) = error["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    grpc_violations = [
        {"field": violation.field, "description": violation.description}
        for detail in over_grpc.value.details
        if isinstance(detail, error_details_pb2.BadRequest)
        for violation in detail.field_violations
    ]
    assert detail["fieldViolations"] == grpc_violations
    assert len(grpc_violations) == 2


def test_refusals_carry_the_http_status_of_their_grpc_code(
    jobservice: JobServiceProcess, rest_client: JobServiceClient
):
    """Guards issue 13 item 1: NOT_FOUND 404, FAILED_PRECONDITION 400, unknown JSON fields 400 INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED 429 (google/rpc/code.proto)."""
    missing = requests.get(url(jobservice, f"{PARENT}/customJobs/1"), timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"

    job = rest_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool()))
    wait_for_state(rest_client, job.name)
    ended = requests.post(url(jobservice, f"{job.name}:cancel"), json={}, timeout=10)
    assert (ended.status_code, ended.json()["error"]["status"]) == (400, "FAILED_PRECONDITION")
    with pytest.raises(exceptions.BadRequest):  # the REST client classes by HTTP status alone
        rest_client.cancel_custom_job(name=job.name)

    unknown = requests.post(url(jobservice, f"{PARENT}/customJobs"), json={"displayName": "x", "colour": 1}, timeout=10)
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"] == (
        "Invalid JSON payload received. Unknown name \"colour\" at 'custom_job': Cannot find field."
    )

    jobservice.control.rate_limit_next_calls(1, methods=("GetCustomJob",))
    try:
        limited = requests.get(url(jobservice, job.name), timeout=10)
    finally:
        jobservice.control.clear_faults()
    assert (limited.status_code, limited.json()["error"]["status"]) == (429, "RESOURCE_EXHAUSTED")


def test_every_grpc_code_has_the_http_status_of_code_proto():
    """Guards issue 13 item 1: google/rpc/code.proto's HTTP mapping, for every code."""
    assert set(HTTP_STATUS) == set(grpc.StatusCode)
    assert HTTP_STATUS[grpc.StatusCode.CANCELLED] == 499
    assert HTTP_STATUS[grpc.StatusCode.UNKNOWN] == HTTP_STATUS[grpc.StatusCode.DATA_LOSS] == 500
    assert HTTP_STATUS[grpc.StatusCode.UNAVAILABLE] == 503
