"""Vertex AI's BatchPredictionJobs over the JobService's REST mapping (the http rules of python-aiplatform's
`job_service/transports/rest_base.py`), on the local JobService's REST port, each route calling one
BatchPredictions method (batch_jobs.py):

    POST   /v1/{parent}/batchPredictionJobs                  BatchPredictionJob → BatchPredictionJob
    GET    /v1/{name=…/batchPredictionJobs/*}                BatchPredictionJob
    GET    /v1/{parent}/batchPredictionJobs                  ListBatchPredictionJobsResponse (filter, pageSize…)
    POST   /v1/{name=…/batchPredictionJobs/*}:cancel         {} (the job ends CANCELLED)
    DELETE /v1/{name=…/batchPredictionJobs/*}                Operation (done)
    GET    /v1/{name=…/batchPredictionJobs/*/operations/*}   Operation (a delete's)

Bodies and refusals as model_rest.py gives them (Google's REST error body, with BadRequest field violations); the
create fails as the fault plan says (faults.py), as CreateCustomJob and UploadModel do.
"""

from __future__ import annotations

import re

from google.cloud.aiplatform_v1.types import (
    BatchPredictionJob,
    CreateBatchPredictionJobRequest,
    ListBatchPredictionJobsRequest,
)

from local.jobservice.batch_jobs import BatchPredictions
from local.jobservice.faults import FaultPlan
from local.jobservice.model_rest import answer, list_query
from local.jobservice.model_rules import RegistryError
from local.jobservice.rest import RestRequest, RestResponse, Route, parse_message

_LOCATION = r"projects/[^/]+/locations/[^/]+"
_JOB = rf"{_LOCATION}/batchPredictionJobs/[^/:]+"


def batch_prediction_routes(batches: BatchPredictions, faults: FaultPlan) -> list[Route]:
    def create(request: RestRequest, match: re.Match[str]) -> RestResponse:
        job = parse_message(request.json_body(), BatchPredictionJob, "batch_prediction_job")
        created = CreateBatchPredictionJobRequest(parent=match["parent"], batch_prediction_job=job)

        def create_with_faults() -> BatchPredictionJob:
            failure = faults.next_create_failure("CreateBatchPredictionJob")
            if failure is None:
                return batches.create(created)
            if failure.after_create:
                batches.create(created)  # made, and the answer is lost on the way back
            raise RegistryError(failure.code, failure.message)

        return answer(request, create_with_faults)

    def get(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: batches.get(match["name"]))

    def list_jobs(request: RestRequest, match: re.Match[str]) -> RestResponse:
        query = list_query(request)
        query.pop("order_by", None)  # ListBatchPredictionJobsRequest has no order_by
        listed = ListBatchPredictionJobsRequest(parent=match["parent"], **query)
        return answer(request, lambda: batches.list(listed))

    def cancel(request: RestRequest, match: re.Match[str]) -> RestResponse:
        def cancelled() -> BatchPredictionJob:
            batches.cancel(match["name"])
            return BatchPredictionJob()  # answered as {}: CancelBatchPredictionJob returns Empty

        return answer(request, cancelled)

    def delete(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: batches.delete(match["name"]))

    def get_operation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: batches.get_operation(match["name"]))

    return [
        ("POST", re.compile(rf"/v1/(?P<parent>{_LOCATION})/batchPredictionJobs"), create),
        ("GET", re.compile(rf"/v1/(?P<parent>{_LOCATION})/batchPredictionJobs"), list_jobs),
        ("GET", re.compile(rf"/(?:v1|ui)/(?P<name>{_JOB}/operations/[^/:]+)"), get_operation),
        ("GET", re.compile(rf"/v1/(?P<name>{_JOB})"), get),
        ("POST", re.compile(rf"/v1/(?P<name>{_JOB}):cancel"), cancel),
        ("DELETE", re.compile(rf"/v1/(?P<name>{_JOB})"), delete),
    ]
