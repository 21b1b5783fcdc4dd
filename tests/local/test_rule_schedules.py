"""The local Cloud Scheduler stand-in for trigger rules (local/scheduler.py RuleSchedules, issue 42): on the Pub/Sub
emulator, each scheduled rule's tick is published once per fire time of its cron, with the fixed data the controller
reads as that rule's tick; the emulator gives it its publishTime. The clock is the test's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import google.cloud.pubsub_v1 as pubsub_v1

from functions.intake.rule_triggers import Tick, read_message
from functions.settings import Settings
from local.names import LOCAL_PROJECT
from local.pubsub_emulator import pull_now
from local.scheduler import RuleSchedules, rule_schedules
from schemas.triggers import Schedule

RULES = {
    "gs://data/nightly/": {"policy": {"schedule": {"cron": "0 2 * * *", "time_zone": "Europe/Paris"}}},
    "gs://data/minutely/": {"policy": {"schedule": {"cron": "* * * * *"}}},
    "gs://data/plain/": {"trainer": {"builtin": "tabular"}},
    "gs://data/broken/": {"policy": {"schedule": {"cron": "0 25 * * *"}}},
    "gs://data/stored/": "gs://control/templates/stored.yaml",
}


def test_only_inline_valid_schedules_are_scheduled():
    assert rule_schedules(RULES) == {
        "gs://data/nightly/": Schedule(cron="0 2 * * *", time_zone="Europe/Paris"),
        "gs://data/minutely/": Schedule(cron="* * * * *"),
    }


def test_each_rule_publishes_one_tick_per_fire_time_that_the_controller_reads_as_its_tick(pubsub_emulator):
    topic = pubsub_emulator.create_topic(f"retrain-{uuid.uuid4().hex[:8]}")
    subscriber = pubsub_v1.SubscriberClient()
    subscription = subscriber.subscription_path(LOCAL_PROJECT, f"ticks-{uuid.uuid4().hex[:8]}")
    subscriber.create_subscription(name=subscription, topic=topic)
    now = [datetime(2026, 11, 27, 0, 59, 30, tzinfo=UTC)]  # 01:59:30 in Paris
    schedules = RuleSchedules(pubsub_emulator.host, topic, rule_schedules(RULES), now=lambda: now[0], every=3600)
    try:
        schedules.tick()
        assert schedules.published == []  # nothing for the fire times before it started
        now[0] += timedelta(seconds=45)  # 01:00:15 UTC, 02:00:15 in Paris: both rules fire
        schedules.tick()
        schedules.tick()  # the same minute again: nothing more
        now[0] += timedelta(minutes=3)  # three minutes on: one tick of the minutely rule, the newest
        schedules.tick()
    finally:
        schedules.stop()
    nightly, minutely = "gs://data/nightly/", "gs://data/minutely/"
    assert schedules.published == [
        (nightly, datetime(2026, 11, 27, 1, 0, tzinfo=UTC)),
        (minutely, datetime(2026, 11, 27, 1, 0, tzinfo=UTC)),
        (minutely, datetime(2026, 11, 27, 1, 3, tzinfo=UTC)),
    ]
    received = pull_now(subscriber, subscription, max_messages=10).received_messages
    settings = Settings("p", "control", "events", "image", trigger_rules=RULES)
    ticks = sorted(read_message(m.message.data, settings).rule for m in received)  # type: ignore[union-attr]
    assert ticks == [minutely, minutely, nightly]
    assert all(isinstance(read_message(m.message.data, settings), Tick) for m in received)
    assert all(m.message.publish_time and m.message.message_id for m in received)  # the emulator's, as Pub/Sub's
