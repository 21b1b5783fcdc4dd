"""The Vertex AI JobService, through the GAPIC `JobServiceClient` (v1), imported only when a job is touched.

The regional endpoint ({region}-aiplatform.googleapis.com), or `vertex_endpoint` (host:port, an insecure
channel) for the local JobService. The client has no default retry (vertex.md §1.4), so every call here
passes its own deadline and retries transient codes with jittered backoff — except CreateCustomJob, which is
not idempotent: before creating again after an error, the job is looked up by its labels.
"""

from __future__ import annotations

import json
import random
import time
from datetime import datetime
from typing import Any

from functions.errors import Transient
from functions.failures import TRANSIENT_CALL_CODES, call_failure_reason
from functions.lifecycle import JobSnapshot

CALL_TIMEOUT = 30.0


class CallRejected(Exception):
    """Vertex refused the call for good (INVALID_ARGUMENT, PERMISSION_DENIED, quota …)."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _permanent_or_message(exc: Exception) -> str:
    """Raise CallRejected for a permanent gRPC code; return the message of a transient one."""
    status = getattr(exc, "grpc_status_code", None)
    code = status.value[0] if status is not None else 2  # UNKNOWN
    message = getattr(exc, "message", None) or str(exc)
    if code not in TRANSIENT_CALL_CODES:
        raise CallRejected(code, call_failure_reason(code), message) from None
    return message


def _pause(attempt: int) -> None:
    time.sleep(min(8.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0))


def _time(value: Any) -> datetime | None:
    # proto-plus returns DatetimeWithNanoseconds for set timestamps and the epoch (or None) for unset ones.
    if not value or value.timestamp() <= 0:
        return None
    return value


class VertexJobs:
    def __init__(self, project: str, region: str, endpoint: str = "", attempts: int = 5):
        from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

        if endpoint:
            import grpc
            from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

            transport = JobServiceGrpcTransport(channel=grpc.insecure_channel(endpoint))
            self._client = JobServiceClient(transport=transport)
        else:
            self._client = JobServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})
        self.parent = f"projects/{project}/locations/{region}"
        self._attempts = attempts

    def _call(self, what: str, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Call with retries on transient codes; CallRejected on permanent ones, Transient when retries run out."""
        from google.api_core import exceptions as gexc

        for attempt in range(self._attempts):
            if attempt:
                _pause(attempt)
            try:
                return fn(*args, timeout=CALL_TIMEOUT, **kwargs)
            except gexc.GoogleAPICallError as exc:
                problem = _permanent_or_message(exc)
        raise Transient(f"Vertex AI stayed unavailable for {what} ({problem})")

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
        """The job this request's attempt already created, if any (the adopt step of DESIGN.md §4)."""
        filter_ = f'labels.trainctl-key="{key_hash}" AND labels.trainctl-attempt="{attempt}"'
        pager = self._call(
            "ListCustomJobs", self._client.list_custom_jobs, request={"parent": self.parent, "filter": filter_}
        )
        for job in pager:
            return self._snapshot(job)
        return None

    def create(self, custom_job: dict[str, Any], key_hash: str, job_attempt: int) -> JobSnapshot:
        from google.api_core import exceptions as gexc
        from google.cloud.aiplatform_v1 import CustomJob

        request = {"parent": self.parent, "custom_job": CustomJob.from_json(json.dumps(custom_job))}
        for attempt in range(self._attempts):
            if attempt:
                _pause(attempt)
                existing = self.find(key_hash, job_attempt)
                if existing is not None:
                    return existing  # the failed call had created it after all
            try:
                return self._snapshot(self._client.create_custom_job(request=request, timeout=CALL_TIMEOUT))
            except gexc.GoogleAPICallError as exc:
                problem = _permanent_or_message(exc)
        raise Transient(f"Vertex AI stayed unavailable for CreateCustomJob ({problem})")

    def get(self, name: str) -> JobSnapshot | None:
        try:
            return self._snapshot(self._call("GetCustomJob", self._client.get_custom_job, name=name))
        except CallRejected as exc:
            if exc.code == 5:  # NOT_FOUND: deleted, or a log line about a job from elsewhere
                return None
            raise

    def cancel(self, name: str) -> None:
        self._call("CancelCustomJob", self._client.cancel_custom_job, name=name)
