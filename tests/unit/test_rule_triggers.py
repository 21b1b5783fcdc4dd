"""functions/intake/rule_triggers.py: what a retrain message is, and the ids, keys and times a tick or an alert derives
(issue 42). The runs they start are tested on the emulators (tests/integration/test_rule_triggers.py)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from functions.cloud.gcs import ListedObject
from functions.intake import rule_triggers as rt
from functions.intake.triggers import explicit_id_problem
from functions.ledger import keys
from functions.settings import Settings
from schemas.request import REQUEST_ID_RE
from schemas.triggers import Schedule

RULE = "gs://data/churn/"


def settings(**rules) -> Settings:
    return Settings("p", "control", "events", "image", trigger_rules=rules or {RULE: {}})


def incident(**fields) -> bytes:
    body = {"incident_id": "0.mzaw5l8dr2hb", "policy_name": "churn drift", "state": "open"}
    body |= {"policy_user_labels": {"trainctl-model": "churn"}} | fields
    return json.dumps({"version": "1.2", "incident": body}).encode()


def test_a_tick_names_a_rule_of_the_settings():
    assert rt.read_message(json.dumps({"rule": RULE}).encode(), settings()) == rt.Tick(RULE)
    with pytest.raises(rt.Unreadable, match="not one of the trigger rules"):
        rt.read_message(b'{"rule": "gs://elsewhere/"}', settings())


def test_an_incident_in_monitorings_shape_names_its_model_by_the_policys_label():
    found = rt.read_message(incident(), settings())
    assert found == rt.Incident("0.mzaw5l8dr2hb", "churn drift", "open", "churn")
    underscored = rt.read_message(incident(policy_user_labels={"trainctl_model": "churn"}, state="CLOSED"), settings())
    assert underscored == rt.Incident("0.mzaw5l8dr2hb", "churn drift", "closed", "churn")
    assert rt.read_message(incident(policy_user_labels={"team": "x"}), settings()).model is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"hello": 1}', "neither"),
        (b'{"rule": 5}', "neither"),
        (b'{"incident": "open"}', "not an object"),
        (json.dumps({"incident": {"state": "open"}}).encode(), "incident_id"),
        (json.dumps({"incident": {"incident_id": "x" * 300, "state": "open"}}).encode(), "incident_id"),
        (json.dumps({"incident": {"incident_id": "i", "state": "firing"}}).encode(), "state"),
        (incident(policy_user_labels={"trainctl-model": "Not A Model!"}), "not a model id"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_what_is_neither_is_unreadable_saying_why(data, words):
    with pytest.raises(rt.Unreadable, match=words):
        rt.read_message(data, settings())


def test_a_ticks_id_and_key_derive_from_its_rule_and_scheduled_time():
    when = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)
    assert rt.schedule_request_id(RULE, when) == "sched.data-churn-20261127t0200z"
    assert keys.schedule_key(RULE, when) == "schedule:gs://data/churn/#2026-11-27T02:00Z"
    long_rule = f"gs://data/{'a' * 200}/"
    made = rt.schedule_request_id(long_rule, when)
    assert len(made) <= 128 and made.endswith("-20261127t0200z") and re.fullmatch(REQUEST_ID_RE, made)
    assert made != rt.schedule_request_id(f"gs://data/b{'a' * 199}/", when)  # cut ends keep a hash of the whole


def test_an_alerts_id_and_key_derive_from_its_model_and_incident():
    assert rt.alert_request_id("churn", "0.mzaw5l8dr2hb") == "alert.churn-0.mzaw5l8dr2hb"
    assert rt.alert_request_id("churn_v2", "ABC/12") == "alert.churn-v2-abc-12"
    assert keys.alert_key("churn", "0.mzaw5l8dr2hb") == "alert:churn#0.mzaw5l8dr2hb"
    made = rt.alert_request_id("m" * 63, "i" * 256)
    assert len(made) <= 128 and re.fullmatch(REQUEST_ID_RE, made)


def test_the_derived_prefixes_are_reserved_from_requesters():
    for request_id in ("sched.data-churn-20261127t0200z", "alert.churn-1", "gcs.x-1"):
        assert "reserved" in explicit_id_problem(request_id)
    assert explicit_id_problem("schedule-1") is None


def test_a_ticks_time_is_the_latest_fire_at_or_before_its_publish_time_and_a_missed_one_is_older_than_the_due():
    nightly = Schedule(cron="0 2 * * *", time_zone="Etc/UTC")
    published = datetime(2026, 11, 27, 2, 0, 3, tzinfo=UTC)
    assert rt.tick_time(nightly, published) == datetime(2026, 11, 27, 2, tzinfo=UTC)
    # Read a few seconds late, the tick is the one due; read two days later, a newer one is due.
    assert rt.due_time(nightly, published) == datetime(2026, 11, 26, 2, tzinfo=UTC)
    assert rt.due_time(nightly, datetime(2026, 11, 29, 3, tzinfo=UTC)) == datetime(2026, 11, 29, 2, tzinfo=UTC)
    # An every-minute tick read 30 s into the next minute is not missed (TICK_GRACE); 90 s in, it is.
    minutely = Schedule(cron="* * * * *")
    tick = rt.tick_time(minutely, datetime(2026, 11, 27, 2, 0, 1, tzinfo=UTC))
    assert rt.due_time(minutely, datetime(2026, 11, 27, 2, 1, 30, tzinfo=UTC)) == tick
    assert rt.due_time(minutely, datetime(2026, 11, 27, 2, 2, 31, tzinfo=UTC)) > tick


def test_the_rule_of_a_model_is_the_longest_prefix_whose_template_trains_it():
    models = {"gs://d/": "churn", "gs://d/churn/": "churn", "gs://d/churn/eu/": "other", "gs://e/": None}
    assert rt.rule_for_model(models, models.get, "churn") == "gs://d/churn/"
    assert rt.rule_for_model(models, models.get, "other") == "gs://d/churn/eu/"
    assert rt.rule_for_model(models, models.get, "nobody") is None


class Listing:
    def __init__(self, objects):
        self.objects = objects

    def listing(self, bucket, prefix):
        assert (bucket, prefix) == ("data", "churn/")
        return iter(self.objects)


def test_the_newest_marker_is_the_latest_updated_training_marker_then_the_highest_generation():
    objects = [
        ListedObject("churn/a/_SUCCESS", 0, 5, "", "2026-11-27T10:00:00.5Z"),
        ListedObject("churn/b/_SUCCESS", 7, 3, "", "2026-11-27T10:00:01Z"),
        ListedObject("churn/c/_SUCCESS", 0, 4, "", "2026-11-27T10:00:01Z"),
        ListedObject("churn/d/_SCORE", 0, 9, "", "2026-11-28T00:00:00Z"),  # a scoring marker trains nothing
        ListedObject("churn/e/part-0.csv", 9, 9, "", "2026-11-29T00:00:00Z"),
    ]
    assert rt.newest_marker(Listing(objects), settings(), RULE) == objects[2]
    assert rt.newest_marker(Listing(objects[3:]), settings(), RULE) is None
