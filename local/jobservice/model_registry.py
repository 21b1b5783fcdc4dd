"""Vertex AI's Model Registry as one model of its rules, served on the local JobService's REST port by
model_rest.py: models, their versions (`models/M@1`), version aliases (`models/M@champion`) and imported
model evaluations, on the real aiplatform_v1 message types.

The rules (sources in local/FIDELITY.md, "Vertex AI Model Registry"):
- UploadModel is a long-running operation (`models/M/operations/ID`). It names a new model (`model_id`, or a
  numeric id when none is given) or a new version of `parent_model`; version ids count up from 1 and are
  never reused. The version exists for readers only once its operation is done (`upload_seconds` later).
- The first version of a model gets the `default` alias; a later one only when its upload lists `default`
  (the SDK's `is_default_version=True` does). An alias names one version of a model: giving it to another
  version moves it. `default` cannot be removed, only moved; the version that carries it, or the only
  version left, cannot be deleted.
- A name without @ reads the default version; `@<digits>` a version id; anything else after @ an alias.
  DeleteModelVersion and MergeVersionAliases take a version id only.
- Refusals: INVALID_ARGUMENT naming the field, NOT_FOUND for an unknown model, version, alias or
  evaluation, ALREADY_EXISTS for a model id in use, FAILED_PRECONDITION for a state that forbids the change.
- Names: a request may spell the project by its id or its number; every name the registry answers with spells
  it by its number (`project_numbers`: derived from the id unless pinned), as Vertex does.
- An evaluation under Google's classification or regression metrics schema holds only that schema's fields.

`now` and `upload_seconds` are parameters so that the unit tests run the rules without waiting.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from google.cloud.aiplatform_v1.types import (
    DeleteOperationMetadata,
    ImportModelEvaluationRequest,
    ListModelEvaluationsRequest,
    ListModelEvaluationsResponse,
    ListModelsRequest,
    ListModelsResponse,
    ListModelVersionsRequest,
    ListModelVersionsResponse,
    MergeVersionAliasesRequest,
    Model,
    ModelEvaluation,
    UploadModelOperationMetadata,
    UploadModelRequest,
    UploadModelResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from local.jobservice.model_listing import (
    model_filter,
    one_page,
    order_by_problem,
    version_filter,
)
from local.jobservice.model_rules import (
    DEFAULT_ALIAS,
    ModelRef,
    ProjectNumbers,
    RegistryError,
    evaluation_problems,
    merge_problems,
    model_name_problem,
    parent_problem,
    parse_model_name,
    project_numbers,
    refuse_invalid,
    upload_problems,
    with_project_number,
)
from local.jobservice.model_store import ModelRecord, ModelStore, VersionRecord

UPLOAD_SECONDS = 0.5
# Output-only fields of Model a caller may send; the registry sets or leaves them itself.
_OUTPUT_ONLY = (
    "name",
    "version_id",
    "version_aliases",
    "version_create_time",
    "version_update_time",
    "create_time",
    "update_time",
    "deployed_models",
    "training_pipeline",
    "supported_export_formats",
    "supported_deployment_resources_types",
    "supported_input_storage_formats",
    "supported_output_storage_formats",
    "model_source_info",
    "original_model_info",
    "metadata_artifact",
    "etag",
)
_EVALUATION_NAME_RE = re.compile(r"(?P<model>projects/[^/]+/locations/[^/]+/models/[^/@:]+)/evaluations/(?P<id>\d+)")
T = TypeVar("T")


def _copy(message: T) -> T:
    return type(message).deserialize(type(message).serialize(message))  # type: ignore[attr-defined]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ModelRegistry:
    def __init__(
        self,
        store: ModelStore | None = None,
        now: Callable[[], dt.datetime] = _utc_now,
        upload_seconds: float = UPLOAD_SECONDS,
        numbers: ProjectNumbers | None = None,
    ):
        self._store = store or ModelStore()
        self._now = now
        self._upload_time = dt.timedelta(seconds=upload_seconds)
        self._lock = threading.Lock()
        self._number = numbers or project_numbers()
        self._models = {record.name: record for record in map(self._numbered, self._store.load())}
        self._operations: dict[str, operations_pb2.Operation] = {}  # the delete operations since start
        self._last_id = max((record.sequence for record in self._models.values()), default=0)

    # --- UploadModel and its operation

    def upload(self, request: UploadModelRequest, seconds: float | None = None) -> operations_pb2.Operation:
        """Start the upload: its operation, done `seconds` (else `upload_seconds`) from now."""
        request = _copy(request)
        request.parent = self._named(request.parent)
        if request.parent_model:
            request.parent_model = self._named(request.parent_model)
        refuse_invalid(upload_problems(request))
        with self._lock:
            now = self._settle()
            if request.parent_model:
                record = self._visible_model(request.parent_model)
            else:
                name = f"{request.parent}/models/{request.model_id or self._new_id()}"
                if name in self._models:
                    raise RegistryError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"Model {name} already exists; upload a new version of it with parent_model.",
                    )
                record = self._models[name] = ModelRecord(name, int(self._new_id()), now)
            record.last_version_id += 1
            model = _copy(request.model)
            for output_only in _OUTPUT_ONLY:
                delattr(model, output_only)
            model.name, model.version_id = record.name, str(record.last_version_id)
            # Model.supported_deployment_resources_types: "If no configuration types are listed, the Model cannot be
            # deployed to an Endpoint"; a custom-container model is deployed on dedicated resources, and gcloud's
            # deploy-model reads the field to choose them (api_lib/ai/endpoints/client.py).
            dedicated = Model.DeploymentResourcesType.DEDICATED_RESOURCES
            model.supported_deployment_resources_types = [dedicated]  # type: ignore[list-item]
            model.create_time = record.create_time
            model.update_time = model.version_create_time = model.version_update_time = now
            version = VersionRecord(
                model,
                f"{record.name}/operations/{self._new_id()}",
                now + (self._upload_time if seconds is None else dt.timedelta(seconds=seconds)),
                requested_aliases=list(request.model.version_aliases),
            )
            record.versions[version.version_id] = version
            if version.ready_at <= now:
                self._finish_upload(record, version)
            self._store.save(record)
            return self._upload_operation(record, version)

    def get_operation(self, name: str) -> operations_pb2.Operation:
        name = self._named(name)
        with self._lock:
            self._settle()
            for record in self._models.values():
                for version in record.versions.values():
                    if version.operation == name:
                        return self._upload_operation(record, version)
            if name in self._operations:
                return self._operations[name]
        raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")

    # --- reads

    def get(self, name: str) -> Model:
        refuse_invalid([model_name_problem("name", name)])
        with self._lock:
            self._settle()
            return _copy(self._resolve(self._named(name))[1].model)

    def list_models(self, request: ListModelsRequest) -> ListModelsResponse:
        refuse_invalid([parent_problem(request.parent), order_by_problem(request.order_by)])
        matches = model_filter(request.filter)
        parent = self._named(request.parent)
        with self._lock:
            self._settle()
            records = sorted(self._models.values(), key=lambda record: record.sequence)
            listed = [
                (record.sequence, _copy(default.model))
                for record in records
                if record.name.startswith(f"{parent}/models/")
                and (default := record.carrying(DEFAULT_ALIAS)) is not None
                and matches(default.model)
            ]
        page, token = one_page(listed, request.page_size, request.page_token)
        return ListModelsResponse(models=page, next_page_token=token)

    def list_versions(self, request: ListModelVersionsRequest) -> ListModelVersionsResponse:
        name_problem = model_name_problem("name", request.name, versioned="never")
        refuse_invalid([name_problem, order_by_problem(request.order_by)])
        matches = version_filter(request.filter)
        with self._lock:
            self._settle()
            record = self._visible_model(self._named(request.name))
            listed = []
            for version in record.visible():
                if matches(version.model):
                    model = _copy(version.model)
                    # ListModelVersionsResponse: "In the returned Model name field, version ID instead of
                    # revision tag will be included."
                    model.name = f"{record.name}@{version.version_id}"
                    listed.append((int(version.version_id), model))
        page, token = one_page(listed, request.page_size, request.page_token)
        return ListModelVersionsResponse(models=page, next_page_token=token)

    # --- changes

    def merge_version_aliases(self, request: MergeVersionAliasesRequest) -> Model:
        aliases = list(request.version_aliases)
        refuse_invalid([model_name_problem("name", request.name, versioned="version id"), *merge_problems(aliases)])
        adding = [alias for alias in aliases if not alias.startswith("-")]
        removing = [entry[1:] for entry in aliases if entry.startswith("-")]
        # "Adding and deleting the same alias in the request ... the 2 operations will be cancelled out."
        cancelled = set(adding) & set(removing)
        with self._lock:
            now = self._settle()
            record, version = self._resolve(self._named(request.name))
            missing = [alias for alias in removing if alias not in cancelled and alias not in version.aliases]
            if missing:
                raise RegistryError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Version {version.version_id} of {record.name} has no alias {', '.join(missing)} to remove; "
                    f"its aliases are {version.aliases}.",
                )
            kept = [alias for alias in version.aliases if alias not in removing or alias in cancelled]
            version.model.version_aliases = kept
            self._move_aliases(record, version, [alias for alias in adding if alias not in cancelled], now)
            version.model.version_update_time = version.model.update_time = now
            self._store.save(record)
            return _copy(version.model)

    def delete_version(self, name: str) -> operations_pb2.Operation:
        refuse_invalid([model_name_problem("name", name, versioned="version id")])
        with self._lock:
            self._settle()
            record, version = self._resolve(self._named(name))
            if len(record.visible()) == 1:
                raise RegistryError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Version {version.version_id} is the only version of {record.name}; deleting the only "
                    "version is not allowed: delete the model instead.",
                )
            if DEFAULT_ALIAS in version.aliases:
                raise RegistryError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Version {version.version_id} of {record.name} carries the default alias; move it to "
                    "another version (MergeVersionAliases) before deleting this one.",
                )
            del record.versions[version.version_id]
            self._store.save(record)
            return self._delete_operation(record.name)

    def delete_model(self, name: str) -> operations_pb2.Operation:
        refuse_invalid([model_name_problem("name", name, versioned="never")])
        with self._lock:
            self._settle()
            record = self._visible_model(self._named(name))
            del self._models[record.name]
            self._store.delete(record.name)
            return self._delete_operation(record.name)

    # --- evaluations

    def import_evaluation(self, request: ImportModelEvaluationRequest) -> ModelEvaluation:
        refuse_invalid([model_name_problem("parent", request.parent), *evaluation_problems(request.model_evaluation)])
        with self._lock:
            now = self._settle()
            record, version = self._resolve(self._named(request.parent))
            evaluation = _copy(request.model_evaluation)
            evaluation.name = f"{record.name}/evaluations/{self._new_id()}"
            evaluation.create_time = now
            version.evaluations.append(evaluation)
            self._store.save(record)
            return _copy(evaluation)

    def list_evaluations(self, request: ListModelEvaluationsRequest) -> ListModelEvaluationsResponse:
        problems = [model_name_problem("parent", request.parent)]
        if request.filter:
            problems.append(("filter", "the local Model Registry does not filter evaluations; leave filter out"))
        refuse_invalid(problems)
        with self._lock:
            self._settle()
            version = self._resolve(self._named(request.parent))[1]
            listed = [(int(e.name.rsplit("/", 1)[1]), _copy(e)) for e in version.evaluations]
        page, token = one_page(listed, request.page_size, request.page_token)
        return ListModelEvaluationsResponse(model_evaluations=page, next_page_token=token)

    def get_evaluation(self, name: str) -> ModelEvaluation:
        found = _EVALUATION_NAME_RE.fullmatch(name)
        if found is None:
            refuse_invalid([("name", f"must look like projects/P/locations/L/models/M/evaluations/ID, got {name!r}")])
            raise AssertionError("refuse_invalid raises")
        name = self._named(name)
        with self._lock:
            self._settle()
            for version in self._visible_model(self._named(found["model"])).visible():
                for evaluation in version.evaluations:
                    if evaluation.name == name:
                        return _copy(evaluation)
        raise RegistryError(grpc.StatusCode.NOT_FOUND, f"ModelEvaluation {name} does not exist.")

    # --- names

    def _named(self, name: str) -> str:
        """A resource name as the registry keeps and answers it: the project by its number."""
        return with_project_number(name, self._number)

    def _numbered(self, record: ModelRecord) -> ModelRecord:
        """A stored model whose names spell the project otherwise (kept before issue 38, or under other pins), renamed
        and kept again under its new name."""
        name = self._named(record.name)
        if name == record.name:
            return record
        old = record.name
        record.name = name
        for version in record.versions.values():
            version.model.name = name
            version.operation = self._named(version.operation)
            for evaluation in version.evaluations:
                evaluation.name = self._named(evaluation.name)
        self._store.save(record)
        self._store.delete(old)
        return record

    # --- the rules' machinery (callers hold the lock)

    def _settle(self) -> dt.datetime:
        """Finish every upload whose time has come, in the order they were made; returns now."""
        now = self._now()
        due = [
            (version.ready_at, int(version.operation.rsplit("/", 1)[1]), record, version)
            for record in self._models.values()
            for version in record.versions.values()
            if version.pending and version.ready_at <= now
        ]
        for _, _, record, version in sorted(due, key=lambda item: item[:2]):
            self._finish_upload(record, version)
            self._store.save(record)
        return now

    def _finish_upload(self, record: ModelRecord, version: VersionRecord) -> None:
        aliases = list(version.requested_aliases)
        if not record.visible() and DEFAULT_ALIAS not in aliases:
            aliases.append(DEFAULT_ALIAS)  # the first version of a model always gets it
        version.pending = False
        self._move_aliases(record, version, aliases, version.ready_at)
        version.model.version_update_time = version.model.update_time = version.ready_at

    def _move_aliases(self, record: ModelRecord, target: VersionRecord, aliases: list[str], now: dt.datetime) -> None:
        for alias in aliases:
            holder = record.carrying(alias)
            if holder is target:
                continue
            if holder is not None:
                holder.model.version_aliases = [kept for kept in holder.aliases if kept != alias]
                holder.model.version_update_time = holder.model.update_time = now
            target.model.version_aliases = [*target.aliases, alias]

    def _visible_model(self, name: str) -> ModelRecord:
        record = self._models.get(name)
        if record is None or not record.visible():
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Model {name} does not exist.")
        return record

    def _resolve(self, name: str) -> tuple[ModelRecord, VersionRecord]:
        ref = parse_model_name(name)
        assert ref is not None  # the callers checked the name
        record = self._visible_model(ref.model)
        version = _version_of(record, ref)
        if version is None:
            what = "version" if ref.names_version_id else "alias"
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Model {ref.model} has no {what} {ref.version!r}.")
        return record, version

    def _delete_operation(self, model_name: str) -> operations_pb2.Operation:
        operation = done_delete_operation(f"{model_name}/operations/{self._new_id()}", self._now())
        self._operations[operation.name] = operation
        return operation

    def _upload_operation(self, record: ModelRecord, version: VersionRecord) -> operations_pb2.Operation:
        operation = operations_pb2.Operation(name=version.operation, done=not version.pending)
        started = version.model.version_create_time
        metadata = UploadModelOperationMetadata(
            generic_metadata={"create_time": started, "update_time": started if version.pending else version.ready_at}
        )
        operation.metadata.Pack(UploadModelOperationMetadata.pb(metadata))
        if operation.done:
            response = UploadModelResponse(model=record.name, model_version_id=version.version_id)
            operation.response.Pack(UploadModelResponse.pb(response))
        return operation

    def _new_id(self) -> str:
        """Numeric and increasing, like Vertex's model, operation and evaluation ids."""
        self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
        return str(self._last_id)


def done_delete_operation(name: str, now: dt.datetime) -> operations_pb2.Operation:
    """A delete's Operation, done at once (the local services delete in place): DeleteOperationMetadata, Empty."""
    operation = operations_pb2.Operation(name=name, done=True)
    metadata = DeleteOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
    operation.metadata.Pack(DeleteOperationMetadata.pb(metadata))
    operation.response.Pack(empty_pb2.Empty())
    return operation


def _version_of(record: ModelRecord, ref: ModelRef) -> VersionRecord | None:
    if not ref.version:
        return record.carrying(DEFAULT_ALIAS)
    if ref.names_version_id:
        version = record.versions.get(ref.version)
        return version if version is not None and not version.pending else None
    return record.carrying(ref.version)
