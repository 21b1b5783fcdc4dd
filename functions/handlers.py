"""What each entry point does with its event: decode, drop what must be dropped, hand the rest to the controller.

Retry or not is decided here, in one place, by exception type: `Transient` propagates (the trigger redelivers);
input that can never become valid is answered with a `rejected` event and the function returns normally.
Every entry point runs inside `within_deadline()`, the function's timeout less a margin (functions/cloud/deadline.py).
Imports stay light until an event needs more: an upload that is not a marker costs a dictionary lookup.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from functions import logs
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.intake import triggers
from functions.ledger import keys
from functions.settings import Settings

if TYPE_CHECKING:
    from functions.controller import Controller, Delivery


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def controller() -> Controller:
    from functions.controller import Controller

    return Controller.from_settings(settings())


@contextmanager
def within_deadline() -> Iterator[None]:
    """The deadline of one invocation: the function's timeout (Terraform's function_timeout_seconds) less a margin."""
    with deadline.handler_deadline(settings().function_timeout):
        yield


def _event_time(cloud_event: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(cloud_event["time"]).replace("Z", "+00:00")).astimezone(UTC)
    except (KeyError, ValueError, TypeError):
        return datetime.now(UTC)


def _too_old(cloud_event: Any, when: datetime, s: Settings) -> bool:
    age = datetime.now(UTC) - when
    if age > timedelta(seconds=s.max_event_age):
        logs.warning(
            "dropped an event older than max_event_age", event_id=cloud_event["id"], age_s=int(age.total_seconds())
        )
        return True
    return False


def _delivery(trigger_fields: dict[str, Any], cloud_event: Any, when: datetime, team: str | None = None) -> Delivery:
    from functions.controller import Delivery
    from schemas.events import Trigger

    return Delivery(Trigger(**trigger_fields), str(cloud_event["id"]), when, team)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else ""


def _digits(text: str) -> bool:
    """Whether `text` is a uint64 in decimal: ASCII digits only (str.isdigit() also takes '²' and '٣', which int()
    refuses or reads), and few enough of them for int() to read cheaply."""
    return text.isascii() and text.isdigit() and len(text) <= 20


def _whole(value: Any) -> int:
    """An int64 field of StorageObjectData (a string in real events); 0 when it is not a number."""
    text = _text(value)
    return int(text) if _digits(text) else 0


def _data(cloud_event: Any) -> dict[str, Any]:
    data = cloud_event.data
    if isinstance(data, bytes | str):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, too many digits, too deep: not an event of ours
            return {}
    return data if isinstance(data, dict) else {}


# ---- on_dataset_upload ---------------------------------------------------------------------------------


def _uploaded_object(cloud_event: Any) -> tuple[Any, Any, Any, Callable[[], dict[str, Any]]]:
    """(bucket, name, generation, the object's fields on demand) of an upload event, in either shape it arrives in:
    the data bucket's Pub/Sub notification through the uploads topic (terraform/storage.tf: Eventarc delivers the
    message, whose attributes name the object and whose data is the object resource, JSON_API_V1), or a
    `google.cloud.storage.object.v1.finalized` event (StorageObjectData; events recorded before issue 40, `trainctl
    replay`). The object resource is decoded only for a marker: a data shard costs a few dictionary lookups."""
    data = _data(cloud_event)
    message = data.get("message")
    if not isinstance(message, dict):
        return data.get("bucket"), data.get("name"), data.get("generation"), lambda: data
    attributes = message.get("attributes")
    attributes = attributes if isinstance(attributes, dict) else {}
    if attributes.get("eventType") != "OBJECT_FINALIZE":  # the notification asks for finalize events alone
        return None, None, None, dict

    def fields() -> dict[str, Any]:
        try:
            payload = json.loads(base64.b64decode(str(message.get("data") or ""), validate=True) or b"{}")
        except (binascii.Error, ValueError):
            return {}
        return payload if isinstance(payload, dict) else {}

    return attributes.get("bucketId"), attributes.get("objectId"), attributes.get("objectGeneration"), fields


def dataset_upload(cloud_event: Any, ctl: Controller | None = None) -> str:
    """`ctl`: a controller to use instead of the one built from the environment (trainctl replay)."""
    bucket, name, generation, fields = _uploaded_object(cloud_event)
    if not isinstance(bucket, str) or not isinstance(name, str):
        logs.warning("not a Cloud Storage object event; ignored", event_id=cloud_event["id"])
        return "ignored"
    s = ctl.settings if ctl else settings()
    if not triggers.is_marker(s, name):
        logs.info("not a marker; ignored", bucket=bucket, object=name)
        return "ignored"
    prefix = triggers.matching_rule(s, bucket, name)
    if prefix is None:
        logs.info("marker outside every trigger rule; ignored", bucket=bucket, object=name)
        return "ignored"
    when = _event_time(cloud_event)
    if _too_old(cloud_event, when, s):
        return "too old"
    c = ctl or controller()
    if triggers.is_score_marker(s, name):
        return _score_marker(c, cloud_event, bucket, name, _text(generation), prefix, when)
    return _marker(c, cloud_event, bucket, name, _text(generation), _whole(fields().get("size")), prefix, when)


def _score_marker(
    c: Controller, cloud_event: Any, bucket: str, name: str, generation: str, prefix: str, when: datetime
) -> str:
    """A scoring marker (functions/models/scoring.py): its content is not read; its rule says which model scores."""
    from functions.intake.markers import marker_arrival
    from functions.models.scoring import ScoreMarker, ScoringRefused
    from functions.untrusted.documents import DocumentInvalid

    delivery = _delivery({"kind": "gcs", "bucket": bucket, "object": name, "generation": generation}, cloud_event, when)
    arrival = marker_arrival(bucket, name, generation, 0, prefix, delivery)
    key, request_id = arrival.key, arrival.request_id
    with logs.request_context(request_id):
        try:
            template, arrival, planted = c.markers.rule_template(arrival)
            if planted is not None:
                return planted
            template, _ = triggers.split_policy(template, prefix)
            marker = ScoreMarker(
                bucket, name, generation, prefix, template, arrival.delivery.team, key, keys.key_hash(key), request_id,
                arrival.delivery.trigger, arrival.delivery.event_id,
            )  # fmt: skip
            return c.score(marker)
        except DocumentInvalid as exc:
            return c.reject(request_id, key, arrival.delivery, [f"marker: {exc}"], "the marker's rule is unreadable")
        except ScoringRefused as exc:
            return c.reject(request_id, key, arrival.delivery, exc.errors, exc.message)


def _marker(
    c: Controller, cloud_event: Any, bucket: str, name: str, generation: str, size: int, prefix: str, when: datetime
) -> str:
    from functions.intake.markers import marker_arrival

    delivery = _delivery({"kind": "gcs", "bucket": bucket, "object": name, "generation": generation}, cloud_event, when)
    return c.markers.arrive(marker_arrival(bucket, name, generation, size, prefix, delivery))


# ---- on_job_request ------------------------------------------------------------------------------------


def _pubsub_payload(cloud_event: Any) -> tuple[dict[str, Any], bytes | None]:
    """(message, decoded data), data None when it is missing or not base64."""
    message = _data(cloud_event).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("data"), str):
        return (message if isinstance(message, dict) else {}), None
    try:
        return message, base64.b64decode(message["data"], validate=True)
    except (binascii.Error, ValueError):
        return message, None


def _topic(cloud_event: Any) -> str | None:
    source = str(cloud_event["source"])
    return source.removeprefix("//pubsub.googleapis.com/") if "/topics/" in source else None


def job_request(cloud_event: Any, ctl: Controller | None = None) -> str:
    from functions.untrusted.documents import DocumentInvalid, load_document
    from schemas.errors import RequestInvalid, parse_request
    from schemas.request import REQUEST_ID_RE

    c = ctl or controller()
    when = _event_time(cloud_event)
    if _too_old(cloud_event, when, c.settings):
        return "too old"
    message, raw = _pubsub_payload(cloud_event)
    message_id = str(message.get("messageId") or cloud_event["id"])
    topic = _topic(cloud_event)
    # The team is the topic's: the push subscription's path names it, which no publisher can change.
    teams = c.settings.teams
    team = teams.team_of_topic(topic) if teams else None
    # The shared topic counts as the default team's only where the operator opened it (issue 40, point 5).
    closed = teams.shared_topic_problem() if teams and teams.topic_team(topic) is None else None
    delivery = _delivery({"kind": "pubsub", "message_id": message_id, "topic": topic}, cloud_event, when, team)
    key = keys.message_key(message_id)
    with logs.request_context(None):
        if raw is None:
            return c.reject("unknown", key, delivery, ["message.data: missing or not base64"], "unreadable message")
        try:
            document = load_document(raw, c.settings.max_request_bytes)
        except DocumentInvalid as exc:
            return c.reject("unknown", key, delivery, [f"message.data: {exc}"], "unreadable request document")
        claimed = document.get("request_id") if isinstance(document, dict) else None
        request_id = claimed if isinstance(claimed, str) and re.fullmatch(REQUEST_ID_RE, claimed) else "unknown"
        logs.set_request_id(request_id)
        if closed:
            return c.reject(request_id, key, delivery, [closed], "the shared requests topic is closed")
        try:
            request = parse_request(document)
        except RequestInvalid as exc:
            return c.reject(request_id, key, delivery, [str(e) for e in exc.errors], "the request is invalid")
        return c.handle_request(request, c.request_key(request.request_id, delivery.team), True, delivery)


# ---- on_job_state --------------------------------------------------------------------------------------


def job_state(cloud_event: Any, ctl: Controller | None = None) -> str:
    """A Vertex service log line about a job. Its labels are not documented, so the line only says which job to
    look at: the state comes from Vertex (GetCustomJob). An error that retrying will not fix is logged and the
    message acked; redelivering it for 24 hours would change nothing, and reconcile observes the job anyway."""
    _, raw = _pubsub_payload(cloud_event)
    try:
        entry = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):  # not JSON, too many digits, too deep: not a log entry
        entry = None
    resource = entry.get("resource") if isinstance(entry, dict) else None
    labels = resource.get("labels") if isinstance(resource, dict) else None
    job_id = labels.get("job_id") if isinstance(labels, dict) else None
    if not isinstance(job_id, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", job_id):
        logs.warning("not a Vertex job log entry; ignored", event_id=cloud_event["id"])
        return "ignored"
    logs.info("a job's service log line arrived; reading its state", job_id=job_id)
    try:
        return (ctl or controller()).observe_job(job_id)
    except Transient:
        raise
    except Exception as exc:  # logged and acked: see the docstring
        logs.error(
            f"could not observe job {job_id}; left to reconcile: {type(exc).__name__}: {exc}",
            request_id=getattr(exc, "trainctl_request_id", None),
            job_id=job_id,
        )
        return "error"


# ---- on_retrain ----------------------------------------------------------------------------------------


def retrain(cloud_event: Any, ctl: Controller | None = None) -> str:
    """A schedule tick or an alert on the retrain topic starts its rule's run (functions/intake/rule_triggers.py)."""
    c = ctl or controller()
    message, raw = _pubsub_payload(cloud_event)
    when = _event_time(cloud_event)
    if _too_old(cloud_event, when, c.settings):
        return "too old"
    rule_triggers = c.rule_triggers()
    with logs.request_context(None):
        message_id = str(message.get("messageId") or cloud_event["id"])
        return rule_triggers.receive(raw, message_id, _publish_time(message, when), when)


def _publish_time(message: dict[str, Any], default: datetime) -> datetime:
    """When Pub/Sub took the message (PubsubMessage.publishTime, RFC 3339 with up to nanoseconds), which no publisher
    sets: a schedule tick's time derives from it; `default` (the event's time) when it is missing or unreadable."""
    published = re.sub(r"(\.\d{6})\d+", r"\1", _text(message.get("publishTime")))
    try:
        return datetime.fromisoformat(published.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return default


# ---- reconcile -----------------------------------------------------------------------------------------


def reconcile_tick() -> dict[str, int]:
    from functions.ledger.monitoring_fields import RECONCILE_DURATION, RECONCILE_TICK_FAILED

    started = time.monotonic()
    try:
        summary = controller().reconcile()
    except Exception as exc:
        # Cloud Monitoring counts failed ticks (terraform/monitoring.tf): one that never summed up counts too.
        logs.error(f"reconcile tick failed: {type(exc).__name__}: {exc}", **{RECONCILE_TICK_FAILED: True})
        raise
    fields = {RECONCILE_DURATION: round(time.monotonic() - started, 3), RECONCILE_TICK_FAILED: summary["errors"] > 0}
    logs.info("reconciled", **summary, **fields)
    return summary
