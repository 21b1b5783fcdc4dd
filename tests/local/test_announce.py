"""The local JobService announces state changes on the job-state topic in the shape a Cloud Logging
sink publishes Vertex's service log lines (reference/vertex.md §5.3), and only the lines that pass the
sink's own filter, read from the file Terraform deploys (terraform/job_state_log_filter.txt)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from google.cloud import pubsub_v1
from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool

from local.jobservice import log_filter
from local.jobservice.announce import sink_delivery
from local.jobservice.client import wait_for_state
from local.jobservice.log_filter import LogFilterError, job_state_log_filter, parse_log_filter
from local.names import LOCAL_PROJECT, Names
from local.pubsub_emulator import PubSubEmulator

TERRAFORM_DIR = Path(__file__).resolve().parents[2] / "terraform"


@pytest.mark.integration
def test_the_service_lines_vertex_writes_are_published_as_ml_job_log_entries(
    job_client: JobServiceClient, pubsub_emulator: PubSubEmulator
):
    subscription = pubsub_emulator.create_subscription(
        f"job-state-{uuid.uuid4().hex[:8]}", Names(LOCAL_PROJECT).job_state_topic
    )
    job = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool("--exit-code", "2")))
    wait_for_state(job_client, job.name)
    job_id = job.name.rsplit("/", 1)[1]

    subscriber = pubsub_v1.SubscriberClient()
    entries, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline and not any(e["severity"] == "ERROR" for e in entries):
        response = subscriber.pull(request={"subscription": subscription, "max_messages": 50}, timeout=5)
        for received in response.received_messages:
            entry = json.loads(received.message.data)
            if entry["resource"]["labels"]["job_id"] == job_id:
                entries.append(entry)

    # Vertex writes no service line for QUEUED; the state itself is read from GetCustomJob.
    assert [e["textPayload"].split(" The replica")[0] for e in entries] == [
        "Waiting for job to be provisioned.",
        "Job is running.",
        "Job failed.",
    ]
    assert {e["resource"]["type"] for e in entries} == {"ml_job"}
    assert {e["resource"]["labels"]["task_name"] for e in entries} == {"service"}
    assert {e["resource"]["labels"]["project_id"] for e in entries} == {LOCAL_PROJECT}
    assert all("ml.googleapis.com/job_state" not in e["labels"] for e in entries)
    assert "exited with a non-zero status of 2" in entries[-1]["textPayload"]


def test_the_announcer_filters_with_the_terraform_filter_file():
    """Guards issue 12 point 10: the local announcer publishes only what the deployed sink's filter
    (the one file Terraform reads) lets through."""
    job = CustomJob(name=f"{PARENT}/customJobs/123", state=JobState.JOB_STATE_SUCCEEDED)

    delivered = sink_delivery(job, job_state_log_filter())
    assert delivered is not None and delivered["textPayload"] == "Job completed successfully."
    assert log_filter.FILTER_FILE == TERRAFORM_DIR / "job_state_log_filter.txt"
    replica_lines = parse_log_filter('resource.type="ml_job" AND resource.labels.task_name="workerpool0-0"')
    assert sink_delivery(job, replica_lines) is None


def test_the_log_filter_evaluates_equalities_joined_by_and_and_refuses_anything_else():
    """Guards issue 12 point 10: the filter file is evaluated, not trusted; unknown syntax fails loudly."""
    matches = parse_log_filter('resource.type="ml_job" AND labels."ml.googleapis.com/endpoint"=""')
    assert matches({"resource": {"type": "ml_job"}, "labels": {"ml.googleapis.com/endpoint": ""}})
    assert not matches({"resource": {"type": "ml_job"}, "labels": {}})
    assert not matches({"resource": {"type": "gce_instance"}, "labels": {"ml.googleapis.com/endpoint": ""}})
    for text in ('resource.type="a" OR resource.type="b"', 'labels.x=("A" OR "B")', 'NOT resource.type="a"', "x:y"):
        with pytest.raises(LogFilterError, match='only field="value" comparisons joined by AND'):
            parse_log_filter(text)
