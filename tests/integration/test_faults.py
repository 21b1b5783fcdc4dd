"""Faults on the real stack, one component at a time: each test's docstring says what it guards.

These tests stop or kill components, so each builds a deployment of its own around private copies of the
component it breaks; the session's emulators and JobService are left alone.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from functions.ledger.keys import key_hash
from local.fake_gcs import start_fake_gcs
from local.functions_host import start_function
from local.jobservice.client import wait_for_state
from local.names import LOCAL_PROJECT
from local.processes import wait_until
from local.pubsub_emulator import start_pubsub_emulator
from tests.integration.deployment import DEAD_CLAIM_LEASE, Deployment, fake_node_request
from tests.integration.test_controller_intake import jobs_with_key

METRICS = '{"val_accuracy": 0.5}'
OUTBOX_GRACE = 2  # seconds (TRAINCTL_OUTBOX_GRACE; 8 s deployed): the tests wait it out instead of 9 s
# TRAINCTL_RETRY_PAUSE_SCALE: a call to a component that is down fails after the same attempts, with a fiftieth
# of the pauses between them (Vertex's policy alone pauses ~11 s before giving up; a sweep here waited ~2 s at 0.1).
RETRY_PAUSE_SCALE = 0.02


@pytest.fixture
def own_deployment(tmp_path, jobservice):
    """A deployment of the test's own (buckets, topic, functions); the test may swap components first."""
    started: list[Deployment] = []

    def deploy(vertex_endpoint: str = jobservice.rest_url, **settings: str) -> Deployment:
        settings = {
            "TRAINCTL_OUTBOX_GRACE": str(OUTBOX_GRACE),
            "TRAINCTL_RETRY_PAUSE_SCALE": str(RETRY_PAUSE_SCALE),
            **settings,
        }
        deployed = Deployment(uuid.uuid4().hex[:8], vertex_endpoint, extra_settings=settings)
        deployed.create(tmp_path / f"functions-{len(started)}")
        started.append(deployed)
        return deployed

    yield deploy
    for deployed in started:
        deployed.stop()


def test_pubsub_down_while_publishing_submitted_is_published_once_by_the_redelivery(
    own_deployment, pubsub_emulator, fake_gcs, jobservice_control, job_client, tmp_path, monkeypatch
):
    """Guards the outbox: a state change whose event could not be published is published by the next
    delivery, exactly once and under the same ce-id, and the job is not created twice."""
    emulator = start_pubsub_emulator(LOCAL_PROJECT, tmp_path / "pubsub")
    try:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host)
        deployment = own_deployment()
        events = deployment.events()
        jobservice_control.delay_next_creates(seconds=4)  # long enough to stop the emulator once the job exists
        push = deployment.push_body(_json(fake_node_request("pubsub-down-1")), "msg-pubsub-down-1")
        statuses: list[int] = []
        first = threading.Thread(target=lambda: statuses.append(deployment.post("on_job_request", push)))
        first.start()
        assert wait_until(lambda: jobs_with_key(job_client, "request:pubsub-down-1"), timeout=30)
        emulator.stop()  # the job exists; `accepted` is out, `submitted` is about to be published
        first.join()
        assert statuses == [500]  # publishing failed: the trigger will redeliver
        record = deployment.record("request:pubsub-down-1")
        assert record["state"] == "submitted" and len(record["outbox"]) == 1
        emulator = start_pubsub_emulator(LOCAL_PROJECT, tmp_path / "pubsub", port=int(emulator.host.split(":")[1]))
        _recreate(deployment, events)
        _wait_out_the_grace(record)  # a redelivery comes after the grace (Pub/Sub's backoff is ≥ 10 s)
        assert deployment.post("on_job_request", push) == 200
        published = events.drain()
        submitted = [(e, a) for e, a in published if e.request_id == "pubsub-down-1" and e.state == "submitted"]
        assert len(submitted) == 1
        assert submitted[0][1]["ce-id"] == submitted[0][0].ce_id
        assert deployment.record("request:pubsub-down-1")["outbox"] == []
        assert len(jobs_with_key(job_client, "request:pubsub-down-1")) == 1
    finally:
        emulator.stop()


def test_a_terminal_event_left_in_the_outbox_is_published_even_when_the_job_is_observed_again_first(
    own_deployment, job_client, tmp_path, monkeypatch
):
    """Guards the active index: a final record whose terminal event is still in the outbox (its handler died
    or lost Pub/Sub) stays active, and a later sweep publishes the event, once. (A sweep within the outbox's grace
    leaving the event to its handler is tests/unit/test_observation_paths.py's, on a clock: here the emulator's
    restart may outlast the grace.)"""
    emulator = start_pubsub_emulator(LOCAL_PROJECT, tmp_path / "pubsub")
    try:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host)
        deployment = own_deployment()
        events = deployment.events()
        until = tmp_path / "finish"
        request = fake_node_request("outbox-final-1", "--until-file", str(until), "--metrics", METRICS)
        assert deployment.request(request) == 200
        events.wait_for("outbox-final-1", "running", act=deployment.reconcile)
        emulator.stop()
        until.write_text("go")
        wait_for_state(job_client, deployment.record("request:outbox-final-1")["job_name"])
        assert deployment.reconcile()["errors"] == 1  # the state change is saved; its event could not go out
        record = deployment.record("request:outbox-final-1")
        assert record["state"] == "succeeded" and len(record["outbox"]) == 1
        emulator = start_pubsub_emulator(LOCAL_PROJECT, tmp_path / "pubsub", port=int(emulator.host.split(":")[1]))
        _recreate(deployment, events)
        assert deployment.requests_held() >= {f"active/{key_hash('request:outbox-final-1')}"}
        _wait_out_the_grace(record)
        deployment.reconcile()
        assert deployment.record("request:outbox-final-1")["outbox"] == []
        assert Counter(events.states("outbox-final-1")) == {"accepted": 1, "submitted": 1, "running": 1, "succeeded": 1}
    finally:
        emulator.stop()


