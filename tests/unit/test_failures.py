"""Failure classification: only capacity, preemption and internal failures are worth new GPUs."""

import pytest

from functions.failures import RESUBMITTABLE, call_failure_reason, classify_job_failure

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


def test_resubmittable_reasons():
    assert RESUBMITTABLE == {"capacity", "preemption", "internal"}


def test_refused_calls():
    assert call_failure_reason(8) == "quota"
    assert call_failure_reason(3) == "invalid"
