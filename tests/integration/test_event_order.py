"""On the local stack: each request's events reach an ordered subscription under the request id as ordering
key, numbered 1, 2, 3 … in the order they happened."""

from __future__ import annotations

import time
import uuid

from google.cloud import pubsub_v1

from local.names import LOCAL_PROJECT
from schemas.events import parse_event
from tests.integration.deployment import fake_node_request


def test_a_requests_events_arrive_in_order_under_its_ordering_key_with_their_sequence(deployment):
    """Guards issue 15 item 5: ordering key = request id on every event, and sequence 1..n in publish order,
    so a consumer outside the project can order and de-duplicate without guessing."""
    subscriber = pubsub_v1.SubscriberClient()
    subscription = subscriber.subscription_path(LOCAL_PROJECT, f"it-ordered-{uuid.uuid4().hex[:8]}")
    subscriber.create_subscription(
        request={
            "name": subscription,
            "topic": f"projects/{LOCAL_PROJECT}/topics/{deployment.events_topic}",
            "enable_message_ordering": True,
        }
    )
    events = deployment.events()
    assert deployment.request(fake_node_request("ordered-1", "--sleep", "1", "--metrics", "{}")) == 200
    events.wait_for("ordered-1", "succeeded", act=deployment.reconcile)

    received = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(parse_event(m.data).state == "succeeded" for m in received):
        response = subscriber.pull(subscription=subscription, max_messages=100, timeout=5)
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])
        received += [m.message for m in response.received_messages]
    mine = [m for m in received if m.attributes["request_id"] == "ordered-1"]
    assert {m.ordering_key for m in mine} == {"ordered-1"}
    order = [(parse_event(m.data).state, parse_event(m.data).sequence) for m in mine]
    assert order == [("accepted", 1), ("submitted", 2), ("running", 3), ("succeeded", 4)]