def test_cloud_storage_down_during_a_claim_is_retryable_and_starts_no_job(
    own_deployment, pubsub_emulator, job_client, tmp_path, monkeypatch
):
    """Guards the claim: without the ledger nothing is submitted, and the function asks for redelivery."""
    storage = start_fake_gcs(tmp_path / "gcs", pubsub=pubsub_emulator)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage.url)
    deployment = own_deployment()
    storage.stop()
    try:
        status = deployment.post("on_job_request", deployment.push_body(_json(fake_node_request("gcs-down-1"))))
        assert status == 500
        assert jobs_with_key(job_client, "request:gcs-down-1") == []
    finally:
        storage.stop()


def test_a_jobservice_restart_while_jobs_run_loses_and_doubles_no_event(
    own_deployment, private_jobservice, job_client_factory, tmp_path
):
    """Guards reconcile as the source of truth: after the JobService comes back, each state change of a
    job that ran meanwhile is published exactly once."""
    service = private_jobservice()
    deployment = own_deployment(service.rest_url)
    events = deployment.events()
    until = tmp_path / "finish"
    assert deployment.request(fake_node_request("restart-1", "--until-file", str(until), "--metrics", METRICS)) == 200
    events.wait_for("restart-1", "running", act=deployment.reconcile)
    service.kill()  # the nodes keep running
    until.write_text("go")
    status = deployment.reconcile()  # Vertex unreachable: the sweep reports the error and goes on
    assert status["errors"] == 1
    service.restart()
    wait_for_state(job_client_factory(service.address), deployment.record("request:restart-1")["job_name"])
    events.wait_for("restart-1", "succeeded", act=deployment.reconcile)
    deployment.reconcile()
    assert Counter(events.states("restart-1")) == {"accepted": 1, "submitted": 1, "running": 1, "succeeded": 1}


def test_a_function_killed_mid_submission_leaves_one_job_after_redelivery(
    own_deployment, jobservice_control, job_client, tmp_path
):
    """Guards claim + label adoption: SIGKILL between CreateCustomJob and the ledger update, then the
    redelivered message (after the lease) adopts the job instead of creating a second one."""
    deployment = own_deployment(TRAINCTL_LEASE=DEAD_CLAIM_LEASE)
    events = deployment.events()
    jobservice_control.delay_next_creates(seconds=30)
    push = deployment.push_body(_json(fake_node_request("killed-1")), "msg-killed-1")
    first = threading.Thread(target=deployment.post, args=("on_job_request", push))
    first.start()
    assert wait_until(lambda: jobs_with_key(job_client, "request:killed-1"), timeout=30)
    victim = deployment.functions["on_job_request"]
    os.killpg(victim.process.pid, signal.SIGKILL)  # the whole functions-framework process group
    victim.process.popen.wait()
    first.join()
    jobservice_control.clear_faults()
    env = deployment.settings_env()
    deployment.functions["on_job_request"] = start_function("on_job_request", env, tmp_path / "restarted", victim.port)
    assert deployment.record("request:killed-1")["state"] == "claimed"
    assert deployment.deliver("on_job_request", push) == 200  # waits out the dead delivery's lease
    assert len(jobs_with_key(job_client, "request:killed-1")) == 1
    assert deployment.record("request:killed-1")["state"] == "submitted"
    assert Counter(events.states("killed-1")) == {"accepted": 1, "submitted": 1}


def _wait_out_the_grace(record: dict) -> None:
    """Until every event in `record`'s outbox is older than the grace (and a second), as the functions judge it
    (functions/ledger/outbox.py, by the event's time): the emulator's restart has usually taken that long already."""
    due = max(datetime.fromisoformat(event["time"]) for event in record["outbox"]) + timedelta(seconds=OUTBOX_GRACE + 1)
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))


def _recreate(deployment: Deployment, events) -> None:
    """The restarted emulator kept nothing: the topic and the test's subscription come back."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(LOCAL_PROJECT, deployment.events_topic)
    if topic not in {t.name for t in publisher.list_topics(project=f"projects/{LOCAL_PROJECT}")}:
        publisher.create_topic(name=topic)
        events._subscriber.create_subscription(name=events.subscription, topic=topic)


def _json(document) -> bytes:
    return json.dumps(document).encode()
