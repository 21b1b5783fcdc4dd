"""The labels trainctl puts on every CustomJob, and the ListCustomJobs filters that find jobs by them (issue 25,
point 3).

Vertex documents its list filter's labels as `labels.keyA=valueA` and `labels.keyB:*` (ListCustomJobsRequest.filter,
googleapis job_service.proto), and in AIP-160's grammar a `-` is also the negation operator (`-file:".java"`), so
whether a filter may name a hyphenated key is not documented. trainctl's keys are therefore spelled with underscores.
Jobs created before issue 25 carry `trainctl-key`, `trainctl-attempt` and `trainctl-request`: until none of them can
still be running, a claim an earlier version may have held looks for its job under those too (`legacy_attempt_filter`),
and a log line about such a job still maps to its record (`key_hash_of`).

`trainctl_deployment` names the deployment (its control bucket, as a label value) where `managed-by=trainctl` said
only "trainctl": the reconcile sweep lists this deployment's jobs and no other's, and two deployments in one project
never adopt each other's jobs. trainctl still sets four labels, so a request keeps its 60.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from schemas.request import JOB_LABELS, LEGACY_JOB_LABELS
from schemas.rules import sanitize_label_value

KEY, ATTEMPT, REQUEST, DEPLOYMENT = JOB_LABELS
LEGACY_KEY, LEGACY_ATTEMPT, LEGACY_REQUEST, LEGACY_MANAGED_BY = LEGACY_JOB_LABELS
MAX_LABEL_VALUE = 63
# The states a job waits or runs in (google.cloud.aiplatform.v1.JobState): a job of an active request that is in
# none of them has ended (SUCCEEDED, FAILED, CANCELLED; EXPIRED and PARTIALLY_SUCCEEDED are other job types').
ACTIVE_STATES = (
    "JOB_STATE_QUEUED",
    "JOB_STATE_PENDING",
    "JOB_STATE_RUNNING",
    "JOB_STATE_CANCELLING",
    "JOB_STATE_PAUSED",
    "JOB_STATE_UPDATING",
)


def deployment_label(control_bucket: str) -> str:
    """The deployment's label value: its control bucket (one ledger, one deployment) in label characters. A bucket
    name longer than a label value (dotted names reach 222 characters) keeps a digest of the whole, so two
    deployments never share one."""
    value = sanitize_label_value(control_bucket)
    if len(control_bucket) <= MAX_LABEL_VALUE and value == control_bucket:
        return value
    digest = hashlib.sha256(control_bucket.encode()).hexdigest()[:8]
    return f"{value[: MAX_LABEL_VALUE - 9]}-{digest}"


def job_labels(
    user_labels: dict[str, str], key_hash: str, attempt: int, request_id: str, deployment: str
) -> dict[str, str]:
    """Every label of an attempt's job: the request's own, then trainctl's (schemas/request.py reserves their keys)."""
    return {
        **user_labels,
        KEY: key_hash,
        ATTEMPT: str(attempt),
        REQUEST: sanitize_label_value(request_id),
        DEPLOYMENT: deployment,
    }


def key_hash_of(labels: dict[str, str] | None) -> str | None:
    """The request key hash a job is labelled with, in either spelling; None for a job trainctl did not start."""
    labels = labels or {}
    return labels.get(KEY) or labels.get(LEGACY_KEY)


def attempt_filter(labels: dict[str, str]) -> str:
    """The filter that finds the job of one attempt of one request of this deployment, from that job's labels."""
    return " AND ".join(f'labels.{key}="{labels[key]}"' for key in (DEPLOYMENT, KEY, ATTEMPT))


def legacy_attempt_filter(key_hash: str, attempt: int) -> str:
    """The very filter trainctl sent before issue 25 to find an attempt's job (functions/cloud/vertex.py, `find`):
    whatever Vertex makes of a hyphenated key, it makes of it now what it made of it when that job was looked for."""
    return f'labels.{LEGACY_KEY}="{key_hash}" AND labels.{LEGACY_ATTEMPT}="{attempt}"'


def is_legacy_attempt(labels: dict[str, str] | None, key_hash: str, attempt: int) -> bool:
    """Whether a job carries the labels an earlier version gave this attempt's job (a filter Vertex might read
    otherwise than meant is never trusted alone)."""
    labels = labels or {}
    return labels.get(LEGACY_KEY) == key_hash and labels.get(LEGACY_ATTEMPT) == str(attempt)


def active_filter(deployment: str, since: datetime | None = None, before: datetime | None = None) -> str:
    """The filter that lists this deployment's jobs that wait or run, created at or after `since` and before
    `before` when given: `OR` over `state`, a label equality and `create_time` comparisons (RFC 3339) are each in
    Vertex's documented examples; the parentheses keep the `OR`s together whatever the precedence."""
    states = " OR ".join(f'state="{state}"' for state in ACTIVE_STATES)
    window = [f'create_time>="{_rfc3339(since)}"'] if since is not None else []
    window += [f'create_time<"{_rfc3339(before)}"'] if before is not None else []
    # The window first: a job outside it is ruled out by the first comparison, wherever that saves work.
    return " AND ".join([*window, f'labels.{DEPLOYMENT}="{deployment}"', f"({states})"])


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
