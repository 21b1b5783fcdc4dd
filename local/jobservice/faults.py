"""Faults the local JobService can be told to produce, for tests of the controller's error handling.

- fail the next N CreateCustomJob calls with a gRPC code and Vertex's wording for it (optionally
  after the job was created anyway, as when a response is lost on the way back);
- hold the next N created jobs in JOB_STATE_QUEUED for some seconds (quota queueing, stuck jobs);
- preempt a running job (see execution.py: SIGTERM to every replica, then a restart when
  `restart_job_on_worker_restart` is set, else FAILED with the stockout message).

This module is the plan; control.py exposes it to other processes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

# Vertex's texts (reference/vertex.md §6.1–6.2).
QUOTA_MESSAGE = (
    "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
)
STOCKOUT_MESSAGE = (
    "Resources are insufficient in region: {region}. Try a different region or use a different accelerator."
)

DEFAULT_MESSAGES = {
    grpc.StatusCode.UNAVAILABLE: "The service is currently unavailable.",
    grpc.StatusCode.RESOURCE_EXHAUSTED: QUOTA_MESSAGE,
    grpc.StatusCode.INVALID_ARGUMENT: (
        "List of found errors:\t1.Field: custom_job; Message: rejected by the local JobService's fault injection\t"
    ),
    grpc.StatusCode.DEADLINE_EXCEEDED: "Deadline exceeded.",
    grpc.StatusCode.INTERNAL: "Internal error encountered.",
}


@dataclass(frozen=True)
class CreateFailure:
    code: grpc.StatusCode
    message: str
    after_create: bool  # the job is created, and the caller still gets the error


class FaultPlan:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._create_failures: list[CreateFailure] = []
        self._queue_holds: list[float] = []
        self._create_delays: list[float] = []

    def fail_next_creates(
        self, code: grpc.StatusCode, count: int = 1, message: str | None = None, after_create: bool = False
    ) -> None:
        failure = CreateFailure(code, message or DEFAULT_MESSAGES.get(code, code.name), after_create)
        with self._lock:
            self._create_failures += [failure] * count

    def next_create_failure(self) -> CreateFailure | None:
        with self._lock:
            return self._create_failures.pop(0) if self._create_failures else None

    def hold_next_in_queue(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._queue_holds += [seconds] * count

    def next_queue_hold(self) -> float:
        with self._lock:
            return self._queue_holds.pop(0) if self._queue_holds else 0.0

    def delay_next_creates(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._create_delays += [seconds] * count

    def next_create_delay(self) -> float:
        with self._lock:
            return self._create_delays.pop(0) if self._create_delays else 0.0

    def clear(self) -> None:
        with self._lock:
            self._create_failures.clear()
            self._queue_holds.clear()
            self._create_delays.clear()
