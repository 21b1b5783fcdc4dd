"""Vertex AI's PersistentResourceService over the REST API (v1): the warm pools trainctl keeps (issue 43, point 2;
functions/capacity/warm_pools.py), on the JobService's endpoint (the regional one, or `vertex_endpoint` for the local
stack) with the same retry policy and Google's error shape (functions/cloud/vertex.py).

The calls and their REST forms (googleapis google/cloud/aiplatform/v1/persistent_resource_service.proto;
https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.persistentResources):
  CreatePersistentResource  POST   /v1/{parent}/persistentResources?persistentResourceId=ID   (a long-running operation)
  GetPersistentResource     GET    /v1/{name=projects/*/locations/*/persistentResources/*}
  DeletePersistentResource  DELETE /v1/{name}                                                 (a long-running operation)

The id is chosen here (CreatePersistentResourceRequest.persistent_resource_id: at most 63 characters,
/^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/), so that creating again finds what the first try made (ALREADY_EXISTS).
"""

from __future__ import annotations

from typing import Any

from functions.cloud.endpoints import ALREADY_EXISTS
from functions.cloud.failures import NOT_FOUND
from functions.cloud.pool_state import PoolState, pool_state_of
from functions.cloud.retry import RetryPolicy
from functions.cloud.vertex import POLICY, CallRejected, VertexApi


class PersistentResources(VertexApi):
    def __init__(self, project: str, region: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        super().__init__(project, region, endpoint, policy)

    def resource_name(self, resource_id: str) -> str:
        return f"{self.parent}/persistentResources/{resource_id}"

    def get(self, resource_id: str) -> PoolState | None:
        try:
            return pool_state_of(self._call("GetPersistentResource", "GET", self.resource_name(resource_id)))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def create(self, resource_id: str, body: dict[str, Any]) -> bool:
        """Start CreatePersistentResource under `resource_id`: False when the id is taken already (an earlier try
        made it)."""
        params = {"persistentResourceId": resource_id}
        try:
            self._call(
                "CreatePersistentResource", "POST", f"{self.parent}/persistentResources", params=params, json=body
            )
        except CallRejected as exc:
            if exc.code == ALREADY_EXISTS:
                return False
            raise
        return True

    def delete(self, resource_id: str) -> bool:
        """Start DeletePersistentResource: False when there is none of that id (deleted already)."""
        try:
            self._call("DeletePersistentResource", "DELETE", self.resource_name(resource_id))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return False
            raise
        return True
