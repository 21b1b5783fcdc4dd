"""Why did it fail, and is trying again worth money? Classification of Vertex errors (vertex.md §6).

Pure. Two questions are answered in one place:
- a gRPC status from a JobService *call*: permanent (reject, never retry) or transient (retry, then redeliver);
- a *job* that ended FAILED: quota | capacity | preemption | internal | user | invalid (| data, from the trainer's
  note), and whether the controller should resubmit it (capacity, preemption and internal only — retrying user
  errors wastes GPUs).
"""

from __future__ import annotations

import re

from schemas.events import FailureReason as Reason

RESUBMITTABLE: frozenset[Reason] = frozenset({"capacity", "preemption", "internal"})

# google.rpc.Code numbers, so the pure core needs no grpc import.
UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, PERMISSION_DENIED, RESOURCE_EXHAUSTED = 2, 3, 4, 5, 7, 8
FAILED_PRECONDITION, ABORTED, INTERNAL, UNAVAILABLE = 9, 10, 13, 14
# UNKNOWN is what gRPC reports for a stream broken mid-call ("Stream removed"): the call may have taken effect,
# and trying again (after looking, for a create) is right.
TRANSIENT_CALL_CODES = frozenset({UNKNOWN, DEADLINE_EXCEEDED, ABORTED, INTERNAL, UNAVAILABLE})

# Vertex names the GPU quota that is short in its RESOURCE_EXHAUSTED text (reference/vertex.md §6.1):
# "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus".
_QUOTA_METRIC = re.compile(r"aiplatform\.googleapis\.com/custom_model_training_[a-z0-9_]+")
QUOTA_ADVICE = (
    "Ask for more of this quota in the job's region (Console: IAM & Admin > Quotas & System Limits), "
    "or choose another GPU type or region, or scheduling.strategy spot/flex_start, which use preemptible quota."
)

_QUOTA = re.compile(r"quota", re.I)
_CAPACITY = re.compile(r"resources are insufficient|stockout|resource_pool_exhausted|insufficient capacity", re.I)
_PREEMPTION = re.compile(r"preempt", re.I)
_USER = re.compile(r"exited with a non-zero status|ran out of memory|user error", re.I)
_INTERNAL = re.compile(r"internal error", re.I)


def is_stockout(message: str) -> bool:
    """Whether Vertex's text says the region ran out of the job's machines (whether or not it had started)."""
    return bool(_CAPACITY.search(message))


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


def blamed_on_data(reason: Reason, data_failure: bool) -> Reason:
    """A user failure whose trainer said it refused the data (issue 27: drift above max_drift) is `data`: the data
    must change before another run is worth its GPUs, so it is never resubmitted either."""
    return "data" if reason == "user" and data_failure else reason


def quota_metric(message: str) -> str | None:
    """The Vertex quota metric a message names (aiplatform.googleapis.com/custom_model_training_…), if any."""
    found = _QUOTA_METRIC.search(message)
    return found.group(0) if found else None


def call_is_transient(code: int, message: str) -> bool:
    """Whether a JobService call refused with `code` is worth retrying.

    RESOURCE_EXHAUSTED is two things at Vertex: the API's request-rate limit ("Quota exceeded for quota metric
    'Resource management (CRUD) requests' …", any method: retry with backoff), and, on CreateCustomJob, short
    GPU quota, whose text names a custom_model_training metric (retrying in seconds will not help).
    """
    if code == RESOURCE_EXHAUSTED:
        return quota_metric(message) is None
    return code in TRANSIENT_CALL_CODES


def call_failure_reason(code: int) -> Reason:
    """Reason for a JobService call refused for good (not `call_is_transient`)."""
    if code == PERMISSION_DENIED:
        return "permission"
    return "quota" if code == RESOURCE_EXHAUSTED else "invalid"


_API_DISABLED = re.compile(r"has not been used in project|is disabled|SERVICE_DISABLED", re.I)


def permission_advice(message: str, account: str) -> str:
    """What to fix when Vertex refused one of the controller's calls with PERMISSION_DENIED, in words: the Vertex
    API is off in the project, or the function's own account lacks a grant (Google's text names the permission:
    "Permission 'aiplatform.customJobs.create' denied on resource …")."""
    if _API_DISABLED.search(message):
        return "Enable the Vertex AI API (aiplatform.googleapis.com) in the project; Terraform enables it on apply."
    return (
        "The controller's function account needs roles/aiplatform.user on the project and "
        f"roles/iam.serviceAccountUser on the job's run-as account{f' ({account})' if account else ''}; "
        "terraform/iam.tf grants both, so re-run terraform apply if they were removed."
    )
