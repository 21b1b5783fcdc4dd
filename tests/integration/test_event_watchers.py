"""`trainctl submit --wait` and `trainctl watch` for an account that may publish requests but not subscribe on its
own (issue 25, point 5): the request still goes out and the command says how to follow it; a watcher that
Terraform gave a subscription of its own (`event_watchers`) follows events through it without creating or
deleting anything.

The Pub/Sub emulator enforces no IAM. A project's refusals are stood in for by local/pubsub_refusals.py, a gRPC
proxy in front of the emulator that answers PERMISSION_DENIED ("User not authorized to perform this action.",
status 7, as Pub/Sub does) to the methods the account lacks and forwards every other call to the emulator. The
CLI talks to it through PUBSUB_EMULATOR_HOST with the real client library, which raises what it raises against
a real project."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from local.names import LOCAL_PROJECT
from local.pubsub_emulator import PubSubEmulator, pull_now
from local.pubsub_refusals import CREATE_SUBSCRIPTION, DELETE_SUBSCRIPTION, PULL, refusing_pubsub
from schemas.events import JobEvent, Running, to_pubsub_message
from tests.integration.deployment import fake_node_request
from tests.unit.test_events import succeeded
from trainctl import eventstream
from trainctl.cli import main
from trainctl.eventstream import EXIT_CANNOT_FOLLOW


@dataclass
class Emulator:
    """Clients straight to the emulator (made before any proxy is in PUBSUB_EMULATOR_HOST): what the test itself
    publishes and reads, beside the CLI."""

    publisher: pubsub_v1.PublisherClient
    subscriber: pubsub_v1.SubscriberClient

    def published(self, subscription: str) -> list[dict]:
        return [json.loads(m.message.data) for m in pull_now(self.subscriber, subscription, 10).received_messages]

    def publish_events(self, topic: str, *events: JobEvent) -> None:
        for event in events:
            message = to_pubsub_message(event, "//tests")
            path = self.publisher.topic_path(LOCAL_PROJECT, topic)
            self.publisher.publish(path, message.data, **message.attributes).result(10)


@pytest.fixture
def emulator(pubsub_emulator: PubSubEmulator) -> Iterator[Emulator]:
    clients = Emulator(pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient())
    yield clients
    clients.subscriber.close()


@pytest.fixture
def topics(pubsub_emulator: PubSubEmulator, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A requests and an events topic of this test's own, the CLI's settings pointing at them, and a
    subscription on the requests topic that shows what the CLI published."""
    suffix = uuid.uuid4().hex[:8]
    names = {"requests": f"watch-requests-{suffix}", "events": f"watch-events-{suffix}"}
    for topic in names.values():
        pubsub_emulator.create_topic(topic)
    names["published"] = pubsub_emulator.create_subscription(f"published-{suffix}", names["requests"])
    for name, value in {
        "TRAINCTL_PROJECT": LOCAL_PROJECT,
        "TRAINCTL_CONTROL_BUCKET": f"watch-control-{suffix}",
        "TRAINCTL_EVENTS_TOPIC": names["events"],
        "TRAINCTL_TRAINER_IMAGE": "localhost/tests/trainer:1",
        "TRAINCTL_REQUESTS_TOPIC": names["requests"],
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TRAINCTL_EVENTS_SUBSCRIPTION", raising=False)
    return names


@pytest.fixture
def account_without(
    pubsub_emulator: PubSubEmulator, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., None]]:
    """`account_without(*methods)`: from then on the CLI's Pub/Sub calls go through a proxy that refuses those
    gRPC methods, as IAM refuses an account that lacks their permissions."""
    with ExitStack() as proxies:

        def use(*refused: str) -> None:
            monkeypatch.setenv(
                "PUBSUB_EMULATOR_HOST", proxies.enter_context(refusing_pubsub(pubsub_emulator.host, refused))
            )

        yield use


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(fake_node_request(f"watch-{uuid.uuid4().hex[:8]}")))
    return path


def _running(request_id: str) -> Running:
    return Running(
        request_id=request_id, request_key=f"request:{request_id}", time=datetime.now(UTC), message="job 7 is running"
    )


