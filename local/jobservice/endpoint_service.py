"""Vertex AI's EndpointService as one model of its rules, served on the local JobService's REST port by
endpoint_rest.py: endpoints, the models deployed to them (each served by a local process, serving.py) and their
traffic split (endpoint_rules.py), on the real aiplatform_v1 message types.

- CreateEndpoint, DeleteEndpoint, DeployModel and UndeployModel answer long-running operations
  (`endpoints/E/operations/ID`); create and delete are done at once, DeployModel once the model's server answers
  its health route (the endpoint lists the deployed model only then), UndeployModel once the server is stopped.
- DeployedModel ids are numeric strings, the caller's own when it names one (1-10 digits, endpoint.proto; one in use
  on the endpoint, or being deployed, is ALREADY_EXISTS: AIP-133), else chosen here; DeployedModel.model is the
  model's name without a version and model_version_id the version deployed (the request may name `M`,
  `M@VERSION_ID` or `M@ALIAS`).
- DeleteEndpoint refuses (FAILED_PRECONDITION) while models are deployed to the endpoint.
- Names spell the project by its number, as the Model Registry's (model_rules.project_numbers).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import (
    CreateEndpointOperationMetadata,
    DeleteOperationMetadata,
    DeployedModel,
    DeployModelOperationMetadata,
    DeployModelRequest,
    DeployModelResponse,
    Endpoint,
    ListEndpointsRequest,
    ListEndpointsResponse,
    UndeployModelOperationMetadata,
    UndeployModelRequest,
    UndeployModelResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import status_pb2

from local.jobservice.endpoint_rules import (
    UPDATE_FIELDS,
    deployed_model_id_problem,
    endpoint_id_problem,
    endpoint_name_problem,
    split_after_deploy,
    split_after_undeploy,
    split_problems,
    update_mask_problems,
)
from local.jobservice.endpoint_store import EndpointStore
from local.jobservice.model_listing import endpoint_filter, one_page
from local.jobservice.model_registry import ModelRegistry
from local.jobservice.model_rules import (
    ProjectNumbers,
    RegistryError,
    model_name_problem,
    parent_problem,
    parse_model_name,
    project_numbers,
    refuse_invalid,
    with_project_number,
)
from local.jobservice.replicas import NodePlanError
from local.jobservice.serving import ServedModel, ServingProcesses

log = logging.getLogger("local.jobservice")
HEALTH_TIMEOUT = 600.0  # Vertex waits up to 20 minutes for a custom container; locally a torch import is seconds


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class EndpointService:
    def __init__(
        self,
        registry: ModelRegistry,
        serving: ServingProcesses,
        store: EndpointStore | None = None,
        numbers: ProjectNumbers | None = None,
        health_timeout: float = HEALTH_TIMEOUT,
    ):
        self._registry, self._serving = registry, serving
        self._store = store or EndpointStore()
        self._number = numbers or project_numbers()
        self._health_timeout = health_timeout
        self._lock = threading.Lock()
        self._deploying: set[str] = set()  # deployed model ids whose DeployModel has not finished
        self._endpoints = {endpoint.name: endpoint for endpoint in self._store.load()}
        self._sequence = {name: index for index, name in enumerate(sorted(self._endpoints), start=1)}
        self._operations: dict[str, operations_pb2.Operation] = {}
        self._last_id = 0

    # --- the deployed models' servers across restarts of the JobService

    def serve_deployed(self) -> None:
        """Start the servers of every deployed model the store holds (after a restart of the JobService)."""
        with self._lock:
            deployed = [(e.name, dm) for e in self._endpoints.values() for dm in e.deployed_models]
        for endpoint, deployed_model in deployed:
            try:
                model = self._registry.get(f"{deployed_model.model}@{deployed_model.model_version_id}")
                self._serving.start(endpoint, deployed_model.id, model, _machine_type(deployed_model))
            except (RegistryError, NodePlanError) as error:
                log.error("cannot serve deployed model %s of %s again: %s", deployed_model.id, endpoint, error)

    def stop(self) -> None:
        self._serving.stop_all()

    # --- endpoints

    def create(self, parent: str, endpoint: Endpoint, endpoint_id: str) -> operations_pb2.Operation:
        parent = self._named(parent)
        problems = [parent_problem(parent), endpoint_id_problem(endpoint_id)]
        if not endpoint.display_name:
            problems.append(("endpoint.display_name", "is required"))
        problems += split_problems("endpoint.traffic_split", endpoint.traffic_split, [])
        if endpoint.deployed_models:
            problems.append(("endpoint.deployed_models", "is output only: deploy models with DeployModel"))
        refuse_invalid(problems)
        with self._lock:
            name = f"{parent}/endpoints/{endpoint_id or self._new_id()}"
            if name in self._endpoints:
                raise RegistryError(grpc.StatusCode.ALREADY_EXISTS, f"Endpoint {name} already exists.")
            now = _utc_now()
            created = Endpoint(
                name=name,
                display_name=endpoint.display_name,
                description=endpoint.description,
                labels=dict(endpoint.labels),
                create_time=now,
                update_time=now,
                etag=str(time.time_ns()),
            )
            self._endpoints[name] = created
            self._sequence[name] = max(self._sequence.values(), default=0) + 1
            self._store.save(created)
            metadata = CreateEndpointOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
            return self._operation(name, metadata, Endpoint.pb(created), done=True)

    def get(self, name: str) -> Endpoint:
        refuse_invalid([endpoint_name_problem("name", name)])
        with self._lock:
            return _copy(self._endpoint(self._named(name)))

    def list_endpoints(self, request: ListEndpointsRequest) -> ListEndpointsResponse:
        refuse_invalid([parent_problem(request.parent)])
        matches = endpoint_filter(request.filter)
        parent = self._named(request.parent)
        with self._lock:
            listed = [
                (self._sequence[name], _copy(endpoint))
                for name, endpoint in sorted(self._endpoints.items(), key=lambda item: self._sequence[item[0]])
                if name.startswith(f"{parent}/endpoints/") and matches(endpoint)
            ]
        page, token = one_page(listed, request.page_size, request.page_token)
        return ListEndpointsResponse(endpoints=page, next_page_token=token)

    def update(self, endpoint: Endpoint, paths: list[str]) -> Endpoint:
        refuse_invalid([endpoint_name_problem("endpoint.name", endpoint.name), *update_mask_problems(paths)])
        with self._lock:
            current = self._endpoint(self._named(endpoint.name))
            if "traffic_split" in paths:
                deployed = [model.id for model in current.deployed_models]
                refuse_invalid(split_problems("endpoint.traffic_split", endpoint.traffic_split, deployed))
            for path in paths:
                assert path in UPDATE_FIELDS
                if path in ("labels", "traffic_split"):
                    getattr(current, path).clear()
                    getattr(current, path).update(dict(getattr(endpoint, path)))
                else:
                    setattr(current, path, getattr(endpoint, path))
            current.update_time, current.etag = _utc_now(), str(time.time_ns())
            self._store.save(current)
            return _copy(current)

    def delete(self, name: str) -> operations_pb2.Operation:
        refuse_invalid([endpoint_name_problem("name", name)])
        with self._lock:
            endpoint = self._endpoint(self._named(name))
            if endpoint.deployed_models:
                ids = ", ".join(model.id for model in endpoint.deployed_models)
                raise RegistryError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Endpoint {endpoint.name} has deployed models ({ids}); undeploy them before deleting it.",
                )
            del self._endpoints[endpoint.name]
            self._store.delete(endpoint.name)
            now = _utc_now()
            metadata = DeleteOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
            return self._operation(endpoint.name, metadata, empty_pb2.Empty(), done=True)

    # --- deployed models

    def deploy(self, request: DeployModelRequest) -> operations_pb2.Operation:
        wanted = request.deployed_model
        model_name = self._named(wanted.model)
        problems = [endpoint_name_problem("endpoint", request.endpoint)]
        problems.append(model_name_problem("deployed_model.model", model_name))
        problems.append(deployed_model_id_problem(wanted.id))
        refuse_invalid(problems)
        endpoint_name = self._named(request.endpoint)
        model = self._registry.get(model_name)  # NOT_FOUND for an unknown model, version or alias
        ref = parse_model_name(model.name)
        assert ref is not None
        if ref.parent != endpoint_name.rsplit("/endpoints/", 1)[0]:
            refuse_invalid(
                [("deployed_model.model", f"must be a model of the endpoint's location, got {wanted.model}")]
            )
        with self._lock:
            endpoint = self._endpoint(endpoint_name)
            deployed = [existing.id for existing in endpoint.deployed_models]
            deployed_model_id = wanted.id or self._new_id()
            if deployed_model_id in deployed or deployed_model_id in self._deploying:
                # A caller-chosen id in use (AIP-133: a user-specified id that exists is ALREADY_EXISTS).
                raise RegistryError(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"DeployedModel {deployed_model_id} already exists in endpoint {endpoint_name}.",
                )
            self._deploying.add(deployed_model_id)
            split_after_deploy(endpoint.traffic_split, request.traffic_split, deployed, deployed_model_id)  # refuses
            now = _utc_now()
            metadata = DeployModelOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
            operation = self._operation(endpoint_name, metadata, None, done=False)
        record = DeployedModel.deserialize(DeployedModel.serialize(wanted))
        record.id, record.model, record.model_version_id = deployed_model_id, model.name, model.version_id
        record.display_name = wanted.display_name or model.display_name
        record.create_time = now
        resources = record.dedicated_resources
        if "dedicated_resources" in wanted and not resources.min_replica_count:
            resources.min_replica_count = 1
        try:
            served = self._serving.start(endpoint_name, deployed_model_id, model, _machine_type(record))
        except NodePlanError as error:
            self._deploying.discard(deployed_model_id)
            self._finish(operation, metadata, error=(grpc.StatusCode.FAILED_PRECONDITION, str(error)))
            return self._copy_operation(operation.name)
        requested = dict(request.traffic_split)

        def finish() -> None:
            try:
                self._finish_deploy(operation, metadata, endpoint_name, record, requested, served)
            finally:  # listed, or failed: either way its id is no longer being deployed
                with self._lock:
                    self._deploying.discard(deployed_model_id)

        threading.Thread(target=finish, name=f"deploy-{deployed_model_id}", daemon=True).start()
        return self._copy_operation(operation.name)

    def _finish_deploy(
        self,
        operation: operations_pb2.Operation,
        metadata: DeployModelOperationMetadata,
        endpoint_name: str,
        record: DeployedModel,
        requested: dict[str, int],
        served: ServedModel,
    ) -> None:
        problem = self._serving.wait_healthy(served, self._health_timeout)
        if problem is not None:
            self._serving.stop(record.id)
            text = f"Model server of deployed model {record.id} never became ready: {problem}"
            self._finish(operation, metadata, error=(grpc.StatusCode.FAILED_PRECONDITION, text))
            return
        try:
            with self._lock:
                endpoint = self._endpoint(endpoint_name)
                deployed = [existing.id for existing in endpoint.deployed_models]
                split = split_after_deploy(endpoint.traffic_split, requested, deployed, record.id)
                endpoint.deployed_models.append(record)
                endpoint.traffic_split.clear()
                endpoint.traffic_split.update(split)
                endpoint.update_time, endpoint.etag = _utc_now(), str(time.time_ns())
                self._store.save(endpoint)
        except RegistryError as refusal:  # the endpoint was deleted, or its models changed meanwhile
            self._serving.stop(record.id)
            self._finish(operation, metadata, error=(refusal.code, refusal.message))
            return
        response = DeployModelResponse(deployed_model=record)
        self._finish(operation, metadata, response=DeployModelResponse.pb(response))

    def undeploy(self, request: UndeployModelRequest) -> operations_pb2.Operation:
        problems = [endpoint_name_problem("endpoint", request.endpoint)]
        if not request.deployed_model_id:
            problems.append(("deployed_model_id", "is required: the id of the deployed model to undeploy"))
        refuse_invalid(problems)
        with self._lock:
            endpoint = self._endpoint(self._named(request.endpoint))
            deployed = [model.id for model in endpoint.deployed_models]
            if request.deployed_model_id not in deployed:
                raise RegistryError(
                    grpc.StatusCode.NOT_FOUND,
                    f"DeployedModel {request.deployed_model_id} does not exist in Endpoint {endpoint.name}.",
                )
            split = split_after_undeploy(
                endpoint.traffic_split, request.traffic_split, deployed, request.deployed_model_id
            )
            kept = [model for model in endpoint.deployed_models if model.id != request.deployed_model_id]
            del endpoint.deployed_models[:]
            endpoint.deployed_models.extend(kept)
            endpoint.traffic_split.clear()
            endpoint.traffic_split.update(split)
            endpoint.update_time, endpoint.etag = _utc_now(), str(time.time_ns())
            self._store.save(endpoint)
        self._serving.stop(request.deployed_model_id)
        now = _utc_now()
        metadata = UndeployModelOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
        with self._lock:
            response = UndeployModelResponse.pb(UndeployModelResponse())
            return self._operation(endpoint.name, metadata, response, done=True)

    def deployed(self, endpoint_name: str) -> tuple[Endpoint, Callable[[str], ServedModel | None]]:
        """The endpoint (for the router) and a way to find a deployed model's server."""
        refuse_invalid([endpoint_name_problem("endpoint", endpoint_name)])
        with self._lock:
            return _copy(self._endpoint(self._named(endpoint_name))), self._serving.get

    # --- operations

    def get_operation(self, name: str) -> operations_pb2.Operation:
        name = self._named(name)
        with self._lock:
            if name not in self._operations:
                raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
            return self._copy_operation(name)

    # --- machinery (callers hold the lock where they read or change endpoints)

    def _endpoint(self, name: str) -> Endpoint:
        endpoint = self._endpoints.get(name)
        if endpoint is None:
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Endpoint {name} does not exist.")
        return endpoint

    def _named(self, name: str) -> str:
        return with_project_number(name, self._number)

    def _operation(self, endpoint: str, metadata: Any, response: Any, done: bool) -> operations_pb2.Operation:
        operation = operations_pb2.Operation(name=f"{endpoint}/operations/{self._new_id()}", done=done)
        operation.metadata.Pack(type(metadata).pb(metadata))
        if response is not None:
            operation.response.Pack(response)
        self._operations[operation.name] = operation
        return operations_pb2.Operation.FromString(operation.SerializeToString())

    def _copy_operation(self, name: str) -> operations_pb2.Operation:
        return operations_pb2.Operation.FromString(self._operations[name].SerializeToString())

    def _finish(
        self,
        operation: operations_pb2.Operation,
        metadata: Any,
        response: Any = None,
        error: tuple[grpc.StatusCode, str] | None = None,
    ) -> None:
        with self._lock:
            stored = self._operations[operation.name]
            metadata.generic_metadata.update_time = _utc_now()
            stored.metadata.Pack(type(metadata).pb(metadata))
            if error is not None:
                code, message = error
                stored.error.CopyFrom(status_pb2.Status(code=code.value[0], message=message))
                log.warning("%s failed: %s", operation.name, message)
            else:
                stored.response.Pack(response)
            stored.done = True

    def _new_id(self) -> str:
        """Numeric and increasing, like Vertex's endpoint, deployed model and operation ids."""
        self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
        return str(self._last_id)


def _copy(endpoint: Endpoint) -> Endpoint:
    return Endpoint.deserialize(Endpoint.serialize(endpoint))


def _machine_type(deployed_model: DeployedModel) -> str:
    return deployed_model.dedicated_resources.machine_spec.machine_type or "n1-standard-2"
