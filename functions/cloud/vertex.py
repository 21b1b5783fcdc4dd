"""The Vertex AI JobService over its REST API (v1), one small HTTP call per operation.

Not the GAPIC client: importing `google.cloud.aiplatform_v1` was most of a cold submission (bench/RESULTS.md),
and the controller makes four calls. The client library stays the source of truth for the API's shape: a test
parses every body sent here into `aiplatform_v1.CustomJob` with `json_format` (tests/unit/test_vertex_bodies.py).

The regional endpoint (https://{region}-aiplatform.googleapis.com), or `vertex_endpoint` (the local stack's
JobService REST URL). Errors arrive in Google's REST shape, `{"error": {"code", "message", "status"}}`; the
status name is read back into its google.rpc.Code number, so failures.py classifies a call as it always has.
Every call goes through the adapters' retry policy (functions/cloud/retry.py), which cuts each call's timeout to the
handler's deadline. CreateCustomJob is not idempotent: before creating again after an error, the job is looked
up by its labels (functions/cloud/job_labels.py). The reconcile sweep lists this deployment's waiting and running jobs
a page at a time (`active_jobs`) instead of reading each one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from functions.cloud.failures import (
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    NOT_FOUND,
    call_failure_reason,
    call_is_transient,
)
from functions.cloud.job_labels import (
    ATTEMPT,
    KEY,
    active_filter,
    attempt_filter,
    is_legacy_attempt,
    legacy_attempt_filter,
)
from functions.cloud.job_snapshot import JobSnapshot
from functions.cloud.ports import Jobs
from functions.cloud.rest import google_error, request_json, rest_session
from functions.cloud.retry import Retryable, RetryPolicy

POLICY = RetryPolicy(attempts=5, first_pause=0.5, max_pause=8.0, call_timeout=30.0)
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
_MAP_FIELDS = frozenset({"labels"})  # their keys are data, not field names
# ListCustomJobs' page size: Vertex documents no maximum for it ("The standard list page size"), and AIP-158 has a
# service coerce a larger page_size down to its own maximum; 1,000 is the maximum AIP-158's example gives. Pages
# are followed by their tokens whatever their length (a service "may return fewer results than requested").
LIST_PAGE_SIZE = 1000
# The fields observation reads of a job that waits or runs (`snapshot`): a listing carries no more.
LIST_READ_MASK = "name,state,createTime,startTime,labels"


class CallRejected(Exception):
    """Vertex refused the call for good (INVALID_ARGUMENT, PERMISSION_DENIED, quota …)."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def answer_of(what: str, status: int, body: Any) -> dict[str, Any]:
    """The JSON object of a call answered with HTTP `status` and `body` ({} when it has none); Retryable when the
    refusal is worth another attempt, CallRejected when it is for good."""
    if status < 300:
        return body if isinstance(body, dict) else {}
    code, message = google_error(status, body)
    if call_is_transient(code, message):
        raise Retryable(f"{what} {status} (code {code}): {message}")
    raise CallRejected(code, call_failure_reason(code), message)


def json_names(value: Any) -> Any:
    """A CustomJob dict with the proto's field names → the JSON names (lowerCamelCase) of its REST form;
    the keys of map fields (labels) are kept as they are."""
    if isinstance(value, list):
        return [json_names(item) for item in value]
    if not isinstance(value, dict):
        return value
    renamed = {}
    for key, item in value.items():
        head, *rest = key.split("_")
        name = head + "".join(part[:1].upper() + part[1:] for part in rest)
        renamed[name] = dict(item) if key in _MAP_FIELDS and isinstance(item, dict) else json_names(item)
    return renamed


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def snapshot(job: dict[str, Any]) -> JobSnapshot:
    """What the controller keeps of a CustomJob in its REST form."""
    error = job.get("error") or {}
    return JobSnapshot(
        name=job["name"],
        state=job.get("state", "JOB_STATE_UNSPECIFIED"),
        error_code=int(error.get("code", 0)),
        error_message=error.get("message", ""),
        create_time=_time(job.get("createTime")),
        start_time=_time(job.get("startTime")),
        end_time=_time(job.get("endTime")),
        labels=dict(job.get("labels") or {}),
    )


def _regional_api(region: str) -> str:
    return f"https://{region}-aiplatform.googleapis.com"


