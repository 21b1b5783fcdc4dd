"""Vertex AI's ModelService over its REST mapping (`/v1/projects/*/locations/*/models…`, the paths
python-aiplatform's `model_service/transports/rest_base.py` and gcloud's aiplatform v1 client use), on the
local JobService's REST port, each route calling one ModelRegistry method:

    POST   /v1/{parent}/models:upload                    UploadModelRequest → Operation
    GET    /v1/{name=…/models/*/operations/*}            Operation (the upload's, the deletes'); also /ui/…
    GET    /v1/{name=…/models/*}                         Model (M, M@VERSION_ID, M@ALIAS)
    GET    /v1/{parent}/models                           ListModelsResponse (filter, pageSize, pageToken)
    GET    /v1/{name=…/models/*}:listVersions            ListModelVersionsResponse
    POST   /v1/{name=…/models/*}:mergeVersionAliases     {versionAliases} → Model
    DELETE /v1/{name=…/models/*}:deleteVersion           Operation
    DELETE /v1/{name=…/models/*}                         Operation
    POST   /v1/{parent=…/models/*}/evaluations:import    {modelEvaluation} → ModelEvaluation
    GET    /v1/{parent=…/models/*}/evaluations           ListModelEvaluationsResponse
    GET    /v1/{name=…/models/*/evaluations/*}           ModelEvaluation

Bodies and refusals as rest.py gives them for the JobService; UploadModel fails as the fault plan says
(faults.py), as CreateCustomJob does on the gRPC port.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import (
    ImportModelEvaluationRequest,
    ListModelEvaluationsRequest,
    ListModelsRequest,
    ListModelVersionsRequest,
    MergeVersionAliasesRequest,
    UploadModelRequest,
)
from google.longrunning import operations_pb2
from google.protobuf import any_pb2
from google.rpc import error_details_pb2

from local.jobservice.faults import FaultPlan
from local.jobservice.model_registry import ModelRegistry
from local.jobservice.model_rules import RegistryError
from local.jobservice.rest import RestAbort, RestRequest, RestResponse, Route, message_json, parse_message

_LOCATION = r"projects/[^/]+/locations/[^/]+"
_MODEL = rf"{_LOCATION}/models/[^/:]+"


def model_service_routes(registry: ModelRegistry, faults: FaultPlan) -> list[Route]:
    def upload(request: RestRequest, match: re.Match[str]) -> RestResponse:
        upload_request = parse_message(request.json_body(), UploadModelRequest, "upload_model_request")
        upload_request.parent = match["parent"]

        def upload_with_faults() -> operations_pb2.Operation:
            failure, seconds = faults.next_create_failure("UploadModel"), faults.next_upload_seconds()
            if failure is None:
                return registry.upload(upload_request, seconds)
            if failure.after_create:
                registry.upload(upload_request, seconds)  # started, and the answer is lost on the way back
            raise RegistryError(failure.code, failure.message)

        return answer(request, upload_with_faults)

    def get_operation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: registry.get_operation(match["name"]))

    def get(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: registry.get(match["name"]))

    def list_models(request: RestRequest, match: re.Match[str]) -> RestResponse:
        listed = ListModelsRequest(parent=match["parent"], **list_query(request))
        return answer(request, lambda: registry.list_models(listed))

    def list_versions(request: RestRequest, match: re.Match[str]) -> RestResponse:
        listed = ListModelVersionsRequest(name=match["name"], **list_query(request))
        return answer(request, lambda: registry.list_versions(listed))

    def merge_aliases(request: RestRequest, match: re.Match[str]) -> RestResponse:
        merge = parse_message(request.json_body(), MergeVersionAliasesRequest, "merge_version_aliases_request")
        merge.name = match["name"]
        return answer(request, lambda: registry.merge_version_aliases(merge))

    def delete_version(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: registry.delete_version(match["name"]))

    def delete_model(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: registry.delete_model(match["name"]))

    def import_evaluation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        imported = parse_message(request.json_body(), ImportModelEvaluationRequest, "import_model_evaluation_request")
        imported.parent = match["parent"]
        return answer(request, lambda: registry.import_evaluation(imported))

    def list_evaluations(request: RestRequest, match: re.Match[str]) -> RestResponse:
        query = list_query(request)
        query.pop("order_by", None)  # ListModelEvaluationsRequest has no order_by
        listed = ListModelEvaluationsRequest(parent=match["parent"], **query)
        return answer(request, lambda: registry.list_evaluations(listed))

    def get_evaluation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: registry.get_evaluation(match["name"]))

    return [
        ("POST", re.compile(rf"/v1/(?P<parent>{_LOCATION})/models:upload"), upload),
        # The clients' operations transport takes the first http rule that matches, and `/ui/…` comes first.
        ("GET", re.compile(rf"/(?:v1|ui)/(?P<name>{_MODEL}/operations/[^/:]+)"), get_operation),
        ("GET", re.compile(rf"/v1/(?P<parent>{_LOCATION})/models"), list_models),
        ("GET", re.compile(rf"/v1/(?P<name>{_MODEL})"), get),
        ("DELETE", re.compile(rf"/v1/(?P<name>{_MODEL})"), delete_model),
        ("GET", re.compile(rf"/v1/(?P<name>{_MODEL}):listVersions"), list_versions),
        ("POST", re.compile(rf"/v1/(?P<name>{_MODEL}):mergeVersionAliases"), merge_aliases),
        ("DELETE", re.compile(rf"/v1/(?P<name>{_MODEL}):deleteVersion"), delete_version),
        ("POST", re.compile(rf"/v1/(?P<parent>{_MODEL})/evaluations:import"), import_evaluation),
        ("GET", re.compile(rf"/v1/(?P<parent>{_MODEL})/evaluations"), list_evaluations),
        ("GET", re.compile(rf"/v1/(?P<name>{_MODEL}/evaluations/[^/:]+)"), get_evaluation),
    ]


def list_query(request: RestRequest) -> dict:
    """The standard list parameters of the query string (readMask is read and ignored: whole messages)."""
    query = request.query
    try:
        page_size = int(query.get("pageSize") or 0)
    except ValueError:
        raise RestAbort(
            grpc.StatusCode.INVALID_ARGUMENT, f"Invalid value at 'page_size' (TYPE_INT32), {query['pageSize']!r}"
        ) from None
    return {
        "filter": query.get("filter", ""),
        "page_size": page_size,
        "page_token": query.get("pageToken", ""),
        "order_by": query.get("orderBy", ""),
    }


def answer(request: RestRequest, call: Callable[[], Any]) -> RestResponse:
    """The call's result as JSON, or its refusal as a RestAbort (Google's error body, with BadRequest)."""
    try:
        result = call()
    except RegistryError as refusal:
        raise registry_abort(refusal) from None
    return RestResponse(200, message_json(result, request.integer_enums))


def registry_abort(refusal: RegistryError) -> RestAbort:
    """A refusal of the registry (or the endpoint service) as the REST error it becomes."""
    details: list[Any] = []
    if refusal.violations:
        detail = any_pb2.Any()
        violations = [
            error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
            for field, description in refusal.violations
        ]
        detail.Pack(error_details_pb2.BadRequest(field_violations=violations))
        details.append(detail)
    return RestAbort(refusal.code, refusal.message, details)
