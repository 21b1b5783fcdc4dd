"""The ListCustomJobs filter language of the local JobService, on CustomJob values."""

from __future__ import annotations

import datetime as dt

import pytest
from google.cloud.aiplatform_v1.types import CustomJob, JobState

from local.jobservice.filters import FilterError, parse_filter

JOBS = {
    "a": CustomJob(
        display_name="train-a",
        labels={"team": "ml", "trainctl_key": "k1"},
        state=JobState.JOB_STATE_RUNNING,
        create_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    ),
    "b": CustomJob(
        display_name="train-b",
        labels={"team": "data"},
        state=JobState.JOB_STATE_FAILED,
        create_time=dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
    ),
    "c": CustomJob(
        display_name="eval",
        labels={},
        state=JobState.JOB_STATE_SUCCEEDED,
        create_time=dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
    ),
}


def matching(text: str) -> set[str]:
    predicate = parse_filter(text)
    return {key for key, job in JOBS.items() if predicate(job)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {"a", "b", "c"}),
        ("labels.team=ml", {"a"}),
        ('labels.team="data"', {"b"}),
        ("labels.trainctl_key:*", {"a"}),
        ("labels.team!=ml", {"b", "c"}),
        ('state="JOB_STATE_FAILED"', {"b"}),
        ("state!=JOB_STATE_FAILED", {"a", "c"}),
        ("labels.team:* AND state=JOB_STATE_RUNNING", {"a"}),
        ("labels.team:* state=JOB_STATE_RUNNING", {"a"}),
        ("state=JOB_STATE_FAILED OR state=JOB_STATE_SUCCEEDED", {"b", "c"}),
        ("labels.team:* AND (state=JOB_STATE_FAILED OR state=JOB_STATE_SUCCEEDED)", {"b"}),
        ("NOT labels.team:*", {"c"}),
        ('display_name:"train-*"', {"a", "b"}),
        ('create_time>"2026-01-15T00:00:00Z"', {"b", "c"}),
    ],
)
def test_a_filter_selects_exactly_the_matching_jobs(text: str, expected: set[str]):
    assert matching(text) == expected


@pytest.mark.parametrize(
    "text",
    ["colour=red", "state=RUNNING_FAST", "labels.team<ml", "(labels.team=ml", "labels.team=", 'create_time>"soon"'],
)
def test_a_filter_vertex_would_not_accept_is_refused(text: str):
    with pytest.raises(FilterError):
        parse_filter(text)


def test_a_hyphenated_label_key_is_refused_unless_the_server_is_told_to_read_it():
    """Issue 25, point 3: Vertex documents label filters only as `labels.keyA=valueA`, and AIP-160 reads `-` as NOT,
    so the local JobService refuses a hyphen in a key (what passes here must pass on Vertex); told to, it reads the
    key whole, as Vertex may (the controller's lookup of jobs from before issue 25 is tested both ways)."""
    job = CustomJob(labels={"trainctl-key": "k1", "trainctl_key": "k1"})
    with pytest.raises(FilterError, match="underscores"):
        parse_filter('labels.trainctl-key="k1"')
    assert parse_filter('labels.trainctl-key="k1"', hyphenated_label_keys=True)(job)
    assert not parse_filter('labels.trainctl-key="k2"', hyphenated_label_keys=True)(job)
    assert parse_filter('labels.trainctl_key="k1" AND labels.team!=ml')(job)
