"""A record that holds its own outbox (the batch scorings' and the warm pools' records): an event is written into it in
the same compare-and-swap as what it reports, then published, then moved to `published`. A handler that dies in
between leaves it for the next visit, which publishes it under the same ce-id (schemas/events.py event_id), so a
consumer drops the copy."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import EVENT_ADAPTER, JobEvent


class Queued(BaseModel):
    """An event recorded for publication, and when (another handler's is left to it for the outbox's grace)."""

    model_config = ConfigDict(extra="forbid")

    event: dict[str, Any]
    since: datetime


class EventBox(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outbox: list[Queued] = Field(default_factory=list)
    published: list[str] = Field(default_factory=list, description="The states published, in order.")

    def states_queued(self) -> list[str]:
        return [str(q.event["state"]) for q in self.outbox]

    def queue(self, event: JobEvent, now: datetime) -> None:
        if event.state not in self.published and event.state not in self.states_queued():
            self.outbox.append(Queued(event=event.model_dump(mode="json", exclude_none=True), since=now))

    def due(self, mine: set[str], stale_before: datetime) -> list[JobEvent]:
        """The outbox events to publish now: those this handler queued, and those older than the grace."""
        return [
            EVENT_ADAPTER.validate_python(q.event)
            for q in self.outbox
            if q.event["state"] in mine or q.since < stale_before
        ]

    def mark_published(self, states: set[str]) -> None:
        self.published += [str(q.event["state"]) for q in self.outbox if q.event["state"] in states]
        self.outbox = [q for q in self.outbox if q.event["state"] not in states]
