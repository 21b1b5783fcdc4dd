"""The local JobService announces every state change on the job-state topic in the shape a Cloud
Logging sink publishes Vertex job-state log lines (reference/vertex.md §5.3)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from google.cloud import pubsub_v1
from google.cloud.aiplatform_v1 import JobServiceClient
from job_specs import PARENT, custom_job, pool

from local.jobservice.client import wait_for_state
from local.names import LOCAL_PROJECT, Names
from local.pubsub_emulator import PubSubEmulator

pytestmark = pytest.mark.integration


def test_each_state_change_is_published_as_an_ml_job_log_entry(
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
    while time.monotonic() < deadline and not any(
        e["labels"]["ml.googleapis.com/job_state"] == "FAILED" for e in entries
    ):
        response = subscriber.pull(request={"subscription": subscription, "max_messages": 50}, timeout=5)
        for received in response.received_messages:
            entry = json.loads(received.message.data)
            if entry["resource"]["labels"]["job_id"] == job_id:
                entries.append(entry)

    assert [e["labels"]["ml.googleapis.com/job_state"] for e in entries] == ["QUEUED", "PENDING", "RUNNING", "FAILED"]
    assert {e["resource"]["type"] for e in entries} == {"ml_job"}
    assert {e["resource"]["labels"]["project_id"] for e in entries} == {LOCAL_PROJECT}
    assert "exited with a non-zero status of 2" in entries[-1]["textPayload"]
    assert entries[-1]["severity"] == "ERROR"
