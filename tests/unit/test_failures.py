"""Failure classification: only capacity, preemption and internal failures are worth new GPUs."""

import pytest

from functions.cloud.failures import (
    call_failure_reason,
    call_is_transient,
    classify_job_failure,
    permission_advice,
    quota_metric,
)

QUOTA = (
    "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
)
STOCKOUT = "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."


@pytest.mark.parametrize(
    ("code", "message", "started", "reason"),
    [
        (8, QUOTA, False, "quota"),
        (9, STOCKOUT, False, "capacity"),
        (9, STOCKOUT, True, "preemption"),
        (8, STOCKOUT, True, "preemption"),
        (8, "", False, "quota"),
        (14, "The job was preempted", True, "preemption"),
        (13, "Internal error occurred for the current attempt.", True, "internal"),
        (3, "The replica workerpool1-0 exited with a non-zero status of 3.", True, "user"),
        (3, "The replica workerpool0-0 ran out of memory and exited with a non-zero status of 137.", True, "user"),
        (3, "Invalid image", False, "invalid"),
    ],
)  # fmt: skip
def test_job_failures_are_classified(code, message, started, reason):
    assert classify_job_failure(code, message, started) == reason


def test_refused_calls():
    assert call_failure_reason(8) == "quota"
    assert call_failure_reason(3) == "invalid"
    assert call_failure_reason(7) == "permission"  # issue 25 point 2: not `invalid`, which says "fix the request"


def test_a_permission_refusal_says_what_to_fix():
    """Guards issue 25 point 2: the operator's fix for a refusal that outlasts the wait, in words: the grants when
    IAM refused (the text names the permission), the API when it is off in the project."""
    iam = "Permission 'aiplatform.customJobs.create' denied on resource '//aiplatform.googleapis.com/projects/p'"
    advice = permission_advice(iam, "trainer@p.iam.gserviceaccount.com")
    assert "roles/aiplatform.user" in advice and "roles/iam.serviceAccountUser" in advice
    assert "trainer@p.iam.gserviceaccount.com" in advice
    disabled = "Vertex AI API has not been used in project 123 before or it is disabled. Enable it by visiting …"
    assert "Enable the Vertex AI API" in permission_advice(disabled, "")


RATE_LIMIT = (
    "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit "
    "'Resource management (CRUD) requests per minute per region' of service 'aiplatform.googleapis.com'"
)


@pytest.mark.parametrize(
    ("code", "message", "transient"),
    [
        (8, RATE_LIMIT, True),      # the API's request-rate limit, on any call: back off and retry
        (8, QUOTA, False),          # short GPU quota at create: minutes to hours, not seconds
        (2, "Stream removed", True),  # a broken stream: the call may have taken effect; look, then retry
        (14, "The service is currently unavailable.", True),
        (4, "Deadline exceeded.", True),
        (3, "List of found errors", False),
        (9, "The job is already in a final state", False),
        (7, "Permission denied", False),
    ],
)  # fmt: skip
def test_call_codes_are_classified_as_vertex_returns_them(code, message, transient):
    """Guards issue 12 point 2: RESOURCE_EXHAUSTED is a rate limit unless a training quota is named; UNKNOWN
    is transient."""
    assert call_is_transient(code, message) is transient


def test_the_quota_metric_is_read_from_vertexs_text():
    """Guards issue 12 point 3: the metric name travels with the quota outcome."""
    assert quota_metric(QUOTA) == "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
    assert quota_metric(RATE_LIMIT) is None
    assert quota_metric("") is None
