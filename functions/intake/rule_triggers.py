"""A rule's own triggers (issue 42): a schedule tick or an alert starts a run of a trigger rule on its latest data.

Both arrive on the retrain topic (terraform/retrain.tf) and become an arrival of the rule's newest training marker
(functions/intake/markers.py), with a request id and key of their own, so that each tick and each incident runs at
most once however often it is delivered:

- A schedule tick is what Cloud Scheduler's Pub/Sub target publishes for the rule: fixed data, `{"rule": "gs://…/"}`
  (PubsubTarget has data and attributes only: cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs
  #PubsubTarget; no schedule time is sent). The tick's scheduled time is the rule's latest fire time at or before the
  message's publishTime (schemas/cron.py); its id `sched.<rule>-<yyyymmddthhmmz>`, its key `schedule:<rule>#<time>`.
  A tick whose time is older than the newest fire time due (one due more than TICK_GRACE ago) was missed: catch_up
  `latest` runs it as that newest fire time, so that any number of missed ticks make one run; `none` publishes
  `skipped` (reason missed_tick) for the delivery and runs nothing. Under `latest`, reconcile also runs a fire time
  whose tick never came (none had arrived RECONCILE_GRACE after it was due), as that tick: `catch_up`.
- An alert is a Cloud Monitoring incident from a Pub/Sub notification channel (schema version 1.2:
  cloud.google.com/monitoring/support/notification-options, "Schema structure"): `{"version": "1.2", "incident":
  {"incident_id", "policy_name", "state": "open" | "closed", "policy_user_labels", …}}`. The alerting policy's user
  label `trainctl-model` (or `trainctl_model`) names the model; the rule is the one whose template's model.name is
  that model (the longest prefix of several). Only an `open` incident starts a run: id `alert.<model>-<incident>`,
  key `alert:<model>#<incident_id>`. Vertex AI model monitoring sends its alerts to Monitoring notification channels
  (ModelMonitoringAlertConfig.notificationChannels), so they arrive the same way.

Whatever cannot start a run (unreadable, an unknown rule or model, a closed incident, no marker under the rule) is
logged and acked: redelivering it would change nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from functions import logs
from functions.cloud.gcs import ListedObject, TooLarge
from functions.cloud.ports import Events, Storage
from functions.intake import triggers
from functions.intake.delivery import Delivery
from functions.intake.markers import Arrival, Markers
from functions.ledger import keys
from functions.ledger.history import outcome_of
from functions.ledger.requests import Ledger
from functions.settings import Settings
from functions.untrusted.documents import DocumentInvalid
from schemas import cron
from schemas.events import Skipped, Trigger
from schemas.request import MODEL_ID_RE
from schemas.triggers import Schedule

SCHEDULE_ID_PREFIX = "sched."
ALERT_ID_PREFIX = "alert."
# Monitoring's label keys take lowercase letters, digits, '_' and '-' (AlertPolicy.user_labels); either spelling.
MODEL_LABELS = ("trainctl-model", "trainctl_model")
# A tick is missed once a later fire time has been due this long: a tick delivered a few seconds late, past the next
# minute of an every-minute schedule, is not.
TICK_GRACE = timedelta(seconds=60)
# Reconcile runs a `latest` rule's fire time whose tick has not arrived this long after it was due, during the next
# RECONCILE_GRACE only (two ticks of the default 5-minute reconcile schedule): a fire time from before the rule had a
# schedule, or one whose run is refused, is not tried at every tick forever.
RECONCILE_GRACE = timedelta(minutes=10)
# The most objects one listing of a rule's prefix reads looking for its newest marker.
MAX_LISTED = 100_000
_MAX_INCIDENT_ID = 256


class Unreadable(ValueError):
    """A retrain message that is neither a tick nor an incident this controller can act on; the message says why."""


@dataclass(frozen=True)
class Tick:
    rule: str


@dataclass(frozen=True)
class Incident:
    incident_id: str
    policy: str | None
    state: str
    model: str | None


def read_message(data: bytes, settings: Settings) -> Tick | Incident:
    """The tick or incident a retrain message holds (`data` already bounded by max_request_bytes)."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise Unreadable("message.data is not JSON") from None
    if not isinstance(document, dict):
        raise Unreadable("message.data is not a JSON object")
    if "incident" in document:
        return _incident(document["incident"])
    rule = document.get("rule")
    if not isinstance(rule, str):
        raise Unreadable('message.data holds neither "rule" (a schedule tick) nor "incident" (a Monitoring alert)')
    if rule not in settings.trigger_rules:
        raise Unreadable(f"rule {rule[:200]!r} is not one of the trigger rules")
    return Tick(rule)


