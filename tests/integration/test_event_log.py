"""The tests' EventLog answers without the emulator's hold on an empty pull, and still returns every message
published before it is asked — so an exactly-once count still sees a duplicate."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from google.cloud import pubsub_v1

from local.names import LOCAL_PROJECT
from schemas.events import Rejected, to_pubsub_message
from tests.integration.deployment import EventLog


def test_drain_returns_every_message_published_before_it_duplicates_included(pubsub_emulator):
    """Guards issue 16 item 8: the faster drain (return_immediately) loses nothing a test relies on."""
    topic = f"it-event-log-{uuid.uuid4().hex[:8]}"
    pubsub_emulator.create_topic(topic)
    log = EventLog(topic)
    assert log.drain() == []  # nothing yet, answered at once
    event = Rejected(request_id="drained-1", request_key="request:drained-1", time=datetime.now(UTC),
                     message="the request is invalid", reason="invalid", errors=["request_id: required"])  # fmt: skip
    message = to_pubsub_message(event, source="test")
    publisher = pubsub_v1.PublisherClient()
    path = publisher.topic_path(LOCAL_PROJECT, topic)
    for _ in range(3):  # the same event three times, as a duplicate publish would be
        publisher.publish(path, message.data, **message.attributes).result(timeout=30)

    assert log.states("drained-1") == ["rejected"] * 3
