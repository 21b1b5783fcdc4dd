"""The Vertex AI JobService, through the GAPIC `JobServiceClient` (v1), imported only when a job is touched.

The regional endpoint ({region}-aiplatform.googleapis.com), or `vertex_endpoint` (host:port, an insecure
channel) for the local JobService. The client has no default retry (vertex.md §1.4), so every call here goes
through the adapters' retry policy (functions/retry.py), which cuts each call's timeout to the handler's
deadline. CreateCustomJob is not idempotent: before creating again after an error, the job is looked up by
its labels.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from functions.failures import FAILED_PRECONDITION, NOT_FOUND, call_failure_reason, call_is_transient
from functions.lifecycle import JobSnapshot
from functions.ports import Jobs
from functions.retry import Retryable, RetryPolicy

POLICY = RetryPolicy(attempts=5, first_pause=0.5, max_pause=8.0, call_timeout=30.0)


class CallRejected(Exception):
    """Vertex refused the call for good (INVALID_ARGUMENT, PERMISSION_DENIED, quota …)."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _retryable_or_rejected(exc: Exception) -> Exception:
    """Retryable for a transient gRPC code, CallRejected for a permanent one."""
    status = getattr(exc, "grpc_status_code", None)
    code = status.value[0] if status is not None else 2  # UNKNOWN
    message = getattr(exc, "message", None) or str(exc)
    if call_is_transient(code, message):
        return Retryable(f"{type(exc).__name__} {code}: {message}")
    return CallRejected(code, call_failure_reason(code), message)


def _time(value: Any) -> datetime | None:
    # proto-plus returns DatetimeWithNanoseconds for set timestamps and the epoch (or None) for unset ones.
    if not value or value.timestamp() <= 0:
        return None
    return value


class VertexJobs:
    def __init__(self, project: str, region: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

        if endpoint:
            import grpc
            from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

            transport = JobServiceGrpcTransport(channel=grpc.insecure_channel(endpoint))
            self._client = JobServiceClient(transport=transport)
        else:
            self._client = JobServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})
        self.parent = f"projects/{project}/locations/{region}"
        self._policy = policy

    def _call(
        self, what: str, fn: Callable[..., Any], before_retry: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        """`fn(**kwargs)` with the retry policy; CallRejected on permanent codes, Transient when retries run out."""
        from google.api_core import exceptions as gexc

        def attempt(timeout: float) -> Any:
            try:
                return fn(timeout=timeout, **kwargs)
            except gexc.GoogleAPICallError as exc:
                raise _retryable_or_rejected(exc) from None

        return self._policy.call(what, attempt, before_retry)

    @staticmethod
    def _snapshot(job: Any) -> JobSnapshot:
        return JobSnapshot(
            name=job.name,
            state=job.state.name,
            error_code=job.error.code,
            error_message=job.error.message,
            create_time=_time(job.create_time),
            start_time=_time(job.start_time),
            end_time=_time(job.end_time),
            labels=dict(job.labels),
        )

    def find(self, key_hash: str, attempt: int) -> JobSnapshot | None:
        """The job this request's attempt created, if any."""
        filter_ = f'labels.trainctl-key="{key_hash}" AND labels.trainctl-attempt="{attempt}"'
        pager = self._call(
            "ListCustomJobs", self._client.list_custom_jobs, request={"parent": self.parent, "filter": filter_}
        )
        for job in pager:
            return self._snapshot(job)
        return None

    def find_or_create(self, custom_job: dict[str, Any], key_hash: str, attempt: int) -> tuple[JobSnapshot, bool]:
        """DESIGN.md §4 step 3, the one place it is done: (the job, adopted). The job this request's attempt
        already created, if there is one; else a new one, labelled with the key and attempt. CreateCustomJob
        is not idempotent, so before each retry of it (its failed attempt may have taken effect: a lost
        answer, a broken stream) the job is looked for again."""
        from google.cloud.aiplatform_v1 import CustomJob

        existing = self.find(key_hash, attempt)
        if existing is not None:
            return existing, True
        request = {"parent": self.parent, "custom_job": CustomJob.from_json(json.dumps(custom_job))}
        job = self._call(
            "CreateCustomJob",
            self._client.create_custom_job,
            before_retry=lambda: self.find(key_hash, attempt),
            request=request,
        )
        return (job, True) if isinstance(job, JobSnapshot) else (self._snapshot(job), False)

    def get(self, name: str) -> JobSnapshot | None:
        try:
            return self._snapshot(self._call("GetCustomJob", self._client.get_custom_job, name=name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:  # deleted, or a log line about a job from elsewhere
                return None
            raise

    def cancel(self, name: str) -> None:
        """Ask Vertex to cancel; a job that has already ended (FAILED_PRECONDITION) or is gone is left alone."""
        try:
            self._call("CancelCustomJob", self._client.cancel_custom_job, name=name)
        except CallRejected as exc:
            if exc.code not in (FAILED_PRECONDITION, NOT_FOUND):
                raise


class LazyJobs:
    """The Vertex adapter, built on first use: data shards, duplicates and rejections never import the Vertex
    client. `prepare()` builds it in the background when a submission is coming: its import is most of a cold
    submission, and the ledger writes and the `accepted` event before it mostly wait on the network."""

    def __init__(self, factory: Callable[[], Jobs]):
        self._factory = factory
        self._jobs: Jobs | None = None
        self._lock = threading.Lock()

    def _built(self) -> Jobs:
        with self._lock:
            if self._jobs is None:
                self._jobs = self._factory()
            return self._jobs

    def prepare(self) -> None:
        """Build the client in the background; a failure here surfaces when the client is used."""
        if self._jobs is None:
            threading.Thread(target=self._build_quietly, name="vertex-client", daemon=True).start()

    def _build_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._built()

    @property
    def parent(self) -> str:
        return self._built().parent

    def find_or_create(self, custom_job: dict[str, Any], key_hash: str, attempt: int) -> tuple[JobSnapshot, bool]:
        return self._built().find_or_create(custom_job, key_hash, attempt)

    def get(self, name: str) -> JobSnapshot | None:
        return self._built().get(name)

    def cancel(self, name: str) -> None:
        self._built().cancel(name)
