"""Vertex AI's PredictionService for the local endpoints: `:predict` and `:rawPredict` go to one deployed model
chosen at random by the endpoint's traffic split, through the fault plan (faults.py: injected 500s and added
latency), to its server's AIP_PREDICT_ROUTE; every request's response code and total latency is recorded per
deployed model (prediction_metrics.py) for the Cloud Monitoring stand-in (monitoring_rest.py).

Answers (prediction_service.proto, PredictResponse; https://cloud.google.com/vertex-ai/docs/predictions/
custom-container-requirements, "Prediction response requirements"):
- predict: the server's `predictions` with deployedModelId, model (without version), modelVersionId and
  modelDisplayName; a server answer other than 200 becomes Google's error body with the server's HTTP status
  (its gRPC code by google/rpc/code.proto's mapping) and the server's body as the message;
- rawPredict: the server's status and body as they are;
- an endpoint whose split gives no model traffic: FAILED_PRECONDITION, "Endpoint … doesn't have traffic_split.";
- a deployed model whose server is not up (restarting): UNAVAILABLE.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import grpc

from local.jobservice.endpoint_rules import choose_deployed_model
from local.jobservice.endpoint_service import EndpointService
from local.jobservice.faults import FaultPlan
from local.jobservice.prediction_metrics import PredictionLog
from local.jobservice.rest import HTTP_STATUS, RestAbort, RestResponse

# The gRPC code of an HTTP status a model server answers (google/rpc/code.proto, read backwards); other 4xx are
# FAILED_PRECONDITION's 400, other 5xx INTERNAL's 500.
_CODE_OF_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
INJECTED_ERROR = {"error": "injected by the local JobService's fault plan (DisturbPredictions)"}


class PredictionRouter:
    def __init__(self, endpoints: EndpointService, faults: FaultPlan, metrics: PredictionLog, seed: int | None = None):
        self._endpoints, self._faults, self._metrics = endpoints, faults, metrics
        self._draw = random.Random(seed)

    def predict(self, endpoint_name: str, body: bytes, raw: bool) -> RestResponse:
        started = time.monotonic()
        endpoint, server_of = self._endpoints.deployed(endpoint_name)
        chosen = choose_deployed_model(endpoint.traffic_split, self._draw)
        if chosen is None:
            raise RestAbort(
                grpc.StatusCode.FAILED_PRECONDITION, f"Endpoint {endpoint.name} doesn't have traffic_split."
            )
        deployed = next(model for model in endpoint.deployed_models if model.id == chosen)
        status, payload = self._forward(chosen, server_of, body)
        latency_ms = (time.monotonic() - started) * 1000.0
        self._metrics.record(endpoint.name, chosen, status, latency_ms)
        if raw:
            return RestResponse(status, _json_or_text(payload))
        if status != 200:
            code = _CODE_OF_STATUS.get(status, grpc.StatusCode.INTERNAL if status >= 500 else None)
            raise RestAbort(code or grpc.StatusCode.FAILED_PRECONDITION, payload.decode(errors="replace"))
        answered = _json_or_text(payload)
        return RestResponse(
            200,
            {
                "predictions": answered.get("predictions", []),
                "deployedModelId": chosen,
                "model": deployed.model,
                "modelVersionId": deployed.model_version_id,
                "modelDisplayName": deployed.display_name,
            },
        )

    def _forward(self, deployed_model_id: str, server_of: Any, body: bytes) -> tuple[int, bytes]:
        fail, wait = self._faults.prediction_fault(deployed_model_id)
        if wait:
            time.sleep(wait)
        if fail:
            return 500, json.dumps(INJECTED_ERROR).encode()
        served = server_of(deployed_model_id)
        try:
            if served is None:
                raise OSError("no server")
            return served.request("POST", served.predict_route, body)
        except OSError as error:
            text = f"The model server of deployed model {deployed_model_id} is not available ({error}); retry."
            return HTTP_STATUS[grpc.StatusCode.UNAVAILABLE], json.dumps({"error": text}).encode()


def _json_or_text(payload: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(payload)
    except ValueError:
        return {"error": payload.decode(errors="replace")}
    return parsed if isinstance(parsed, dict) else {"predictions": parsed}
