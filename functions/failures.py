"""Why did it fail, and is trying again worth money? Classification of Vertex errors (vertex.md §6).

Pure. Two questions are answered in one place:
- a gRPC status from a JobService *call*: permanent (reject, never retry) or transient (retry, then redeliver);
- a *job* that ended FAILED: quota | capacity | preemption | internal | user | invalid, and whether the
  controller should resubmit it (capacity, preemption and internal only — retrying user errors wastes GPUs).
"""

from __future__ import annotations

import re
from typing import Literal

Reason = Literal["quota", "capacity", "preemption", "internal", "user", "invalid"]
RESUBMITTABLE: frozenset[Reason] = frozenset({"capacity", "preemption", "internal"})

# google.rpc.Code numbers, so the pure core needs no grpc import.
INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED = 3, 5, 8, 13, 14, 4
TRANSIENT_CALL_CODES = frozenset({UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, 10})  # 10 = ABORTED

_QUOTA = re.compile(r"quota", re.I)
_CAPACITY = re.compile(r"resources are insufficient|stockout|resource_pool_exhausted|insufficient capacity", re.I)
_PREEMPTION = re.compile(r"preempt", re.I)
_USER = re.compile(r"exited with a non-zero status|ran out of memory|user error", re.I)
_INTERNAL = re.compile(r"internal error", re.I)


def classify_job_failure(code: int, message: str, started: bool) -> Reason:
    """Reason for a job that ended FAILED; `started` tells whether it ever reached RUNNING."""
    # The text decides before the code: a stockout may also carry RESOURCE_EXHAUSTED.
    if _QUOTA.search(message):
        return "quota"
    if _PREEMPTION.search(message):
        return "preemption"
    if _CAPACITY.search(message):
        # A stockout after the job ran is Spot/host reclamation: the job was preempted.
        return "preemption" if started else "capacity"
    if code == RESOURCE_EXHAUSTED:
        return "quota"
    if _USER.search(message):  # Vertex reports replica exits with code 3, so this comes before INVALID_ARGUMENT
        return "user"
    if code == INVALID_ARGUMENT:
        return "invalid"
    if code == INTERNAL or _INTERNAL.search(message):
        return "internal"
    return "user"


def call_failure_reason(code: int) -> Reason:
    """Reason for a JobService call refused with a permanent code (not in TRANSIENT_CALL_CODES)."""
    return "quota" if code == RESOURCE_EXHAUSTED else "invalid"
