"""The `google.cloud.aiplatform.v1.JobService` CustomJob methods, on the real proto types of
google-cloud-aiplatform, served through a generic gRPC handler so the stock `JobServiceClient` talks to
it unchanged: CreateCustomJob, GetCustomJob, ListCustomJobs (filter, paging), CancelCustomJob
(returns Empty) and DeleteCustomJob (returns a finished long-running Operation, named like Vertex's
`projects/P/locations/L/operations/ID`, which GetOperation then returns). The REST mapping (rest.py)
calls these same methods, so both protocols share one behaviour.

Errors follow Vertex: INVALID_ARGUMENT with "List of found errors" and BadRequest field violations,
NOT_FOUND for unknown jobs, FAILED_PRECONDITION to cancel a job that ended or delete one that runs,
RESOURCE_EXHAUSTED with the request-rate text when a fault rate-limits Get/List/Cancel, and with the quota
text at create when the job alone needs more GPUs than the capacity model's limit (it could never leave the
quota queue; reference/apis.md §3 "Short quota", behaviour 1).
"""

from __future__ import annotations

import collections
import datetime as dt
import re
import threading
import time

import grpc
from google.cloud.aiplatform_v1.types import (
    CancelCustomJobRequest,
    CreateCustomJobRequest,
    CustomJob,
    DeleteCustomJobRequest,
    DeleteOperationMetadata,
    GetCustomJobRequest,
    JobState,
    ListCustomJobsRequest,
    ListCustomJobsResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, field_mask_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from local.jobservice.execution import ACTIVE_STATES, JobExecutor, TransitionRefused
from local.jobservice.faults import PERMISSION_MESSAGE, PERMISSIONS, QUOTA_MESSAGE, RATE_LIMIT_MESSAGE, FaultPlan
from local.jobservice.filters import FilterError, parse_filter
from local.jobservice.persistent_resources import PersistentResources
from local.jobservice.quota_queue import gpu_demand, region_of
from local.jobservice.reservations import reservation_problems
from local.jobservice.store import JobStore, job_id_of
from local.jobservice.validation import PARENT_RE, create_request_problems, vertex_error_text

SERVICE = "google.cloud.aiplatform.v1.JobService"
OPERATIONS_SERVICE = "google.longrunning.Operations"
JOB_NAME_RE = re.compile(r"projects/[^/]+/locations/[^/]+/customJobs/[0-9]+")
# Vertex documents neither ("The standard list page size"); AIP-158 has a service pick a default, coerce a larger
# page_size down to its maximum and refuse a negative one, and its example's maximum is 1,000 (local/FIDELITY.md).
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_CUSTOM_JOB = CustomJob.pb().DESCRIPTOR
# Output-only fields a caller may send but Vertex ignores.
_OUTPUT_ONLY = ("name", "state", "create_time", "start_time", "end_time", "update_time", "error", "web_access_uris")


class JobServiceServicer:
    def __init__(self, store: JobStore, executor: JobExecutor, faults: FaultPlan):
        self.store = store
        self.executor = executor
        self.faults = faults
        self._operations: dict[str, operations_pb2.Operation] = {}
        # The persistent resources jobs may run on (persistent_resources.py); None: every such job is refused.
        self.persistent: PersistentResources | None = None
        self._calls: collections.Counter[str] = collections.Counter()
        self._calls_lock = threading.Lock()

    def call_counts(self) -> dict[str, int]:
        """How many calls of each method (CreateCustomJob, GetCustomJob, ListCustomJobs, CancelCustomJob) arrived."""
        with self._calls_lock:
            return dict(self._calls)

    def handler(self) -> grpc.GenericRpcHandler:
        def method(function, request_type, serialize):
            return grpc.unary_unary_rpc_method_handler(
                function, request_deserializer=request_type.deserialize, response_serializer=serialize
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "CreateCustomJob": method(self.create_custom_job, CreateCustomJobRequest, CustomJob.serialize),
                "GetCustomJob": method(self.get_custom_job, GetCustomJobRequest, CustomJob.serialize),
                "ListCustomJobs": method(
                    self.list_custom_jobs, ListCustomJobsRequest, ListCustomJobsResponse.serialize
                ),
                "CancelCustomJob": method(
                    self.cancel_custom_job, CancelCustomJobRequest, empty_pb2.Empty.SerializeToString
                ),
                "DeleteCustomJob": method(
                    self.delete_custom_job, DeleteCustomJobRequest, operations_pb2.Operation.SerializeToString
                ),
            },
        )

    def operations_handler(self) -> grpc.GenericRpcHandler:
        """The GetOperation of the Operations mixin every Vertex client carries (`client.get_operation`)."""
        method = grpc.unary_unary_rpc_method_handler(
            self.get_operation,
            request_deserializer=operations_pb2.GetOperationRequest.FromString,
            response_serializer=operations_pb2.Operation.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(OPERATIONS_SERVICE, {"GetOperation": method})

    def create_custom_job(self, request: CreateCustomJobRequest, context: grpc.ServicerContext) -> CustomJob:
        self._refuse_before_looking("CreateCustomJob", request.parent, context)
        failure = self.faults.next_create_failure()
        if failure is not None and not failure.after_create:
            context.abort(failure.code, failure.message)
        problems = create_request_problems(request)
        problems += reservation_problems(request.custom_job, self.executor.quota.model)
        if problems:
            _abort_invalid(context, problems)
        on_resource = bool(request.custom_job.job_spec.persistent_resource_id)
        if on_resource:
            self._refuse_off_the_resource(request, context)
        job = CustomJob(request.custom_job)
        for field in _OUTPUT_ONLY:
            delattr(job, field)
        # A job on a persistent resource draws on the resource's GPUs, already counted against the quota.
        over = [] if on_resource else self.executor.quota.model.never_fits(region_of(request.parent), gpu_demand(job))
        if over:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, QUOTA_MESSAGE.format(metric=", ".join(over)))
        now = dt.datetime.now(dt.UTC)
        job.name = f"{request.parent}/customJobs/{self.store.new_job_id()}"
        job.state = JobState.JOB_STATE_QUEUED  # type: ignore[assignment]  # proto-plus enum members are ints
        job.create_time = now
        job.update_time = now
        job = self.store.add(job)
        self.executor.created(job, self.faults.for_new_job())
        time.sleep(self.faults.next_create_delay())  # the job exists; the caller is still waiting
        if failure is not None:
            context.abort(failure.code, failure.message)
        return job

    def _refuse_off_the_resource(self, request: CreateCustomJobRequest, context: grpc.ServicerContext) -> None:
        """A job naming job_spec.persistent_resource_id must fit the resource (persistent_resources.py)."""
        if self.persistent is None:
            field = "custom_job.job_spec.persistent_resource_id"
            _abort_invalid(context, [(field, "this JobService serves no persistent resources")])
            return
        refusal = self.persistent.job_refusal(request.parent, request.custom_job)
        if refusal is None:
            return
        code, problems = refusal
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            _abort_invalid(context, problems)
        context.abort(code, "; ".join(f"{field}: {why}" for field, why in problems))

    def get_custom_job(self, request: GetCustomJobRequest, context: grpc.ServicerContext) -> CustomJob:
        self._refuse_before_looking("GetCustomJob", request.name, context)
        return self._existing(request.name, context)

    def list_custom_jobs(self, request: ListCustomJobsRequest, context: grpc.ServicerContext) -> ListCustomJobsResponse:
        self._refuse_before_looking("ListCustomJobs", request.parent, context)
        if not PARENT_RE.fullmatch(request.parent):
            _abort_invalid(context, [("parent", f"must look like projects/P/locations/L, got {request.parent!r}")])
        try:
            matches = parse_filter(request.filter, self.faults.hyphenated_label_keys)
        except FilterError as error:
            _abort_invalid(context, [("filter", str(error))])
        if request.page_token and not request.page_token.isdigit():
            _abort_invalid(context, [("page_token", "is not a token this service returned")])
        if request.page_size < 0:
            _abort_invalid(context, [("page_size", f"must not be negative, got {request.page_size}")])
        mask = field_mask_pb2.FieldMask(paths=list(request.read_mask.paths)) if "read_mask" in request else None
        if mask is not None and not mask.IsValidForDescriptor(_CUSTOM_JOB):
            _abort_invalid(context, [("read_mask", f"names a field CustomJob does not have: {list(mask.paths)}")])
        largest = self.faults.max_page_size or MAX_PAGE_SIZE
        size = min(request.page_size or DEFAULT_PAGE_SIZE, largest)
        masked = mask if mask is not None and mask.paths else None  # an empty mask reads every field
        copy = (lambda job: _masked(job, masked)) if masked is not None else None
        page, more = self.store.page(request.parent, matches, int(request.page_token or 0), size, copy)
        next_token = job_id_of(page[-1].name) if more else ""
        return ListCustomJobsResponse(custom_jobs=page, next_page_token=next_token)

    def cancel_custom_job(self, request: CancelCustomJobRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self._refuse_before_looking("CancelCustomJob", request.name, context)
        job = self._existing(request.name, context)
        try:
            self.executor.cancel(job.name)
        except TransitionRefused:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"The CustomJob has already ended ({job.state.name}).")
        return empty_pb2.Empty()

    def delete_custom_job(self, request: DeleteCustomJobRequest, context: grpc.ServicerContext):
        job = self._existing(request.name, context)
        if job.state in ACTIVE_STATES:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"The CustomJob is {job.state.name}; cancel it and wait for it to end before deleting it.",
            )
        self.store.delete(job.name)
        now = dt.datetime.now(dt.UTC)
        metadata = DeleteOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
        location = job.name.split("/customJobs/")[0]
        operation = operations_pb2.Operation(name=f"{location}/operations/{self.store.new_job_id()}", done=True)
        operation.metadata.Pack(DeleteOperationMetadata.pb(metadata))
        operation.response.Pack(empty_pb2.Empty())
        self._operations[operation.name] = operation
        return operation

    def get_operation(
        self, request: operations_pb2.GetOperationRequest, context: grpc.ServicerContext
    ) -> operations_pb2.Operation:
        """An operation this server returned (since it started); the Operations mixin's GetOperation."""
        operation = self._operations.get(request.name)
        if operation is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Operation {request.name} does not exist.")
        return operation

    def _refuse_before_looking(self, method: str, resource: str, context: grpc.ServicerContext) -> None:
        with self._calls_lock:
            self._calls[method] += 1
        # Google's front end checks the caller's permission, then the request-rate quota, before the service
        # looks at the request.
        if self.faults.denied(method):
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                PERMISSION_MESSAGE.format(permission=PERMISSIONS[method], resource=resource),
            )
        if self.faults.rate_limited(method):
            project = resource.split("/")[1] if resource.count("/") >= 1 else "unknown"
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_MESSAGE.format(project=project))

    def _existing(self, name: str, context: grpc.ServicerContext) -> CustomJob:
        if not JOB_NAME_RE.fullmatch(name):
            _abort_invalid(context, [("name", f"must look like projects/P/locations/L/customJobs/ID, got {name!r}")])
        job = self.store.get(name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"The CustomJob {name} does not exist.")
            raise AssertionError("context.abort raises")
        return job


def _masked(job: CustomJob, mask: field_mask_pb2.FieldMask) -> CustomJob:
    """Only the fields `mask` names, as Vertex reads a listing with `read_mask`."""
    kept = CustomJob.pb()()
    mask.MergeMessage(CustomJob.pb(job), kept)
    return CustomJob.wrap(kept)


def _abort_invalid(context: grpc.ServicerContext, problems: list[tuple[str, str]]) -> None:
    violations = [error_details_pb2.BadRequest.FieldViolation(field=f, description=m) for f, m in problems]
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=violations))
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=vertex_error_text(problems), details=[detail])
    context.abort_with_status(rpc_status.to_status(status))
