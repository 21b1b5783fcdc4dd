"""Vertex AI's Model Registry (the ModelService) over its REST API (v1), one small HTTP call per operation, as
functions/cloud/vertex.py calls the JobService: the same endpoint (the regional one, or `vertex_endpoint` for the local
stack, which serves both), the same retry policy and Google's error shape.

The calls and their REST forms (googleapis google/cloud/aiplatform/v1/model_service.proto; the reference pages
under https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models):
  GetModel             GET  /v1/{name=projects/*/locations/*/models/*}         (name may end in @version or @alias)
  ListModels           GET  /v1/{parent=projects/*/locations/*}/models
  ListModelVersions    GET  /v1/{name=projects/*/locations/*/models/*}:listVersions   (filter `labels.k="v"`)
  UploadModel          POST /v1/{parent=projects/*/locations/*}/models:upload        (a long-running operation)
  GetOperation         GET  /v1/{name=…/operations/*}
  MergeVersionAliases  POST /v1/{name=projects/*/locations/*/models/*}:mergeVersionAliases
  ImportModelEvaluation POST /v1/{parent=projects/*/locations/*/models/*}/evaluations:import
  ListModelEvaluations GET  /v1/{parent=projects/*/locations/*/models/*}/evaluations
UploadModel is not idempotent and its version is not listed while it runs: it is tried once (see `upload`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from functions.cloud.failures import NOT_FOUND
from functions.cloud.registry_types import ModelVersion, Upload
from functions.cloud.retry import RetryPolicy
from functions.cloud.vertex import POLICY, CallRejected, VertexApi, _time

PAGE_SIZE = 100


def version_of(body: dict[str, Any]) -> ModelVersion:
    return ModelVersion(
        model=str(body.get("name", "")).split("@", 1)[0],
        version_id=str(body.get("versionId", "")),
        aliases=tuple(body.get("versionAliases") or ()),
        artifact_uri=str(body.get("artifactUri", "")),
        labels=dict(body.get("labels") or {}),
        created=_time(body.get("versionCreateTime") or body.get("createTime")),
        description=str(body.get("versionDescription", "")),
    )


def upload_of(operation: dict[str, Any]) -> Upload:
    error = operation.get("error") or {}
    response = operation.get("response") or {}
    return Upload(
        operation=str(operation.get("name", "")),
        done=bool(operation.get("done")),
        version_id=str(response["modelVersionId"]) if response.get("modelVersionId") else None,
        error_code=int(error.get("code", 0)),
        error_message=str(error.get("message", "")),
    )


class ModelRegistry(VertexApi):
    def __init__(self, project: str, region: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        super().__init__(project, region, endpoint, policy)

    def model_name(self, model_id: str) -> str:
        return f"{self.parent}/models/{model_id}"

    def get(self, name: str) -> ModelVersion | None:
        """The version `name` names (models/M, models/M@VERSION or models/M@ALIAS); None when the model, version or
        alias does not exist."""
        try:
            return version_of(self._call("GetModel", "GET", name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def find_version(self, model_id: str, label: str, value: str) -> ModelVersion | None:
        """The model's version labelled `label=value` (the first, if several are), None when there is none or no
        such model."""
        for version in self.versions(model_id, f'labels.{label}="{value}"'):
            return version
        return None

    def versions(self, model_id: str, filter_: str = "") -> Iterator[ModelVersion]:
        """The model's versions (those matching `filter_`), page by page; none when there is no such model."""
        params = {"pageSize": PAGE_SIZE} | ({"filter": filter_} if filter_ else {})
        try:
            path = f"{self.model_name(model_id)}:listVersions"
            yield from map(version_of, self._items("ListModelVersions", path, params, "models"))
        except CallRejected as exc:
            if exc.code != NOT_FOUND:
                raise

    def models(self, filter_: str = "") -> Iterator[ModelVersion]:
        """Every model of the location (each as its default version), page by page."""
        params = {"pageSize": PAGE_SIZE} | ({"filter": filter_} if filter_ else {})
        yield from map(version_of, self._items("ListModels", f"{self.parent}/models", params, "models"))

    def _items(self, what: str, path: str, params: dict[str, Any], key: str) -> Iterator[dict[str, Any]]:
        """The `key` items of every page of a List call."""
        token = ""
        while True:
            page = self._call(what, "GET", path, params=params | ({"pageToken": token} if token else {}))
            yield from page.get(key) or []
            token = page.get("nextPageToken") or ""
            if not token:
                return

    def upload(self, body: dict[str, Any]) -> Upload:
        """Start UploadModel with `body` (the REST UploadModelRequest less its parent): its operation. Tried once:
        an attempt that failed may have started an upload, and its version is not listed until that is done, so
        no look-up can tell whether another attempt would make a second version (functions/models/promotion.py waits
        out its claim instead)."""
        once = replace(self._policy, attempts=1)
        return upload_of(self._call("UploadModel", "POST", f"{self.parent}/models:upload", policy=once, json=body))

    def operation(self, name: str) -> Upload | None:
        """Where an upload's operation stands; None when Vertex no longer knows it."""
        try:
            return upload_of(self._call("GetOperation", "GET", name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def merge_aliases(self, version_name: str, aliases: list[str]) -> ModelVersion:
        """Put `aliases` on the version (an alias held by another version of the model leaves it; "-a" removes
        a): the version as it is after."""
        body = {"versionAliases": aliases}
        return version_of(self._call("MergeVersionAliases", "POST", f"{version_name}:mergeVersionAliases", json=body))

    def evaluations(self, version_name: str) -> list[dict[str, Any]]:
        """The version's model evaluations (REST ModelEvaluation objects)."""
        path = f"{version_name}/evaluations"
        return list(self._items("ListModelEvaluations", path, {"pageSize": PAGE_SIZE}, "modelEvaluations"))

    def import_evaluation(self, version_name: str, evaluation: dict[str, Any]) -> dict[str, Any]:
        body = {"modelEvaluation": evaluation}
        result: dict[str, Any] = self._call(
            "ImportModelEvaluation", "POST", f"{version_name}/evaluations:import", json=body
        )
        return result
