"""Following lifecycle events from the command line. Either a private pull subscription on the events topic that
lives as long as the command (created before anything is published, so nothing is missed; deleted at exit), or
the watcher's own subscription that Terraform made for it (`event_watchers`), which the command only pulls from.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.events import JobEvent, parse_event

# `submit --wait` and `watch` exit with this when the events cannot be followed from this account.
EXIT_CANNOT_FOLLOW = 4
# A watcher's own subscription keeps what was published while nobody pulled; what was published before the
# command started is skipped, give or take this much difference between this machine's clock and Pub/Sub's.
CLOCK_ALLOWANCE = timedelta(seconds=30)
HOW_TO_WATCH = (
    "ask the deployment's operator to add you to the Terraform variable `event_watchers` (terraform/README.md, "
    '"Permissions"): it makes a subscription of your own, <name_prefix>-watch-<name>, to pass as --subscription '
    "or in TRAINCTL_EVENTS_SUBSCRIPTION"
)


class CannotFollow(Exception):
    """This account may not follow the events topic the way it was asked to; the message says which call was
    refused and on what."""


class EventStream:
    def __init__(self, project: str, topic: str, subscription: str | None = None):
        """Follow `topic`: through `subscription` (a watcher's own: name or full path) when given, else through
        a subscription made now. Raises CannotFollow when Pub/Sub refuses to make it."""
        from google.api_core import exceptions as gexc
        from google.cloud import pubsub_v1

        self._subscriber = pubsub_v1.SubscriberClient()
        self._seen: set[str] = set()
        self._own = subscription is None
        self.started = datetime.now(UTC)
        topic_path = f"projects/{project}/topics/{topic}"
        if subscription is not None:
            self.subscription = (
                subscription if "/" in subscription else self._subscriber.subscription_path(project, subscription)
            )
            return
        self.subscription = self._subscriber.subscription_path(project, f"trainctl-watch-{uuid.uuid4().hex[:12]}")
        try:
            self._subscriber.create_subscription(
                request={
                    "name": self.subscription,
                    "topic": topic_path,
                    "ack_deadline_seconds": 30,
                    "expiration_policy": {"ttl": {"seconds": 86400}},  # cleaned up even if we are killed
                }
            )
        except gexc.Forbidden as exc:  # PermissionDenied over gRPC is a Forbidden too
            self._subscriber.close()
            raise CannotFollow(
                f"this account may not create a subscription on {topic_path} ({exc.message}); creating one needs "
                "pubsub.subscriptions.create on the project and pubsub.topics.attachSubscription on the topic"
            ) from None
        except gexc.NotFound:
            self._subscriber.close()
            raise CannotFollow(f"there is no topic {topic_path}") from None

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Delete the subscription this stream made (never a watcher's own), then let go of the client."""
        from google.api_core import exceptions as gexc

        try:
            if self._own:
                self._subscriber.delete_subscription(request={"subscription": self.subscription}, timeout=10)
        except gexc.GoogleAPICallError as exc:
            print(
                f"could not delete {self.subscription} ({exc.message}); it expires after a day unused",
                file=sys.stderr,
            )
        finally:
            self._subscriber.close()

    def poll(self, timeout: float = 5.0) -> list[JobEvent]:
        """Events that arrived, once each (a re-published event with a known ce-id is dropped). Raises
        CannotFollow when the subscription cannot be pulled from."""
        from google.api_core import exceptions as gexc

        try:
            response = self._subscriber.pull(
                request={"subscription": self.subscription, "max_messages": 100}, timeout=timeout
            )
        except (gexc.DeadlineExceeded, gexc.ServiceUnavailable):
            return []
        except gexc.Forbidden as exc:
            raise CannotFollow(
                f"this account may not pull from {self.subscription} ({exc.message}); pulling needs "
                "pubsub.subscriptions.consume on it"
            ) from None
        except gexc.NotFound:
            raise CannotFollow(f"there is no subscription {self.subscription}") from None
        if response.received_messages:
            ack_ids = [m.ack_id for m in response.received_messages]
            self._subscriber.acknowledge(request={"subscription": self.subscription, "ack_ids": ack_ids})
        events = []
        for received in response.received_messages:
            if not self._own and received.message.publish_time < self.started - CLOCK_ALLOWANCE:
                continue  # left in a watcher's subscription before this command started
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