class VertexApi:
    """One Vertex AI REST service of a project (the JobService here, the ModelService in functions/cloud/registry.py):
    its endpoint per region and the call with the retry policy and Google's error shape."""

    def __init__(self, project: str, region: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        self._session, self._base = rest_session(endpoint or None, _regional_api(region), _SCOPES)
        self._endpoint = endpoint
        self._project = project
        self.parent = f"projects/{project}/locations/{region}"
        self._policy = policy

    def parent_in(self, region: str | None) -> str:
        return self.parent if region is None else f"projects/{self._project}/locations/{region}"

    def _base_for(self, path: str) -> str:
        """Each region has its own endpoint; a path names its location (projects/P/locations/L/…)."""
        if self._endpoint:
            return self._base
        parts = path.split("/")
        return _regional_api(parts[3]) if len(parts) > 3 and parts[2] == "locations" else self._base

    def _call(
        self,
        what: str,
        method: str,
        path: str,
        before_retry: Callable[[], Any] | None = None,
        policy: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """The JSON answer of `method /v1/{path}`, with the retry policy (the service's, or `policy`); CallRejected
        on a permanent code, Transient when the retries run out."""
        url = f"{self._base_for(path)}/v1/{path}"

        def attempt(timeout: float) -> Any:
            status, body = request_json(self._session, method, url, timeout, "Vertex AI", **kwargs)
            return answer_of(what, status, body)

        return (policy or self._policy).call(what, attempt, before_retry)


class VertexJobs(VertexApi):
    def find(self, labels: dict[str, str], region: str | None = None, legacy: bool = True) -> JobSnapshot | None:
        """The job of the attempt whose job carries `labels`, if it was created (in its ladder rung's region). With
        `legacy`, also one an earlier version of trainctl created for it under the labels of before issue 25."""
        parent = f"{self.parent_in(region)}/customJobs"
        found = self._call("ListCustomJobs", "GET", parent, params={"filter": attempt_filter(labels)})
        jobs = found.get("customJobs") or []
        if jobs:
            return snapshot(jobs[0])
        return self._find_legacy(parent, labels[KEY], int(labels[ATTEMPT])) if legacy else None

    def _find_legacy(self, parent: str, key_hash: str, attempt: int) -> JobSnapshot | None:
        """The attempt's job as trainctl labelled it before issue 25, looked up with the filter it used then. Were
        that filter refused (INVALID_ARGUMENT: Vertex does not take a hyphenated key), it was refused then too,
        before every CreateCustomJob, so no such job was ever created: none. A job listed must carry both labels."""
        try:
            legacy_filter = legacy_attempt_filter(key_hash, attempt)
            found = self._call("ListCustomJobs", "GET", parent, params={"filter": legacy_filter})
        except CallRejected as exc:
            if exc.code == INVALID_ARGUMENT:
                return None
            raise
        jobs = [job for job in found.get("customJobs") or [] if is_legacy_attempt(job.get("labels"), key_hash, attempt)]
        return snapshot(jobs[0]) if jobs else None

    def find_or_create(
        self, custom_job: dict[str, Any], region: str | None = None, legacy: bool = True
    ) -> tuple[JobSnapshot, bool]:
        """DESIGN.md §4 step 3, the one place it is done: (the job, adopted). The job this request's attempt
        already created, if there is one; else a new one, labelled with the key and attempt, in `region` (default:
        the adapter's). CreateCustomJob is not idempotent, so before each retry of it (its failed attempt may have
        taken effect: a lost answer, a broken stream) the job is looked for again. `legacy`: an earlier version of
        trainctl may have held this attempt's claim (functions/cloud/job_labels.py)."""
        labels = custom_job["labels"]
        existing = self.find(labels, region, legacy)
        if existing is not None:
            return existing, True
        job = self._call(
            "CreateCustomJob",
            "POST",
            f"{self.parent_in(region)}/customJobs",
            before_retry=lambda: self.find(labels, region, legacy=False),
            json=json_names(custom_job),
        )
        return (job, True) if isinstance(job, JobSnapshot) else (snapshot(job), False)

    def active_jobs(
        self, region: str, deployment: str, since: datetime | None = None, before: datetime | None = None
    ) -> dict[str, JobSnapshot]:
        """Every job of the deployment that waits or runs in `region` (created in [since, before) when given), by
        name: ListCustomJobs filtered on the deployment's label, those states and the create time, page after page,
        each job with only the fields observation reads."""
        params: dict[str, Any] = {
            "filter": active_filter(deployment, since, before),
            "pageSize": LIST_PAGE_SIZE,
            "readMask": LIST_READ_MASK,
        }
        jobs: dict[str, JobSnapshot] = {}
        while True:
            page = self._call("ListCustomJobs", "GET", f"{self.parent_in(region)}/customJobs", params=params)
            jobs.update((job["name"], snapshot(job)) for job in page.get("customJobs") or [])
            if not page.get("nextPageToken"):
                return jobs
            params["pageToken"] = page["nextPageToken"]

    def get(self, name: str) -> JobSnapshot | None:
        try:
            return snapshot(self._call("GetCustomJob", "GET", name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:  # deleted, or a log line about a job from elsewhere
                return None
            raise

    def cancel(self, name: str) -> None:
        """Ask Vertex to cancel; a job that has already ended (FAILED_PRECONDITION) or is gone is left alone."""
        try:
            self._call("CancelCustomJob", "POST", f"{name}:cancel", json={})
        except CallRejected as exc:
            if exc.code not in (FAILED_PRECONDITION, NOT_FOUND):
                raise


class LazyJobs:
    """The Vertex adapter, built on first use: data shards, duplicates and rejections never build it.
    `prepare()` builds it in the background when a submission is coming (in the cloud that reads the
    credentials), while the ledger writes and the `accepted` event wait on the network."""

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
        """Build the adapter in the background; a failure here surfaces when it is used."""
        if self._jobs is None:
            threading.Thread(target=self._build_quietly, name="vertex-client", daemon=True).start()

    def _build_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._built()

    @property
    def parent(self) -> str:
        return self._built().parent

    def find_or_create(
        self, custom_job: dict[str, Any], region: str | None = None, legacy: bool = True
    ) -> tuple[JobSnapshot, bool]:
        return self._built().find_or_create(custom_job, region, legacy)

    def active_jobs(
        self, region: str, deployment: str, since: datetime | None = None, before: datetime | None = None
    ) -> dict[str, JobSnapshot]:
        return self._built().active_jobs(region, deployment, since, before)

    def get(self, name: str) -> JobSnapshot | None:
        return self._built().get(name)

    def cancel(self, name: str) -> None:
        self._built().cancel(name)