def _incident(value: Any) -> Incident:
    if not isinstance(value, dict):
        raise Unreadable("incident: not an object")
    incident_id, state = value.get("incident_id"), value.get("state")
    if not isinstance(incident_id, str) or not 0 < len(incident_id) <= _MAX_INCIDENT_ID:
        raise Unreadable(f"incident.incident_id: a string of 1-{_MAX_INCIDENT_ID} characters is needed")
    if not isinstance(state, str) or state.lower() not in ("open", "closed"):
        raise Unreadable("incident.state: must be open or closed")
    labels = value.get("policy_user_labels")
    labels = labels if isinstance(labels, dict) else {}
    model = next((labels[key] for key in MODEL_LABELS if isinstance(labels.get(key), str)), None)
    if model is not None and not MODEL_ID_RE.fullmatch(model):
        raise Unreadable(f"incident.policy_user_labels: {model[:80]!r} is not a model id")
    policy = value.get("policy_name")
    return Incident(incident_id, policy[:512] if isinstance(policy, str) else None, state.lower(), model)


def _slug(text: str, room: int) -> str:
    """`text` in request-id characters, at most `room` long: its end, and a hash of the whole when it is cut."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "x"
    if len(slug) <= room:
        return slug
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{slug[-(room - len(digest) - 1) :].lstrip('-._')}-{digest}"


def schedule_request_id(rule: str, scheduled: datetime) -> str:
    stamp = scheduled.astimezone(UTC).strftime("%Y%m%dt%H%Mz")  # request ids are lowercase (REQUEST_ID_RE)
    room = 128 - len(SCHEDULE_ID_PREFIX) - len(stamp) - 1
    return f"{SCHEDULE_ID_PREFIX}{_slug(rule.removeprefix('gs://'), room)}-{stamp}"


def alert_request_id(model: str, incident_id: str) -> str:
    room = 128 - len(ALERT_ID_PREFIX) - len(model) - 1
    return f"{ALERT_ID_PREFIX}{model.replace('_', '-')}-{_slug(incident_id, room)}"


def tick_time(schedule: Schedule, publish_time: datetime) -> datetime | None:
    """The fire time a tick published at `publish_time` is for: the latest at or before it."""
    return cron.latest_fire(schedule.cron, schedule.time_zone, publish_time)


def due_time(schedule: Schedule, now: datetime) -> datetime | None:
    """The newest fire time whose tick should have arrived by `now`."""
    return cron.latest_fire(schedule.cron, schedule.time_zone, now - TICK_GRACE)


def rule_for_model(rules: Iterable[str], model_of: Callable[[str], str | None], model: str) -> str | None:
    """The rule whose template trains `model`: the longest prefix of several."""
    found = [rule for rule in rules if model_of(rule) == model]
    return max(found, key=len) if found else None


def _when(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def newest_marker(gcs: Storage, settings: Settings, rule: str) -> ListedObject | None:
    """The rule's newest training marker (by update time, then generation) from one bounded listing of its prefix."""
    bucket, _, prefix = rule.removeprefix("gs://").partition("/")
    newest: ListedObject | None = None
    for count, item in enumerate(gcs.listing(bucket, prefix), 1):
        if count > MAX_LISTED:
            logs.warning(f"more than {MAX_LISTED} objects under {rule}; the newest marker among the first is used")
            break
        if not triggers.is_marker(settings, item.name) or triggers.is_score_marker(settings, item.name):
            continue
        if newest is None or (_when(item.updated), item.generation) > (_when(newest.updated), newest.generation):
            newest = item
    return newest