def _succeeded(request_id: str, message: str = "training finished") -> JobEvent:
    return succeeded(
        request_id=request_id, request_key=f"request:{request_id}", time=datetime.now(UTC), message=message
    )


def test_submit_wait_publishes_and_says_how_to_follow_when_it_may_not_subscribe(
    topics, request_file, emulator, account_without, capsys
):
    """Guards issue 25, point 5: a request publisher may not create a subscription on the events topic.
    `submit --wait` used to fail on that before publishing; the request must go out all the same, and the
    command must say why it cannot follow it, how to see where it stands, and what to ask the operator for."""
    request_id = json.loads(request_file.read_text())["request_id"]
    account_without(CREATE_SUBSCRIPTION)  # request_publishers' grant only

    status = main(["submit", str(request_file), "--wait", "--timeout", "20"])

    out, err = capsys.readouterr()
    assert status == EXIT_CANNOT_FOLLOW
    assert f"(request {request_id})" in out
    assert [r["request_id"] for r in emulator.published(topics["published"])] == [request_id]
    assert "may not create a subscription" in err and "User not authorized" in err
    assert f"trainctl status {request_id}" in err
    assert "event_watchers" in err and "--subscription" in err


def test_watch_says_why_it_cannot_watch(topics, account_without, capsys):
    """Guards issue 25, point 5: `watch` without the right to subscribe ends with a reason and the way to get
    the right, not a traceback."""
    account_without(CREATE_SUBSCRIPTION)

    status = main(["watch"])

    err = capsys.readouterr().err
    assert status == EXIT_CANNOT_FOLLOW
    assert f"cannot watch {topics['events']}" in err
    assert "may not create a subscription" in err and "event_watchers" in err


def test_a_watcher_follows_its_request_through_its_own_subscription(
    topics, request_file, emulator, account_without, pubsub_emulator, monkeypatch, capsys
):
    """Guards issue 25, point 5: with the subscription Terraform makes for an event watcher, `submit --wait`
    creates and deletes nothing (the watcher may do neither), skips what the subscription held from before it
    started, and ends with the request's final event."""
    request_id = json.loads(request_file.read_text())["request_id"]
    mine = pubsub_emulator.create_subscription(f"watch-mine-{uuid.uuid4().hex[:8]}", topics["events"])
    # Left in the subscription while nobody watched: the end of an older run under the same request id. One
    # machine, one clock: no allowance is needed for it to count as older than the command.
    emulator.publish_events(topics["events"], _succeeded(request_id, message="stale"))
    monkeypatch.setattr(eventstream, "CLOCK_ALLOWANCE", timedelta(0))
    account_without(CREATE_SUBSCRIPTION, DELETE_SUBSCRIPTION)

    def controller() -> None:  # answers the request once it is published, as the functions would
        for _ in range(150):
            if emulator.published(topics["published"]):
                emulator.publish_events(topics["events"], _running(request_id), _succeeded(request_id))
                return
            threading.Event().wait(0.2)

    answering = threading.Thread(target=controller, daemon=True)
    answering.start()
    status = main(["submit", str(request_file), "--wait", "--timeout", "60", "--subscription", mine.rsplit("/", 1)[1]])
    answering.join(5)

    out, err = capsys.readouterr()
    assert status == 0, err
    assert "running" in out and "training finished" in out and "stale" not in out
    assert "could not delete" not in err  # it did not try: the proxy would have refused
    assert emulator.published(mine) == []  # still there, and every event acknowledged


def test_watch_through_a_subscription_it_may_not_pull_says_so(topics, account_without, pubsub_emulator, capsys):
    """Guards issue 25, point 5: a watcher whose grant has not reached Pub/Sub yet (or was never made) is told
    which subscription refused it."""
    mine = pubsub_emulator.create_subscription(f"watch-mine-{uuid.uuid4().hex[:8]}", topics["events"])
    account_without(CREATE_SUBSCRIPTION, DELETE_SUBSCRIPTION, PULL)

    status = main(["watch", "--subscription", mine])

    err = capsys.readouterr().err
    assert status == EXIT_CANNOT_FOLLOW
    assert f"may not pull from {mine}" in err
