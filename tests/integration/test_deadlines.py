"""Every handler works to a deadline inside the function's timeout (issue 12 point 5).

Cloud Run answers 504 when a request outlives the function's timeout but lets the handler's thread go on; the
event is redelivered and a second handler races the first. So a handler stops retrying at its deadline,
gives up its claim and leaves the work to the redelivery — which adopts whatever the cut-off call created."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from functions.cloud import deadline
from functions.controller import Controller
from functions.settings import Settings
from tests.integration.deployment import Deployment, fake_node_request
from tests.integration.test_controller_intake import jobs_with_key

FUNCTION_TIMEOUT = 10  # seconds: the handlers' deadline is 7.5 s after they start
SLOW_CREATE = 15  # seconds before the local JobService answers a create (the job exists from the start)


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    deployed.create(tmp_path_factory.mktemp("functions"), TRAINCTL_FUNCTION_TIMEOUT=str(FUNCTION_TIMEOUT))
    try:
        yield deployed
    finally:
        deployed.stop()


def test_a_create_slower_than_the_deadline_is_left_to_the_redelivery_which_adopts_the_job(
    deployment, jobservice_control, job_client
):
    """Guards issue 12 point 5: without the deadline the handler waits for the create (its call timeout is
    30 s), answers after the function's timeout, and a redelivery races it."""
    events = deployment.events()
    jobservice_control.delay_next_creates(seconds=SLOW_CREATE)
    request = fake_node_request("slow-create-1")
    delivery = deployment.push_body(json.dumps(request).encode(), "slow-create-msg")
    assert deployment.post("on_job_request", delivery) == 500  # redeliver: the deadline came first
    record = deployment.record("request:slow-create-1")
    assert record["state"] == "claimed" and record.get("owner") is None  # the claim is given up, not held
    assert events.states("slow-create-1") == ["accepted"]

    [job] = _wait_for_jobs(job_client, "request:slow-create-1")  # the cut-off create took effect after all
    assert deployment.post("on_job_request", delivery) == 200  # the redelivery
    assert [j.name for j in jobs_with_key(job_client, "request:slow-create-1")] == [job.name]
    assert deployment.record("request:slow-create-1")["job_name"] == job.name
    assert events.states("slow-create-1") == ["accepted", "submitted"]  # each once


def test_a_reconcile_tick_defers_what_it_has_no_time_for(deployment):
    """Guards issue 12 point 5: a tick starts observing a record only with time left to finish it; the rest
    is counted as deferred, for the next tick."""
    for i in range(2):
        assert deployment.request(fake_node_request(f"deferred-{i}")) == 200
    settings = Settings.from_env(deployment.settings_env())
    controller = Controller.from_settings(settings)
    active = len(controller.ledger.active())
    assert active >= 2
    with deadline.handler_deadline(12):  # 9 s left: less than a record's observation may take
        summary = controller.reconcile()
    assert summary == {"active": 0, "errors": 0, "deferred": active}
    assert controller.reconcile()["active"] == active  # without a deadline (trainctl, tests) nothing is deferred


def _wait_for_jobs(job_client, request_key: str) -> list:
    for _ in range(120):
        if jobs := jobs_with_key(job_client, request_key):
            return jobs
        time.sleep(0.5)
    raise AssertionError(f"no job was created for {request_key}")
