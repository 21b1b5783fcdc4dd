"""The controller's intake through functions-framework over HTTP, on the emulators and the local JobService:
markers start exactly one job, repeats start none, bad requests are answered once and never retried."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from functions.ledger.keys import key_hash
from tests.integration.deployment import fake_node_request


def jobs_with_key(job_client, request_key: str) -> list:
    request = {
        "parent": "projects/trainctl-local/locations/us-central1",
        "filter": f"labels.trainctl_key={key_hash(request_key)}",
    }
    return list(job_client.list_custom_jobs(request=request))


def test_twenty_data_files_and_one_marker_start_exactly_one_job(deployment, job_client):
    events = deployment.events()
    before = len(list(job_client.list_custom_jobs(parent="projects/trainctl-local/locations/us-central1")))
    blobs = [deployment.upload(f"churn/day1/part-{i:04d}.csv", "a,y\n1,0\n") for i in range(20)]
    marker = deployment.upload("churn/day1/_SUCCESS")
    for blob in [*blobs, marker]:
        assert deployment.post("on_dataset_upload", deployment.storage_event(blob)) == 200
    key = f"gcs:{deployment.data_bucket}/churn/day1/_SUCCESS#{marker.generation}"
    (job,) = jobs_with_key(job_client, key)
    after = len(list(job_client.list_custom_jobs(parent="projects/trainctl-local/locations/us-central1")))
    assert after - before == 1  # the data files never reached Vertex
    request_id = f"gcs.churn-day1-{marker.generation}"
    assert events.states(request_id) == ["accepted", "submitted"]
    assert job.labels["trainctl_request"] == f"gcs-churn-day1-{marker.generation}"  # label values take no '.'
    spec = job.job_spec.worker_pool_specs[0]
    assert spec.container_spec.image_uri == "localhost/tests/fake-node:1"
    assert (
        job.job_spec.base_output_directory.output_uri_prefix
        == f"gs://{deployment.control_bucket}/custom-runs/{request_id}/"
    )


def test_the_same_storage_event_delivered_20_times_concurrently_submits_once(deployment, job_client):
    events = deployment.events()
    marker = deployment.upload_marker("churn/day2/")
    event = deployment.storage_event(marker)
    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(lambda _: deployment.deliver("on_dataset_upload", event), range(20)))
    assert statuses == [200] * 20
    key = f"gcs:{deployment.data_bucket}/churn/day2/_SUCCESS#{marker.generation}"
    assert len(jobs_with_key(job_client, key)) == 1
    request_id = f"gcs.churn-day2-{marker.generation}"
    assert len(events.of(request_id, "submitted")) == 1
    assert len(events.of(request_id, "accepted")) == 1
    duplicates = events.of(request_id, "duplicate")
    assert len(duplicates) == 19
    assert len({d.ce_id for d in duplicates}) == 1  # one delivery, one id: consumers keep one copy


def test_each_generation_of_an_overwritten_marker_starts_its_own_job_with_its_own_overrides(deployment, job_client):
    """Guards issue 12 point 8: the data bucket is versioned (as Terraform makes it), so the first generation's
    event still reads the first generation's overrides after the marker was overwritten. On an unversioned
    local bucket the first event found nothing and started nothing."""
    first = deployment.upload_marker("churn/day3/", json.dumps({"display_name": "first-marker"}))
    second = deployment.upload("churn/day3/_SUCCESS", json.dumps({"display_name": "second-marker"}))
    assert first.generation != second.generation
    for marker in (first, second):
        assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    names = {}
    for marker in (first, second):
        (job,) = jobs_with_key(job_client, f"gcs:{deployment.data_bucket}/churn/day3/_SUCCESS#{marker.generation}")
        names[marker.generation] = job.display_name
    assert names[first.generation].startswith("first-marker")
    assert names[second.generation].startswith("second-marker")


def test_a_request_with_schema_errors_is_rejected_naming_the_fields_and_acknowledged(deployment):
    events = deployment.events()
    bad = fake_node_request("bad-request-1", resources={"machine_type": "a2-highgpu-2g", "accelerator_count": 3})
    bad["dataset"]["uri"] = "s3://elsewhere/x"
    assert deployment.post("on_job_request", deployment.push_body(json.dumps(bad).encode())) == 200
    (rejected,) = events.of("bad-request-1", "rejected")
    assert rejected.reason == "invalid"
    assert any(e.startswith("dataset.uri: must be a gs://bucket/path URI") for e in rejected.errors)
    assert any(e.startswith("resources.accelerator_count: a2-highgpu-2g has exactly 2") for e in rejected.errors)
    assert deployment.record("request:bad-request-1") is None  # nothing written to the ledger


def test_unreadable_messages_are_rejected_and_acknowledged(deployment):
    events = deployment.events()
    assert deployment.post("on_job_request", deployment.push_body(b"\xff\xfe not text", "msg-binary")) == 200
    assert deployment.post("on_job_request", deployment.push_body(b"a: &x [1]\nb: *x\n", "msg-alias")) == 200
    rejected = [
        e for e, _ in events.drain() if e.state == "rejected" and e.trigger.message_id in ("msg-binary", "msg-alias")
    ]
    assert len(rejected) == 2 and all(e.request_id == "unknown" for e in rejected)


def test_a_request_id_reused_with_a_different_spec_is_a_conflict(deployment, job_client):
    events = deployment.events()
    assert deployment.request(fake_node_request("reused-1", "--sleep", "0.1")) == 200
    assert deployment.request(fake_node_request("reused-1", "--sleep", "99")) == 200
    assert len(jobs_with_key(job_client, "request:reused-1")) == 1
    (conflict,) = events.of("reused-1", "rejected")
    assert "already used for a different request" in conflict.errors[0]


def test_a_guardrail_rejects_an_image_from_an_unknown_registry(deployment, job_client):
    events = deployment.events()
    request = fake_node_request("evil-image-1")
    request["trainer"]["image"] = "docker.io/evil/miner:latest"
    assert deployment.request(request) == 200
    (rejected,) = events.of("evil-image-1", "rejected")
    assert rejected.errors == [
        "trainer.image: guardrail allowed_image_prefixes: docker.io/evil/miner:latest is not from an allowed "
        "registry; allowed: localhost/tests/"
    ]
    assert jobs_with_key(job_client, "request:evil-image-1") == []


def test_the_data_buckets_notification_through_the_uploads_topic_starts_the_job_once(deployment, job_client):
    """Issue 40, point 6: in the cloud the data bucket's notification publishes to trainctl's own uploads topic (so
    the Cloud Storage agent publishes nowhere else), and Eventarc delivers each message. A data shard is ignored, the
    marker submits, its other shape (a finalized event, as before) is a duplicate, and a non-finalize starts nothing."""
    events = deployment.events()
    shard = deployment.upload("churn/notified/part-0000.csv", "a,y\n1,0\n")
    marker = deployment.upload("churn/notified/_SUCCESS")
    assert deployment.post("on_dataset_upload", deployment.notification_event(shard)) == 200
    assert deployment.post("on_dataset_upload", deployment.notification_event(marker, "OBJECT_DELETE")) == 200
    assert deployment.post("on_dataset_upload", deployment.notification_event(marker)) == 200
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    key = f"gcs:{deployment.data_bucket}/churn/notified/_SUCCESS#{marker.generation}"
    (job,) = jobs_with_key(job_client, key)
    request_id = f"gcs.churn-notified-{marker.generation}"
    assert events.states(request_id) == ["accepted", "submitted", "duplicate"]
    assert job.labels["trainctl_request"] == f"gcs-churn-notified-{marker.generation}"
