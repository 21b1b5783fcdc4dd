"""Following lifecycle events from the command line: a private pull subscription on the events topic that
lives as long as the command (created before anything is published, so nothing is missed; deleted at exit)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from schemas.events import JobEvent, parse_event


class EventStream:
    def __init__(self, project: str, topic: str):
        from google.cloud import pubsub_v1

        self._subscriber = pubsub_v1.SubscriberClient()
        self.subscription = self._subscriber.subscription_path(project, f"trainctl-watch-{uuid.uuid4().hex[:12]}")
        self._subscriber.create_subscription(
            request={
                "name": self.subscription,
                "topic": f"projects/{project}/topics/{topic}",
                "ack_deadline_seconds": 30,
                "expiration_policy": {"ttl": {"seconds": 86400}},  # cleaned up even if we are killed
            }
        )
        self._seen: set[str] = set()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._subscriber.delete_subscription(request={"subscription": self.subscription}, timeout=10)
        finally:
            self._subscriber.close()

    def poll(self, timeout: float = 5.0) -> list[JobEvent]:
        """Events that arrived, once each (a re-published event with a known ce-id is dropped)."""
        from google.api_core import exceptions as gexc

        try:
            response = self._subscriber.pull(
                request={"subscription": self.subscription, "max_messages": 100}, timeout=timeout
            )
        except (gexc.DeadlineExceeded, gexc.ServiceUnavailable):
            return []
        if response.received_messages:
            ack_ids = [m.ack_id for m in response.received_messages]
            self._subscriber.acknowledge(request={"subscription": self.subscription, "ack_ids": ack_ids})
        events = []
        for received in response.received_messages:
            ce_id = received.message.attributes.get("ce-id", "")
            if ce_id in self._seen:
                continue
            self._seen.add(ce_id)
            try:
                events.append(parse_event(received.message.data))
            except ValueError:
                continue  # not ours, or from a newer schema: skip it rather than stop watching
        return sorted(events, key=lambda e: e.time)

    def follow(self, until: datetime | None = None) -> Iterator[JobEvent]:
        while until is None or datetime.now(UTC) < until:
            yield from self.poll()


def headline_metrics(metrics: dict[str, Any], limit: int = 6) -> str:
    """The numbers a person looks at first: the validation metric beside its trivial baseline, then a few
    other scalars, rounded. (The event itself carries all of them.)"""
    parts = []
    for name in ("val_accuracy", "val_rmse"):
        baseline = "baseline_" + name.removeprefix("val_")
        if isinstance(metrics.get(name), int | float):
            text = f"{name} {metrics[name]:.4g}"
            if isinstance(metrics.get(baseline), int | float):
                text += f" (baseline {metrics[baseline]:.4g})"
            parts.append(text)
    shown = {"val_accuracy", "val_rmse", "baseline_accuracy", "baseline_rmse"}
    for name, value in metrics.items():
        if len(parts) >= limit:
            break
        if name not in shown and isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(f"{name} {value:.4g}")
    return ", ".join(parts)


def format_event(event: JobEvent) -> str:
    """One line per event for a person; a rejection's reasons follow on indented lines, and a success
    carries its headline metrics."""
    when = event.time.astimezone().strftime("%H:%M:%S")
    line = f"{when}  {event.state:<10} {event.request_id}  {event.message}"
    metrics = getattr(event, "metrics", None)
    if metrics:
        line += f"; {headline_metrics(metrics)}"
    return "\n".join([line, *(f"    {error}" for error in getattr(event, "errors", []))])