@dataclass
class RuleTriggers:
    """Ticks and alerts of the retrain topic, each made an arrival of its rule's newest marker."""

    settings: Settings
    gcs: Storage
    markers: Markers
    publisher: Events
    clock: Callable[[], datetime]
    ledger: Ledger | None = None  # where a missed tick's `skipped` is filed for `trainctl report` (history index)

    def receive(self, data: bytes | None, message_id: str, publish_time: datetime, when: datetime) -> str:
        """What happened to one message, in a word; never raises for input that will never be valid."""
        limit = self.settings.max_request_bytes
        try:
            if data is None:
                raise Unreadable("message.data is missing or not base64")
            if len(data) > limit:
                raise Unreadable(f"message.data is {len(data)} bytes; the limit is {limit} (max_request_bytes)")
            found = read_message(data, self.settings)
        except Unreadable as exc:
            logs.warning(f"a retrain message was ignored: {exc}", message_id=message_id)
            return "ignored"
        if isinstance(found, Tick):
            return self.tick(found.rule, message_id, publish_time, when)
        return self.alert(found, message_id, when)

    def tick(self, rule: str, message_id: str, publish_time: datetime, when: datetime) -> str:
        try:
            template, schedule = self._schedule(rule)
        except (DocumentInvalid, TooLarge) as exc:
            logs.warning(f"a schedule tick of {rule} was ignored: {exc}", message_id=message_id)
            return "ignored"
        if schedule is None:
            logs.warning(f"a schedule tick of {rule} was ignored: its policy has no schedule", message_id=message_id)
            return "ignored"
        scheduled, due = tick_time(schedule, publish_time), due_time(schedule, self.clock())
        if scheduled is None:
            logs.warning(f"a schedule tick of {rule} was ignored: its schedule has no fire time before it")
            return "ignored"
        if due is not None and scheduled < due:  # missed: a later fire time is due
            if schedule.catch_up == "none":
                return self._missed(rule, template, scheduled, due, message_id, when)
            logs.info(f"a missed tick of {rule} ({scheduled:%Y-%m-%dT%H:%MZ}) runs as the newest due, {due:%H:%MZ}")
            scheduled = due
        trigger = Trigger(kind="schedule", rule=rule, scheduled_time=scheduled, message_id=message_id)
        request_id, key = schedule_request_id(rule, scheduled), keys.schedule_key(rule, scheduled)
        return self._run(rule, request_id, key, trigger, when)

    def _schedule(self, rule: str) -> tuple[dict[str, Any], Schedule | None]:
        template = self.markers.template(rule)
        _, policy = triggers.split_policy(template, rule)
        return template, policy.schedule

    def _missed(
        self, rule: str, template: dict[str, Any], scheduled: datetime, due: datetime, message_id: str, when: datetime
    ) -> str:
        """catch_up none: `skipped` for this delivery of the missed tick (no record: nothing was claimed, and a
        redelivery publishes the same event under the same ce-id), and nothing runs."""
        request_id, key = schedule_request_id(rule, scheduled), keys.schedule_key(rule, scheduled)
        try:
            _, team = self.markers.template_team(template, rule)
        except DocumentInvalid:
            team = None  # the template names a team that is not one: its runs are refused when it is read
        event = Skipped(
            request_id=request_id,
            request_key=key,
            time=when,
            message=f"the tick of {scheduled:%Y-%m-%dT%H:%MZ} arrived after the one of {due:%Y-%m-%dT%H:%MZ} was due; "
            "the rule's catch_up is none",
            trigger=Trigger(kind="schedule", rule=rule, scheduled_time=scheduled, message_id=message_id),
            delivery=message_id,
            reason="missed_tick",
            team=team,
        )
        self.publisher.publish(event)
        if self.ledger is not None:  # `trainctl report` counts it among the skipped triggers; a redelivery files once
            self.ledger.record_outcome(outcome_of(event, None), f"missed-{keys.key_hash(key)}")
        logs.info("published skipped (missed_tick)", request_id=request_id, rule=rule)
        return "skipped"

    def catch_up(self, has_record: Callable[[str], bool]) -> int:
        """Reconcile's part: each inline rule under catch_up `latest` whose newest fire time due RECONCILE_GRACE ago
        (and not yet twice that) has no request under its key — its tick never came — runs that fire time now, as its
        tick would have (the same id and key: a tick arriving later is a duplicate). How many were started."""
        now, started = self.clock(), 0
        for rule, template in self.settings.trigger_rules.items():
            if not isinstance(template, dict):
                continue  # a gs:// template is not read at every reconcile tick; its ticks catch up when they arrive
            try:
                _, policy = triggers.split_policy(template, rule)
            except DocumentInvalid:
                continue
            schedule = policy.schedule
            if schedule is None or schedule.catch_up != "latest":
                continue
            due = cron.latest_fire(schedule.cron, schedule.time_zone, now - RECONCILE_GRACE)
            key = keys.schedule_key(rule, due) if due is not None else ""
            if due is None or due <= now - 2 * RECONCILE_GRACE or has_record(key):
                continue
            logs.info(f"no tick of {rule} for {due:%Y-%m-%dT%H:%MZ} arrived; reconcile runs it")
            trigger = Trigger(kind="schedule", rule=rule, scheduled_time=due)
            request_id = schedule_request_id(rule, due)
            with logs.request_context(request_id):
                started += self._run(rule, request_id, key, trigger, now) != "ignored"
        return started

    def alert(self, incident: Incident, message_id: str, when: datetime) -> str:
        if incident.state != "open":
            logs.info(f"incident {incident.incident_id} is {incident.state}; only an open one starts a run")
            return "ignored"
        if incident.model is None:
            logs.warning(f"incident {incident.incident_id} names no model (policy label {MODEL_LABELS[0]}); ignored")
            return "ignored"
        rule = rule_for_model(self.settings.trigger_rules, self._model_of, incident.model)
        if rule is None:
            logs.warning(f"incident {incident.incident_id}: no trigger rule trains model {incident.model}; ignored")
            return "ignored"
        trigger = Trigger(
            kind="alert", rule=rule, incident=incident.incident_id, policy=incident.policy, message_id=message_id
        )
        request_id = alert_request_id(incident.model, incident.incident_id)
        return self._run(rule, request_id, keys.alert_key(incident.model, incident.incident_id), trigger, when)

    def _model_of(self, rule: str) -> str | None:
        try:
            model = self.markers.template(rule).get("model")
        except (DocumentInvalid, TooLarge) as exc:
            logs.warning(f"rule {rule} left out of the alert's search: {exc}")
            return None
        return model.get("name") if isinstance(model, dict) else None

    def _run(self, rule: str, request_id: str, key: str, trigger: Trigger, when: datetime) -> str:
        marker = newest_marker(self.gcs, self.settings, rule)
        if marker is None:
            logs.warning(f"{trigger.kind} for {rule}: no training marker under it yet; nothing to train on")
            return "ignored"
        bucket = rule.removeprefix("gs://").partition("/")[0]
        delivery = Delivery(trigger, trigger.message_id or request_id, when, None)
        arrival = Arrival(bucket, marker.name, str(marker.generation), marker.size, rule, request_id, key, delivery)
        return self.markers.arrive(arrival)
