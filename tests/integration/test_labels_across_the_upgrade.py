"""Jobs created before issue 25 carry hyphenated label keys (`trainctl-key`, `trainctl-attempt`); trainctl now labels
and finds its jobs with underscores (functions/cloud/job_labels.py). A claim an earlier version held still finds the
job it created, whether Vertex reads the old filter (the local JobService told to) or refuses it (its default), and a
log line about such a job still reaches its record."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from cloudevents.http import CloudEvent

from functions import handlers
from functions.cloud.vertex import VertexJobs, json_names
from functions.controller import Controller
from functions.ledger.keys import key_hash
from functions.settings import Settings
from local.jobservice.client import wait_for_state
from local.names import LOCAL_PROJECT, LOCAL_REGION
from tests.integration.deployment import DEAD_CLAIM_LEASE, Deployment, fake_node_request
from tests.integration.test_controller_intake import jobs_with_key

PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
NEW_KEYS = ("trainctl_key", "trainctl_attempt", "trainctl_request", "trainctl_deployment")


class Crash(BaseException):
    pass


def labels_before_issue_25(labels: dict[str, str]) -> dict[str, str]:
    """The labels trainctl gave the same job before issue 25."""
    old = {key: value for key, value in labels.items() if key not in NEW_KEYS}
    return old | {
        "trainctl-key": labels["trainctl_key"],
        "trainctl-attempt": labels["trainctl_attempt"],
        "trainctl-request": labels["trainctl_request"],
        "managed-by": "trainctl",
    }


def die_mid_submission(deployment: Deployment, request: dict[str, Any], create: bool) -> tuple[dict, bytes]:
    """An earlier version of trainctl takes the request's claim and dies in step 3, after creating its job with the
    old labels (`create`) or before; returns the push delivery, to deliver again once the claim's lease has run out."""
    settings = Settings.from_env(deployment.settings_env(TRAINCTL_LEASE=DEAD_CLAIM_LEASE))
    vertex = VertexJobs(settings.project, settings.region, settings.vertex_endpoint)

    class EarlierVersion(VertexJobs):
        def __init__(self) -> None:
            self.__dict__ = vertex.__dict__

        def find_or_create(self, custom_job: dict, region: str | None = None, legacy: bool = True) -> Any:
            if create:
                old = custom_job | {"labels": labels_before_issue_25(custom_job["labels"])}
                vertex._call("CreateCustomJob", "POST", f"{vertex.parent_in(region)}/customJobs", json=json_names(old))
            raise Crash("the function process died here")

    message_id = f"msg-{request['request_id']}"
    headers, body = deployment.push_body(json.dumps(request).encode(), message_id)
    attributes = {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "//pubsub.test", "id": message_id}
    with pytest.raises(Crash):
        handlers.job_request(
            CloudEvent(attributes, json.loads(body)), Controller.from_settings(settings, vertex_factory=EarlierVersion)
        )
    time.sleep(settings.lease + 0.5)  # the dead delivery's lease runs out
    return headers, body


def jobs_labelled_before_issue_25(job_client, request_key: str) -> list:
    return [
        job
        for job in job_client.list_custom_jobs(parent=PARENT)
        if job.labels.get("trainctl-key") == key_hash(request_key)
    ]


def test_a_job_an_earlier_version_created_is_adopted_where_vertex_reads_the_old_filter(
    deployment, jobservice_control, job_client
):
    """Issue 25, point 3: the redelivery of a claim an earlier version held looks for its job under the old labels
    too, and adopts it (before the fix, trainctl looked under the new labels only and created a second job); then a
    log line about that job still maps to its record through the old key label."""
    jobservice_control.read_hyphenated_label_keys()
    events = deployment.events()
    request = fake_node_request("before-upgrade-1", "--sleep", "0.5")
    delivery = die_mid_submission(deployment, request, create=True)
    (old_job,) = jobs_labelled_before_issue_25(job_client, "request:before-upgrade-1")

    assert deployment.post("on_job_request", delivery) == 200

    assert jobs_with_key(job_client, "request:before-upgrade-1") == []  # no job under the new labels
    assert len(jobs_labelled_before_issue_25(job_client, "request:before-upgrade-1")) == 1
    record = deployment.record("request:before-upgrade-1")
    assert (record["state"], record["job_name"]) == ("submitted", old_job.name)
    wait_for_state(job_client, old_job.name)
    entry = {
        "resource": {"type": "ml_job", "labels": {"job_id": old_job.name.rsplit("/", 1)[-1]}},
        "labels": {"ml.googleapis.com/job_state": "SUCCEEDED"},
    }
    line = deployment.push_body(json.dumps(entry).encode())
    events.wait_for("before-upgrade-1", "succeeded", act=lambda: deployment.post("on_job_state", line))
    assert events.states("before-upgrade-1") == ["accepted", "submitted", "running", "succeeded"]


def test_a_refused_old_filter_reads_as_no_job_and_the_claim_creates_one(deployment, jobservice_control, job_client):
    """Issue 25, point 3: where Vertex refuses the hyphenated filter (the local JobService's default), it refused it
    before issue 25 too, ahead of every CreateCustomJob, so no earlier version created a job: the refusal reads as
    none found and the job is created once (before the fix, INVALID_ARGUMENT rejected the request)."""
    events = deployment.events()
    request = fake_node_request("before-upgrade-2")
    delivery = die_mid_submission(deployment, request, create=False)

    assert deployment.post("on_job_request", delivery) == 200

    assert len(jobs_with_key(job_client, "request:before-upgrade-2")) == 1
    assert deployment.record("request:before-upgrade-2")["state"] == "submitted"
    assert events.states("before-upgrade-2") == ["accepted", "submitted"]


def test_a_new_request_looks_for_its_job_once_under_the_new_labels(deployment, jobservice_control, job_client):
    """Issue 25, point 3: a record this delivery has just created has had no other holder, of any version, so its
    submission makes no lookup under the labels of before issue 25."""
    before = jobservice_control.call_counts()
    assert deployment.request(fake_node_request("after-upgrade-1")) == 200
    after = jobservice_control.call_counts()
    assert len(jobs_with_key(job_client, "request:after-upgrade-1")) == 1
    assert after.get("ListCustomJobs", 0) - before.get("ListCustomJobs", 0) == 1
    assert after.get("CreateCustomJob", 0) - before.get("CreateCustomJob", 0) == 1
