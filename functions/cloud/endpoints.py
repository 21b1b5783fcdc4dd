"""Vertex AI's EndpointService and online prediction over the REST API (v1), one small HTTP call per operation, on the
JobService's endpoint (the regional one, or `vertex_endpoint` for the local stack) with the same retry policy and
Google's error shape (functions/cloud/vertex.py).

The calls and their REST forms (googleapis google/cloud/aiplatform/v1/endpoint_service.proto, prediction_service.proto;
https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints):
  CreateEndpoint  POST  /v1/{parent}/endpoints?endpointId=ID      (a long-running operation)
  GetEndpoint     GET   /v1/{name=projects/*/locations/*/endpoints/*}
  UpdateEndpoint  PATCH /v1/{endpoint.name}?updateMask=trafficSplit
  DeployModel     POST  /v1/{endpoint}:deployModel     {deployedModel, trafficSplit}   (a long-running operation)
  UndeployModel   POST  /v1/{endpoint}:undeployModel   {deployedModelId, trafficSplit} (a long-running operation)
  GetOperation    GET   /v1/{name=…/operations/*}
  Predict         POST  /v1/{endpoint}:predict         {instances}

Both ids are chosen here, so that doing a step again finds what the first try made instead of making it twice:
an endpoint id and a DeployedModel id "should be 1-10 characters, and valid characters are /[0-9]/" (endpoint.proto,
DeployedModel.id; endpoint_service.proto, CreateEndpointRequest.endpoint_id), and an id in use is refused with
ALREADY_EXISTS. DeployModel's `trafficSplit`, when not empty, replaces the endpoint's: key "0" is the model being
deployed, and the values add up to 100 (DeployModelRequest.traffic_split).
"""

from __future__ import annotations

import hashlib
from typing import Any

from functions.cloud.endpoint_types import DeployedVersion, EndpointState, Operation
from functions.cloud.failures import NOT_FOUND
from functions.cloud.retry import RetryPolicy
from functions.cloud.vertex import POLICY, CallRejected, VertexApi

ALREADY_EXISTS = 6  # google.rpc.Code
ENDPOINT_LABEL = "trainctl_endpoint"
# Which deployed model is the version being deployed, in DeployModelRequest.traffic_split.
NEW_DEPLOYED_MODEL = "0"


def numeric_id(*parts: str) -> str:
    """A 10-digit id that the same parts always give, never starting with 0 (Vertex's ids are digits, 1-10 long)."""
    digest = int.from_bytes(hashlib.sha256("\n".join(parts).encode()).digest()[:8], "big")
    return str(1_000_000_000 + digest % 9_000_000_000)


def deployed_of(body: dict[str, Any]) -> DeployedVersion:
    model = str(body.get("model", ""))
    version = str(body.get("modelVersionId") or (model.split("@", 1)[1] if "@" in model else ""))
    return DeployedVersion(id=str(body.get("id", "")), model=model.split("@", 1)[0], version_id=version)


def endpoint_of(body: dict[str, Any]) -> EndpointState:
    return EndpointState(
        name=str(body.get("name", "")),
        display_name=str(body.get("displayName", "")),
        deployed=tuple(deployed_of(d) for d in body.get("deployedModels") or ()),
        traffic_split={str(k): int(v) for k, v in (body.get("trafficSplit") or {}).items()},
        labels=dict(body.get("labels") or {}),
    )


def operation_of(body: dict[str, Any]) -> Operation:
    error = body.get("error") or {}
    return Operation(
        name=str(body.get("name", "")),
        done=bool(body.get("done")),
        error_code=int(error.get("code", 0)),
        error_message=str(error.get("message", "")),
    )


class Endpoints(VertexApi):
    def __init__(self, project: str, region: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        super().__init__(project, region, endpoint, policy)

    def endpoint_name(self, endpoint_id: str) -> str:
        return f"{self.parent}/endpoints/{endpoint_id}"

    def get(self, name: str) -> EndpointState | None:
        try:
            return endpoint_of(self._call("GetEndpoint", "GET", name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def create(self, endpoint_id: str, display_name: str, labels: dict[str, str]) -> Operation | None:
        """Start CreateEndpoint under `endpoint_id`: its operation, or None when the id is taken already (an earlier
        try made it)."""
        body = {"displayName": display_name, "labels": labels}
        try:
            answer = self._call(
                "CreateEndpoint", "POST", f"{self.parent}/endpoints", params={"endpointId": endpoint_id}, json=body
            )
        except CallRejected as exc:
            if exc.code == ALREADY_EXISTS:
                return None
            raise
        return operation_of(answer)

    def deploy(self, name: str, deployed_model: dict[str, Any], traffic_split: dict[str, int]) -> Operation | None:
        """Start DeployModel of `deployed_model` (its `id` set by the caller) with `traffic_split` (NEW_DEPLOYED_MODEL
        for it): its operation, or None when a deployed model with that id exists already."""
        body = {"deployedModel": deployed_model, "trafficSplit": traffic_split}
        try:
            return operation_of(self._call("DeployModel", "POST", f"{name}:deployModel", json=body))
        except CallRejected as exc:
            if exc.code == ALREADY_EXISTS:
                return None
            raise

    def undeploy(self, name: str, deployed_model_id: str, traffic_split: dict[str, int]) -> Operation | None:
        """Start UndeployModel, leaving `traffic_split` (which must not name it): its operation, or None when it is
        not deployed (any more)."""
        body: dict[str, Any] = {"deployedModelId": deployed_model_id}
        if traffic_split:
            body["trafficSplit"] = traffic_split
        try:
            return operation_of(self._call("UndeployModel", "POST", f"{name}:undeployModel", json=body))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def set_traffic(self, name: str, traffic_split: dict[str, int]) -> EndpointState:
        """UpdateEndpoint with only its traffic split (updateMask): the endpoint as it is after."""
        body = {"trafficSplit": traffic_split}
        answer = self._call("UpdateEndpoint", "PATCH", name, params={"updateMask": "trafficSplit"}, json=body)
        return endpoint_of(answer)

    def operation(self, name: str) -> Operation | None:
        try:
            return operation_of(self._call("GetOperation", "GET", name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def predict(self, name: str, instances: list[Any]) -> dict[str, Any]:
        """Predict: {predictions, deployedModelId, model, modelVersionId, …}."""
        answer: dict[str, Any] = self._call("Predict", "POST", f"{name}:predict", json={"instances": instances})
        return answer
