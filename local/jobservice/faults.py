"""Faults the local JobService can be told to produce, for tests of the controller's error handling.

- fail the next N CreateCustomJob (or UploadModel, or CreateBatchPredictionJob) calls with a gRPC code and Vertex's
  wording for it (optionally after the job was created, or the upload started, anyway, as when a response is lost on
  the way back: UNKNOWN "Stream removed");
- rate-limit the next N Get/List/Cancel calls (RESOURCE_EXHAUSTED, Vertex's request-rate text);
- refuse the next N Create/List/Get/Cancel calls with PERMISSION_DENIED (IAM's text), as while fresh grants
  propagate;
- for the next created jobs: hold them in JOB_STATE_QUEUED (quota wait) or JOB_STATE_PENDING
  (provisioning wait), fail them with code 8 and the quota text, or make their provisioning meet
  stockouts (see vertex_retries.py for what Vertex does then);
- make the next uploads run longer before their version exists (a real one takes minutes, 0.5 s here);
- preempt a running job (see vertex_retries.py);
- read a hyphenated label key in a list filter (`labels.a-b=…`) instead of refusing it (filters.py), as Vertex
  may: whether it does is not documented, so both are tested;
- hold a listing's pages to fewer jobs than its usual maximum, as Vertex may (its maximum is not documented);
- make one deployed model of an endpoint answer 500 for a fraction of its prediction requests, or answer later (the
  endpoint's router does it, endpoint_service.py, before the model's own server is asked), so that a canary's
  errors and latency can be shown without a bad model.

This module is the plan; control.py exposes it to other processes, execution.py carries it out.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import grpc

# Vertex's texts (reference/vertex.md §6.1–6.2; sources in local/FIDELITY.md).
QUOTA_MESSAGE = "The following quota metrics exceed quota limits: {metric}"
DEFAULT_QUOTA_METRIC = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
STOCKOUT_MESSAGE = (
    "Resources are insufficient in region: {region}. Try a different region or use a different accelerator."
)
# Google's request-rate quota text (service control's "Quota exceeded for quota metric …" form) for
# Vertex's "Resource management (CRUD) requests per minute per region" quota.
RATE_LIMIT_MESSAGE = (
    "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit "
    "'Resource management (CRUD) requests per minute per region' of service 'aiplatform.googleapis.com' "
    "for consumer 'project_number:{project}'."
)
RATE_LIMITED_METHODS = ("GetCustomJob", "ListCustomJobs", "CancelCustomJob")
# IAM's refusal as Vertex words it (reason IAM_PERMISSION_DENIED): the permission each method needs, on the
# location for create and list and on the job for get and cancel.
PERMISSION_MESSAGE = (
    "Permission '{permission}' denied on resource '//aiplatform.googleapis.com/{resource}' (or it may not exist)."
)
PERMISSIONS = {
    "CreateCustomJob": "aiplatform.customJobs.create",
    "ListCustomJobs": "aiplatform.customJobs.list",
    "GetCustomJob": "aiplatform.customJobs.get",
    "CancelCustomJob": "aiplatform.customJobs.cancel",
}

DEFAULT_MESSAGES = {
    grpc.StatusCode.UNAVAILABLE: "The service is currently unavailable.",
    grpc.StatusCode.RESOURCE_EXHAUSTED: QUOTA_MESSAGE.format(metric=DEFAULT_QUOTA_METRIC),
    grpc.StatusCode.INVALID_ARGUMENT: (
        "List of found errors:\t1.Field: custom_job; Message: rejected by the local JobService's fault injection\t"
    ),
    grpc.StatusCode.DEADLINE_EXCEEDED: "Deadline exceeded.",
    grpc.StatusCode.INTERNAL: "Internal error encountered.",
    # What gRPC reports when the HTTP/2 stream breaks before the answer arrived.
    grpc.StatusCode.UNKNOWN: "Stream removed",
}


# The calls that create something, and may fail after it.
CREATE_METHODS = ("CreateCustomJob", "UploadModel", "CreateBatchPredictionJob")


@dataclass(frozen=True)
class CreateFailure:
    code: grpc.StatusCode
    message: str
    after_create: bool  # the job is created (the upload started), and the caller still gets the error


@dataclass(frozen=True)
class NewJobFaults:
    """What the faults have in store for one newly created job."""

    queue_hold: float = 0.0  # seconds in QUEUED
    pending_hold: float = 0.0  # seconds in PENDING
    quota_failure: bool = False  # ends FAILED, code 8, the quota text
    stockouts: int = 0  # provisioning attempts that meet a stockout


@dataclass(frozen=True)
class PredictionFault:
    """What the router does to the requests one deployed model gets."""

    error_fraction: float = 0.0  # this share of its requests get 500 without reaching its server
    added_seconds: float = 0.0  # every request of it waits this long first


class FaultPlan:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._prediction_faults: dict[str, PredictionFault] = {}
        self._draw = random.Random()
        self._create_failures: dict[str, list[CreateFailure]] = {method: [] for method in CREATE_METHODS}
        self._create_delays: list[float] = []
        self._upload_durations: list[float] = []
        self._rate_limits: list[frozenset[str]] = []
        self._denials: list[frozenset[str]] = []
        self._queue_holds: list[float] = []
        self._pending_holds: list[float] = []
        self._quota_failures = 0
        self._stockouts: list[int] = []
        self.hyphenated_label_keys = False
        self.max_page_size: int | None = None

    def fail_next_creates(
        self,
        code: grpc.StatusCode,
        count: int = 1,
        message: str | None = None,
        after_create: bool = False,
        method: str = "CreateCustomJob",
    ) -> None:
        if method not in CREATE_METHODS:
            raise ValueError(f"method: {method!r} is not one of {CREATE_METHODS}")
        failure = CreateFailure(code, message or DEFAULT_MESSAGES.get(code, code.name), after_create)
        with self._lock:
            self._create_failures[method] += [failure] * count

    def next_create_failure(self, method: str = "CreateCustomJob") -> CreateFailure | None:
        with self._lock:
            failures = self._create_failures[method]
            return failures.pop(0) if failures else None

    def delay_next_creates(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._create_delays += [seconds] * count

    def next_create_delay(self) -> float:
        with self._lock:
            return self._create_delays.pop(0) if self._create_delays else 0.0

    def slow_next_uploads(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._upload_durations += [seconds] * count

    def next_upload_seconds(self) -> float | None:
        """How long the upload starting now runs; None for the registry's usual time."""
        with self._lock:
            return self._upload_durations.pop(0) if self._upload_durations else None

    def rate_limit_next_calls(self, count: int, methods: tuple[str, ...] = RATE_LIMITED_METHODS) -> None:
        self._plan_refusals(self._rate_limits, count, methods, RATE_LIMITED_METHODS, "rate-limited")

    def rate_limited(self, method: str) -> bool:
        """Whether this call of `method` is refused for the request rate (and uses up one refusal)."""
        return self._take_refusal(self._rate_limits, method)

    def deny_next_calls(self, count: int, methods: tuple[str, ...] = tuple(PERMISSIONS)) -> None:
        self._plan_refusals(self._denials, count, methods, tuple(PERMISSIONS), "denied")

    def denied(self, method: str) -> bool:
        """Whether this call of `method` is refused with PERMISSION_DENIED (and uses up one refusal)."""
        return self._take_refusal(self._denials, method)

    def _plan_refusals(
        self, refusals: list[frozenset[str]], count: int, methods: tuple[str, ...], allowed: tuple[str, ...], what: str
    ) -> None:
        unknown = set(methods) - set(allowed)
        if unknown:
            raise ValueError(f"methods: {sorted(unknown)} cannot be {what}; choose from {allowed}")
        with self._lock:
            refusals += [frozenset(methods)] * count

    def _take_refusal(self, refusals: list[frozenset[str]], method: str) -> bool:
        """Whether one of the planned refusals covers `method`; the first that does is used up."""
        with self._lock:
            for index, methods in enumerate(refusals):
                if method in methods:
                    del refusals[index]
                    return True
            return False

    def hold_next_in_queue(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._queue_holds += [seconds] * count

    def hold_next_in_pending(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._pending_holds += [seconds] * count

    def fail_next_for_quota(self, count: int = 1) -> None:
        with self._lock:
            self._quota_failures += count

    def stock_out_next(self, count: int = 1) -> None:
        """The next created job meets `count` stockouts before it gets its nodes."""
        with self._lock:
            self._stockouts.append(count)

    def for_new_job(self) -> NewJobFaults:
        """Take what is planned for the job being created now."""
        with self._lock:
            faults = NewJobFaults(
                queue_hold=self._queue_holds.pop(0) if self._queue_holds else 0.0,
                pending_hold=self._pending_holds.pop(0) if self._pending_holds else 0.0,
                quota_failure=self._quota_failures > 0,
                stockouts=self._stockouts.pop(0) if self._stockouts else 0,
            )
            self._quota_failures = max(0, self._quota_failures - 1)
            return faults

    def disturb_predictions(self, deployed_model_id: str, error_fraction: float, added_seconds: float) -> None:
        if not deployed_model_id:
            raise ValueError("deployed_model_id is required: the deployed model whose requests to disturb")
        if not 0.0 <= error_fraction <= 1.0:
            raise ValueError(f"error_fraction must be from 0 to 1, got {error_fraction}")
        if added_seconds < 0:
            raise ValueError(f"added_seconds must be 0 or more, got {added_seconds}")
        with self._lock:
            self._prediction_faults[deployed_model_id] = PredictionFault(error_fraction, added_seconds)

    def prediction_fault(self, deployed_model_id: str) -> tuple[bool, float]:
        """(answer 500?, seconds to wait first) for one request to the deployed model."""
        with self._lock:
            fault = self._prediction_faults.get(deployed_model_id, PredictionFault())
            return self._draw.random() < fault.error_fraction, fault.added_seconds

    def clear(self) -> None:
        with self._lock:
            self._prediction_faults.clear()
            for failures in self._create_failures.values():
                failures.clear()
            self._create_delays.clear()
            self._upload_durations.clear()
            self._rate_limits.clear()
            self._denials.clear()
            self._queue_holds.clear()
            self._pending_holds.clear()
            self._quota_failures = 0
            self._stockouts.clear()
            self.hyphenated_label_keys = False
            self.max_page_size = None
