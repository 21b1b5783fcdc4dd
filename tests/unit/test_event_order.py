"""Events a consumer can order and de-duplicate without guessing: a per-request sequence number given when
an event is recorded, and the request id as the Pub/Sub ordering key."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import Accepted, Running, Submitted, to_pubsub_message
from tests.unit.test_lifecycle import record

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _events(r):
    return [e for e in r.outbox_events()]


def test_each_recorded_event_gets_the_next_number_and_a_copy_gets_none():
    """Guards issue 15 item 5: sequence 1, 2, 3 … per request in the order the events are recorded; an event
    recorded again (same ce-id: a redelivery, a second observer) takes no number of its own."""
    r = record()
    common = {"request_id": r.request_id, "request_key": r.key, "time": NOW, "message": "m"}
    accepted = Accepted(**common, cost=r.cost)
    running = Running(**common)
    assert r.add_events([accepted]) == {accepted.ce_id}
    assert r.add_events([accepted, running]) == {running.ce_id}  # the copy is dropped
    assert [(e.state, e.sequence) for e in _events(r)] == [("accepted", 1), ("running", 2)]
    r.mark_published({accepted.ce_id, running.ce_id})
    submitted = Submitted(**common, cost=r.cost, artifacts=r.artifacts)
    r.add_events([running, submitted])  # running was published: still a copy
    assert [(e.state, e.sequence) for e in _events(r)] == [("submitted", 3)]
    assert r.sequence == 3


def test_an_event_is_published_with_its_request_id_as_ordering_key():
    """Guards issue 15 item 5: one ordering key per request, so Pub/Sub keeps each request's events in order."""
    event = Running(request_id="churn-7", request_key="request:churn-7", time=NOW, message="m", sequence=4)
    message = to_pubsub_message(event, "//trainctl/test")
    assert message.ordering_key == "churn-7"
    assert b'"sequence":4' in message.data
