"""The labels trainctl puts on its jobs and the filters that find them (issue 25, point 3)."""

from __future__ import annotations

import datetime as dt

import pytest
from google.cloud.aiplatform_v1.types import CustomJob, JobState

from functions.cloud import job_labels
from functions.cloud.job_labels import (
    active_filter,
    attempt_filter,
    deployment_label,
    is_legacy_attempt,
    key_hash_of,
    legacy_attempt_filter,
)
from local.jobservice.filters import parse_filter
from schemas.request import RESERVED_LABELS
from schemas.rules import labels_problems

LABELS = job_labels.job_labels({"team": "ml"}, "ab12", 2, "Churn.1", "proj-control")


def test_every_key_trainctl_sets_is_spelled_with_underscores_and_reserved():
    """Issue 25, point 3: keys a list filter can name as Vertex documents (`labels.keyA=valueA`); the hyphenated keys
    of jobs created before stay reserved, as such jobs may still run."""
    assert LABELS == {
        "team": "ml",
        "trainctl_key": "ab12",
        "trainctl_attempt": "2",
        "trainctl_request": "churn-1",
        "trainctl_deployment": "proj-control",
    }
    assert labels_problems(LABELS) == []
    filtered = {job_labels.KEY, job_labels.ATTEMPT, job_labels.DEPLOYMENT}
    assert all("-" not in key for key in filtered)
    assert {*filtered, "trainctl_request", "trainctl-key", "trainctl-attempt", "trainctl-request", "managed-by"} <= (
        RESERVED_LABELS
    )


@pytest.mark.parametrize(
    ("bucket", "label"),
    [
        ("proj-control", "proj-control"),
        ("my.control.example.com", "my-control-example-com-4e244b7c"),
        ("x" * 70, "x" * 54 + "-c71bd109"),
    ],
)
def test_the_deployment_label_is_its_control_bucket_as_a_label_value(bucket, label):
    """Dots and over-long names become label characters with a digest of the whole name, so that two deployments
    never share a label."""
    assert deployment_label(bucket) == label
    assert labels_problems({"trainctl_deployment": label}) == []


def test_an_attempts_filter_finds_its_job_and_no_other_deployments():
    mine = CustomJob(labels=LABELS)
    other_deployment = CustomJob(labels=LABELS | {"trainctl_deployment": "other-control"})
    other_attempt = CustomJob(labels=LABELS | {"trainctl_attempt": "1"})
    matches = parse_filter(attempt_filter(LABELS))
    assert [matches(job) for job in (mine, other_deployment, other_attempt)] == [True, False, False]


def test_the_legacy_filter_is_the_one_sent_before_issue_25_and_a_match_must_carry_both_labels():
    assert legacy_attempt_filter("ab12", 2) == 'labels.trainctl-key="ab12" AND labels.trainctl-attempt="2"'
    assert is_legacy_attempt({"trainctl-key": "ab12", "trainctl-attempt": "2"}, "ab12", 2)
    assert not is_legacy_attempt({"trainctl-key": "ab12", "trainctl-attempt": "1"}, "ab12", 2)
    assert not is_legacy_attempt(None, "ab12", 2)


def test_a_jobs_request_key_is_read_in_either_spelling():
    assert key_hash_of(LABELS) == "ab12"
    assert key_hash_of({"trainctl-key": "old"}) == "old"
    assert key_hash_of({"team": "ml"}) is None
    assert key_hash_of(None) is None


def test_the_active_filter_lists_the_deployments_jobs_that_wait_or_run():
    matches = parse_filter(active_filter("proj-control"))
    for state in JobState:
        job = CustomJob(labels=LABELS, state=state)
        assert matches(job) == (state.name in job_labels.ACTIVE_STATES), state.name
    assert not matches(CustomJob(labels=LABELS | {"trainctl_deployment": "x"}, state=JobState.JOB_STATE_RUNNING))


def test_the_active_filter_can_hold_a_create_time_window():
    since, before = dt.datetime(2026, 11, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    text = active_filter("proj-control", since, before)
    assert text.startswith('create_time>="2026-11-01T00:00:00Z" AND create_time<"2026-11-02T00:00:00Z" AND ')
    matches = parse_filter(text)
    running = JobState.JOB_STATE_RUNNING
    inside = [
        matches(CustomJob(labels=LABELS, state=running, create_time=since + dt.timedelta(hours=h)))
        for h in (-1, 0, 23, 24)
    ]
    assert inside == [False, True, True, False]
