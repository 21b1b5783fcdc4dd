"""The Cloud Scheduler stand-in: POST to `reconcile` every few seconds from a background thread, as the
scheduler job Terraform creates calls it on its cron schedule; and publish each scheduled trigger rule's ticks to the
retrain topic at its cron's fire times, as the rules' scheduler jobs do (issue 42)."""

from __future__ import annotations

import base64
import json
import logging
import threading
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from local.eventarc import post
from schemas import cron
from schemas.triggers import POLICY_KEY, Schedule, TriggerPolicy

log = logging.getLogger("local.stack")


class ReconcileTimer:
    def __init__(self, url: str, every: float, timeout: float = 120.0):
        self.url, self.every, self._timeout = url, every, timeout
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._tick_until_stopped, name="reconcile-timer", daemon=True)
        self._thread.start()

    def _tick_until_stopped(self) -> None:
        # One call at a time, like a scheduler job whose run outlasts its interval.
        while not self._stopped.wait(self.every):
            status = post(self.url, {"content-type": "application/json"}, b"{}", timeout=self._timeout)
            if status >= 300:
                log.warning("reconcile answered %s (see its log)", status)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        self._thread.join(timeout)


class RuleSchedules:
    """The Cloud Scheduler jobs Terraform creates for trigger rules with a policy.schedule (terraform/retrain.tf): at
    each fire time of a rule's cron, on its zone's wall clock (schemas/cron.py), one message with the rule's fixed data
    `{"rule": "gs://…/"}` is published to the retrain topic, as a Pub/Sub target publishes it; the emulator gives it its
    messageId and publishTime, from which the controller reads the tick's scheduled time. Fire times before the stand-in
    started are not published (a job created now does not run for the past). `now`: the clock (tests set their own)."""

    def __init__(
        self,
        pubsub_host: str,
        topic_path: str,
        schedules: dict[str, Schedule],
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        every: float = 1.0,
    ):
        self._url = f"http://{pubsub_host}/v1/{topic_path}:publish"
        self.schedules, self._now, self._every = schedules, now, every
        started = now()
        self._last = {rule: cron.latest_fire(s.cron, s.time_zone, started) for rule, s in schedules.items()}
        self.published: list[tuple[str, datetime]] = []  # (rule, fire time), for tests and logs
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._tick_until_stopped, name="rule-schedules", daemon=True)
        if schedules:
            self._thread.start()

    def _tick_until_stopped(self) -> None:
        while not self._stopped.wait(self._every):
            try:
                self.tick()
            except Exception:  # a publish that failed (the emulator stopping): the next fire time is tried again
                log.exception("publishing a rule's schedule tick failed")

    def tick(self) -> None:
        """Publish the tick of every rule whose latest fire time has not been published yet (one per rule: fire
        times missed while this was stopped collapse into the newest, as the controller's catch_up would)."""
        now = self._now()
        for rule, schedule in self.schedules.items():
            fired = cron.latest_fire(schedule.cron, schedule.time_zone, now)
            if fired is None or fired == self._last.get(rule):
                continue
            data = base64.b64encode(json.dumps({"rule": rule}).encode()).decode()
            body = json.dumps({"messages": [{"data": data}]}).encode()
            request = urllib.request.Request(self._url, data=body, headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=10).close()
            self._last[rule] = fired
            self.published.append((rule, fired))
            log.info("published the tick of %s for %s", rule, fired.isoformat())

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)


def rule_schedules(trigger_rules: dict[str, Any]) -> dict[str, Schedule]:
    """The schedules of the rules whose template is inline and has a valid policy.schedule (as Terraform creates a job
    only for those); a rule whose policy is invalid is left out, and its runs refused when its template is read."""
    found = {}
    for rule, template in trigger_rules.items():
        if not isinstance(template, dict):
            continue
        try:
            schedule = TriggerPolicy.model_validate(template.get(POLICY_KEY) or {}).schedule
        except ValidationError:
            continue
        if schedule is not None:
            found[rule] = schedule
    return found
