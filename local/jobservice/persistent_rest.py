"""Vertex AI's PersistentResourceService over its REST mapping (python-aiplatform's
`persistent_resource_service/transports/rest_base.py`, which gcloud's `ai persistent-resources` uses too), on the
local JobService's REST port (persistent_resources.py holds the rules):

    POST   /v1/{parent}/persistentResources?persistentResourceId=ID   PersistentResource → Operation
    GET    /v1/{parent}/persistentResources                           ListPersistentResourcesResponse (pageSize,
                                                                      pageToken)
    GET    /v1/{name=…/persistentResources/*}                         PersistentResource
    DELETE /v1/{name=…/persistentResources/*}                         Operation
    GET    /v1/{name=…/persistentResources/*/operations/*}            Operation; also /ui/…
    (each also under /v1beta1/, gcloud's beta and alpha tracks)
"""

from __future__ import annotations

import re

from google.cloud.aiplatform_v1.types import PersistentResource

from local.jobservice.model_rest import answer, list_query
from local.jobservice.persistent_resources import PersistentResources
from local.jobservice.rest import RestRequest, RestResponse, Route, parse_message

_VERSION = "(?:v1|v1beta1)"
_LOCATION = r"projects/[^/]+/locations/[^/]+"
_RESOURCE = rf"{_LOCATION}/persistentResources/[^/:]+"


def persistent_resource_routes(resources: PersistentResources) -> list[Route]:
    def create(request: RestRequest, match: re.Match[str]) -> RestResponse:
        resource = parse_message(request.json_body(), PersistentResource, "persistent_resource")
        resource_id = request.query.get("persistentResourceId", "")
        return answer(request, lambda: resources.create(match["parent"], resource, resource_id))

    def list_resources(request: RestRequest, match: re.Match[str]) -> RestResponse:
        query = list_query(request)
        return answer(
            request, lambda: resources.list_resources(match["parent"], query["page_size"], query["page_token"])
        )

    def get(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: resources.get(match["name"]))

    def delete(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: resources.delete(match["name"]))

    def get_operation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: resources.get_operation(match["name"]))

    return [
        ("POST", re.compile(rf"/{_VERSION}/(?P<parent>{_LOCATION})/persistentResources"), create),
        ("GET", re.compile(rf"/{_VERSION}/(?P<parent>{_LOCATION})/persistentResources"), list_resources),
        ("GET", re.compile(rf"/(?:v1|v1beta1|ui)/(?P<name>{_RESOURCE}/operations/[^/:]+)"), get_operation),
        ("GET", re.compile(rf"/{_VERSION}/(?P<name>{_RESOURCE})"), get),
        ("DELETE", re.compile(rf"/{_VERSION}/(?P<name>{_RESOURCE})"), delete),
    ]
