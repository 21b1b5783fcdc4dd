"""Following lifecycle events from the command line. Either a private pull subscription on the events topic that
lives as long as the command (created before anything is published, so nothing is missed; deleted at exit), or
the watcher's own subscription that Terraform made for it (`event_watchers`), which the command only pulls from.
"""

from __future__ import annotations

import math
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.events import JobEvent, parse_event
from trainctl.terminal import printable

# The event ids a stream remembers to drop copies by: a copy comes within minutes (a redelivery, an outbox's second
# publication), never after this many other events.
MAX_SEEN = 100_000
# `submit --wait` and `watch` exit with this when the events cannot be followed from this account.
EXIT_CANNOT_FOLLOW = 4
# A watcher's own subscription keeps what was published while nobody pulled; what was published before the
# command started is skipped, give or take this much difference between this machine's clock and Pub/Sub's.
CLOCK_ALLOWANCE = timedelta(seconds=30)
# A Pub/Sub emulator that refuses connections this long has stopped with its local stack: the command says so and
# ends. Google's Pub/Sub unanswered this long is an outage or a network down: the command says so and keeps trying.
EMULATOR_PATIENCE_SECONDS = 5.0
PUBSUB_PATIENCE_SECONDS = 60.0
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
        import google.cloud.pubsub_v1 as pubsub_v1
        from google.api_core import exceptions as gexc

        self._subscriber = pubsub_v1.SubscriberClient()
        self._seen: dict[str, None] = {}  # the ce-ids seen, oldest first, at most MAX_SEEN (a console runs for days)
        self._own = subscription is None
        self.started = datetime.now(UTC)
        self._unanswered_since: float | None = None  # when Pub/Sub began refusing or dropping our pulls
        self._said_unanswered = False
        self._gone = False  # the emulator stopped: there is no subscription left to delete
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
            if self._own and not self._gone:
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
        except gexc.DeadlineExceeded:
            return []
        except gexc.ServiceUnavailable as exc:
            self._not_answered(exc)
            return []
        except gexc.Forbidden as exc:
            raise CannotFollow(
                f"this account may not pull from {self.subscription} ({exc.message}); pulling needs "
                "pubsub.subscriptions.consume on it"
            ) from None
        except gexc.NotFound:
            raise CannotFollow(f"there is no subscription {self.subscription}") from None
        if self._said_unanswered:
            print("Pub/Sub answers again", file=sys.stderr, flush=True)
        self._unanswered_since, self._said_unanswered = None, False
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
            self._seen[ce_id] = None
            if len(self._seen) > MAX_SEEN:
                del self._seen[next(iter(self._seen))]
            try:
                events.append(parse_event(received.message.data))
            except ValueError:
                continue  # not ours, or from a newer schema: skip it rather than stop watching
        return sorted(events, key=lambda e: e.time)

    def _not_answered(self, exc: Exception) -> None:
        """A pull Pub/Sub did not answer. An emulator that keeps refusing has stopped with its stack: raise a
        Problem saying so. Google's Pub/Sub: say once that it does not answer, and keep trying."""
        from trainctl.hints import local_stack_hint
        from trainctl.problems import Problem

        now = time.monotonic()
        since = self._unanswered_since = self._unanswered_since or now
        emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
        if emulator and now - since >= EMULATOR_PATIENCE_SECONDS:
            self._gone = True
            raise Problem(
                f"the Pub/Sub emulator at {emulator} stopped answering: the local stack has stopped; "
                + local_stack_hint()
            )
        if not emulator and now - since >= PUBSUB_PATIENCE_SECONDS and not self._said_unanswered:
            self._said_unanswered = True
            print(
                f"Pub/Sub has not answered for {now - since:.0f} s ({str(exc).splitlines()[0]}); still trying "
                "(Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
        time.sleep(1.0)  # a refused connection fails at once: wait before the next pull rather than spin

    def follow(self, until: datetime | None = None) -> Iterator[JobEvent]:
        while until is None or datetime.now(UTC) < until:
            yield from self.poll()


def readable(value: float) -> str:
    """A number as a person reads it: 18,080 rather than 1.808e+04, four significant digits below a thousand,
    and the exponent only for what is too small to show otherwise."""
    if isinstance(value, bool) or not math.isfinite(value):
        return str(value)
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 0.001:
        return f"{value:.4g}"
    return f"{value:.2e}"


def headline_metrics(metrics: dict[str, Any], limit: int = 6) -> str:
    """The numbers a person looks at first: the validation metric beside its trivial baseline, then a few
    other scalars, rounded. (The event itself carries all of them.)"""
    parts = []
    for name in ("val_accuracy", "val_rmse"):
        baseline = "baseline_" + name.removeprefix("val_")
        if isinstance(metrics.get(name), int | float):
            text = f"{name} {readable(metrics[name])}"
            if isinstance(metrics.get(baseline), int | float):
                text += f" (baseline {readable(metrics[baseline])})"
            parts.append(text)
    shown = {"val_accuracy", "val_rmse", "baseline_accuracy", "baseline_rmse"}
    for name, value in metrics.items():
        if len(parts) >= limit:
            break
        if name not in shown and isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(f"{printable(name)} {readable(value)}")  # a job chose the name
    return ", ".join(parts)


def of_delivery(event: JobEvent, message_id: str) -> bool:
    """Whether the event is about the arrival of the message `message_id` (Pub/Sub's id for it, which no document
    can choose): its `delivery`, or the trigger of the request it claimed."""
    return event.delivery == message_id or (event.trigger is not None and event.trigger.message_id == message_id)


def rejected_delivery(event: JobEvent) -> str | None:
    """`unclaimed` or `conflicting_delivery` for a rejection of one delivery that claimed nothing: whoever sent it
    named the request id, and it is never the end of the request holding that id (issue 38, point 6)."""
    return getattr(event, "rejected_delivery", None)


_CLAIMED_NOTHING = {
    "unclaimed": "nothing was claimed",
    "conflicting_delivery": "the request holding this id goes on",
}


def format_event(event: JobEvent, own: bool = False) -> str:
    """One line per event for a person; a rejection's reasons follow on indented lines, and a success
    carries its headline metrics. A rejection of one delivery says so, unless it is `own` (the delivery the
    command itself published): it is not the end of a request holding its id."""
    when = event.time.astimezone().strftime("%H:%M:%S")
    marker = rejected_delivery(event)
    delivery = printable(event.delivery)
    note = "" if own or marker is None else f"[delivery {delivery} only: {_CLAIMED_NOTHING[marker]}] "
    line = f"{when}  {event.state:<10} {printable(event.request_id)}  {note}{printable(event.message)}"
    metrics = getattr(event, "metrics", None)
    if metrics:
        line += f"; {headline_metrics(metrics)}"
    return "\n".join([line, *(f"    {printable(error)}" for error in getattr(event, "errors", []))])
