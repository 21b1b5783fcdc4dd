"""Vertex AI's EndpointService and PredictionService over their REST mapping (the paths of python-aiplatform's
`endpoint_service/transports/rest_base.py` and `prediction_service/transports/rest_base.py`, which gcloud's
aiplatform v1 client uses too), on the local JobService's REST port:

    POST   /v1/{parent}/endpoints?endpointId=ID               Endpoint → Operation
    GET    /v1/{parent}/endpoints                             ListEndpointsResponse (filter, pageSize, pageToken)
    GET    /v1/{name=…/endpoints/*}                           Endpoint
    PATCH  /v1/{endpoint.name=…/endpoints/*}?updateMask=…     Endpoint → Endpoint
    DELETE /v1/{name=…/endpoints/*}                           Operation
    POST   /v1/{endpoint=…/endpoints/*}:deployModel           {deployedModel, trafficSplit} → Operation
    POST   /v1/{endpoint=…/endpoints/*}:undeployModel         {deployedModelId, trafficSplit} → Operation
    GET    /v1/{name=…/endpoints/*/operations/*}              Operation; also /ui/…
    (each also under /v1beta1/, which gcloud's deploy-model uses)
    POST   /v1/{endpoint=…/endpoints/*}:predict               {instances, parameters} → PredictResponse
    POST   /v1/{endpoint=…/endpoints/*}:rawPredict            any body → the model server's answer
"""

from __future__ import annotations

import re
from collections.abc import Callable

from google.cloud.aiplatform_v1.types import DeployModelRequest, Endpoint, ListEndpointsRequest, UndeployModelRequest
from google.protobuf import field_mask_pb2

from local.jobservice.endpoint_service import EndpointService
from local.jobservice.model_rest import answer, list_query, registry_abort
from local.jobservice.model_rules import RegistryError, refuse_invalid
from local.jobservice.prediction import PredictionRouter
from local.jobservice.rest import RestRequest, RestResponse, Route, parse_message

# gcloud's GA `ai endpoints deploy-model` polls its operation on v1beta1 (its beta client): the same paths and,
# for every field read here, the same messages.
_VERSION = "(?:v1|v1beta1)"
_LOCATION = r"projects/[^/]+/locations/[^/]+"
_ENDPOINT = rf"{_LOCATION}/endpoints/[^/:]+"


def endpoint_service_routes(endpoints: EndpointService, router: PredictionRouter) -> list[Route]:
    def create(request: RestRequest, match: re.Match[str]) -> RestResponse:
        endpoint = parse_message(request.json_body(), Endpoint, "endpoint")
        endpoint_id = request.query.get("endpointId", "")
        return answer(request, lambda: endpoints.create(match["parent"], endpoint, endpoint_id))

    def list_endpoints(request: RestRequest, match: re.Match[str]) -> RestResponse:
        query = list_query(request)
        listed = ListEndpointsRequest(parent=match["parent"], **query)
        return answer(request, lambda: endpoints.list_endpoints(listed))

    def get(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: endpoints.get(match["name"]))

    def update(request: RestRequest, match: re.Match[str]) -> RestResponse:
        endpoint = parse_message(request.json_body(), Endpoint, "endpoint")
        endpoint.name = match["name"]
        mask = field_mask_pb2.FieldMask()
        try:
            mask.FromJsonString(request.query.get("updateMask", ""))
        except ValueError as error:
            refuse_invalid([("update_mask", str(error))])
        return answer(request, lambda: endpoints.update(endpoint, list(mask.paths)))

    def delete(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: endpoints.delete(match["name"]))

    def deploy(request: RestRequest, match: re.Match[str]) -> RestResponse:
        deploy_request = parse_message(request.json_body(), DeployModelRequest, "deploy_model_request")
        deploy_request.endpoint = match["endpoint"]
        return answer(request, lambda: endpoints.deploy(deploy_request))

    def undeploy(request: RestRequest, match: re.Match[str]) -> RestResponse:
        undeploy_request = parse_message(request.json_body(), UndeployModelRequest, "undeploy_model_request")
        undeploy_request.endpoint = match["endpoint"]
        return answer(request, lambda: endpoints.undeploy(undeploy_request))

    def get_operation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return answer(request, lambda: endpoints.get_operation(match["name"]))

    def predict(request: RestRequest, match: re.Match[str]) -> RestResponse:
        request.json_body()  # a body that is no JSON object is refused before any model is asked
        return _routed(lambda: router.predict(match["endpoint"], request.body, raw=False))

    def raw_predict(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return _routed(lambda: router.predict(match["endpoint"], request.body, raw=True))

    return [
        ("POST", re.compile(rf"/{_VERSION}/(?P<parent>{_LOCATION})/endpoints"), create),
        ("GET", re.compile(rf"/{_VERSION}/(?P<parent>{_LOCATION})/endpoints"), list_endpoints),
        ("GET", re.compile(rf"/(?:v1|v1beta1|ui)/(?P<name>{_ENDPOINT}/operations/[^/:]+)"), get_operation),
        ("GET", re.compile(rf"/{_VERSION}/(?P<name>{_ENDPOINT})"), get),
        ("PATCH", re.compile(rf"/{_VERSION}/(?P<name>{_ENDPOINT})"), update),
        ("DELETE", re.compile(rf"/{_VERSION}/(?P<name>{_ENDPOINT})"), delete),
        ("POST", re.compile(rf"/{_VERSION}/(?P<endpoint>{_ENDPOINT}):deployModel"), deploy),
        ("POST", re.compile(rf"/{_VERSION}/(?P<endpoint>{_ENDPOINT}):undeployModel"), undeploy),
        ("POST", re.compile(rf"/{_VERSION}/(?P<endpoint>{_ENDPOINT}):predict"), predict),
        ("POST", re.compile(rf"/{_VERSION}/(?P<endpoint>{_ENDPOINT}):rawPredict"), raw_predict),
    ]


def _routed(call: Callable[[], RestResponse]) -> RestResponse:
    """The router's own answer, or a refusal of the endpoint service as Google's error body."""
    try:
        return call()
    except RegistryError as refusal:
        raise registry_abort(refusal) from None
