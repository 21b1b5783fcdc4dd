"""schemas/cron.py: unix-cron as Cloud Scheduler takes it
(cloud.google.com/scheduler/docs/configuring/cron-job-schedules) and a schedule's latest fire time in its time
zone, daylight saving time included (issue 42, schedules)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from schemas import cron
from schemas.triggers import Schedule, TriggerPolicy


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "minutes", "hours", "days", "months", "weekdays"),
    [
        ("* * * * *", range(60), range(24), range(1, 32), range(1, 13), range(7)),
        ("0 2 * * *", [0], [2], range(1, 32), range(1, 13), range(7)),
        ("*/15 0-23/6 1,15 JAN-MAR MON-FRI", [0, 15, 30, 45], [0, 6, 12, 18], [1, 15], [1, 2, 3], [1, 2, 3, 4, 5]),
        ("5,10-12 * * DEC 7", [5, 10, 11, 12], range(24), range(1, 32), [12], [0]),  # 7 is Sunday
        ("0 0 * * 0,7", [0], [0], range(1, 32), range(1, 13), [0]),
        ("0   9  *  * SAT-SAT", [0], [9], range(1, 32), range(1, 13), [6]),
    ],
)
def test_the_fields_cloud_scheduler_takes(expression, minutes, hours, days, months, weekdays):
    parsed = cron.parse(expression)
    assert parsed.minutes == frozenset(minutes)
    assert parsed.hours == frozenset(hours)
    assert parsed.days == frozenset(days)
    assert parsed.months == frozenset(months)
    assert parsed.weekdays == frozenset(weekdays)


@pytest.mark.parametrize(
    ("expression", "field", "words"),
    [
        ("* * * *", "five fields", "got 4"),
        ("* * * * * *", "five fields", "got 6"),
        ("every 5 minutes", "five fields", "got 3"),
        ("60 * * * *", "minute", "outside 0-59"),
        ("* 24 * * *", "hour", "outside 0-23"),
        ("* * 0 * *", "day of the month", "outside 1-31"),
        ("* * * 13 *", "month", "outside 1-12"),
        ("* * * * 8", "day of the week", "outside 0-6"),
        ("0 0 L * *", "day of the month", "does not support L"),
        ("0 0 * * 5L", "day of the week", "does not support L"),
        ("0 0 ? * *", "day of the month", "does not support"),
        ("0 0 * * mon", "day of the week", "uppercase"),
        ("0 0 * JANUARY *", "month", "JAN to DEC"),
        ("0 0 * * 1#2", "day of the week", "does not support"),
        ("5-1 * * * *", "minute", "starts after it ends"),
        ("*/0 * * * *", "minute", "at least 1"),
        ("5/15 * * * *", "minute", "not a single value"),
        ("1,,2 * * * *", "minute", "empty item"),
        ("0 0 31 2 *", "day of the month", "never fires"),
        ("0 0 30,31 FEB *", "day of the month", "never fires"),
    ],
)
def test_what_cloud_scheduler_refuses_is_refused_naming_the_field(expression, field, words):
    with pytest.raises(cron.CronError) as refused:
        cron.parse(expression)
    assert field in str(refused.value) and words in str(refused.value)


def test_a_day_of_the_month_and_of_the_week_are_an_or_unless_one_is_a_star():
    # "0 0 1 * SAT": the 1st of every month and every Saturday (the page's own example).
    both = cron.parse("0 0 1 * SAT")
    assert cron.latest_fire(both, "Etc/UTC", at(2026, 11, 27, 12)) == at(2026, 11, 21)  # a Saturday, not the 1st
    assert cron.latest_fire(both, "Etc/UTC", at(2026, 11, 2, 12)) == at(2026, 11, 1)  # a Sunday, the 1st
    # "0 0 1 * *": only the 1st.
    assert cron.latest_fire("0 0 1 * *", "Etc/UTC", at(2026, 11, 27)) == at(2026, 11, 1)
    # "0 0 * * SAT": only Saturdays.
    assert cron.latest_fire("0 0 * * SAT", "Etc/UTC", at(2026, 11, 27)) == at(2026, 11, 21)
    # 31 only in months that have it; the 30th of February never (refused above), the 29th in leap years.
    assert cron.latest_fire("0 0 31 * *", "Etc/UTC", at(2026, 11, 27)) == at(2026, 10, 31)
    assert cron.latest_fire("0 0 29 2 *", "Etc/UTC", at(2026, 11, 27)) == at(2024, 2, 29)


@pytest.mark.parametrize(
    ("expression", "moment", "expected"),
    [
        ("* * * * *", at(2026, 11, 27, 10, 30, 59), at(2026, 11, 27, 10, 30)),
        ("* * * * *", at(2026, 11, 27, 10, 30), at(2026, 11, 27, 10, 30)),  # at or before: the moment itself
        ("0 2 * * *", at(2026, 11, 27, 1, 59), at(2026, 11, 26, 2)),
        ("0 2 * * *", at(2026, 11, 27, 2, 0, 1), at(2026, 11, 27, 2)),
        ("*/30 * * * 1-5", at(2026, 11, 28, 12), at(2026, 11, 27, 23, 30)),  # Saturday noon: Friday's last
        ("45 23 * * 6", at(2026, 11, 27), at(2026, 11, 21, 23, 45)),
        ("0 0 1 1 *", at(2026, 11, 27), at(2026, 1, 1)),
    ],
)
def test_the_latest_fire_time_at_or_before_a_moment(expression, moment, expected):
    assert cron.latest_fire(expression, "Etc/UTC", moment) == expected


def test_a_schedule_is_read_on_its_time_zones_wall_clock():
    # 02:00 in Paris is 01:00 UTC in winter (CET) and 00:00 UTC in summer (CEST).
    assert cron.latest_fire("0 2 * * *", "Europe/Paris", at(2026, 1, 15, 12)) == at(2026, 1, 15, 1)
    assert cron.latest_fire("0 2 * * *", "Europe/Paris", at(2026, 7, 15, 12)) == at(2026, 7, 15, 0)
    # 00:30 UTC on 15 July is 02:30 in Paris: today's 02:00 fire is at 00:00 UTC.
    assert cron.latest_fire("0 2 * * *", "Europe/Paris", at(2026, 7, 15, 0, 30)) == at(2026, 7, 15, 0)
    assert cron.latest_fire("0 9 * * *", "America/New_York", at(2026, 7, 15, 14)) == at(2026, 7, 15, 13)


def test_a_wall_clock_time_a_spring_forward_skips_never_fires():
    # Paris springs forward on 29 March 2026 at 02:00 → 03:00: 02:30 does not exist that day.
    assert cron.latest_fire("30 2 * * *", "Europe/Paris", at(2026, 3, 29, 12)) == at(2026, 3, 28, 1, 30)
    # The next day it fires again, at 02:30 CEST.
    assert cron.latest_fire("30 2 * * *", "Europe/Paris", at(2026, 3, 30, 12)) == at(2026, 3, 30, 0, 30)


def test_a_wall_clock_time_a_fall_back_repeats_fires_once_at_its_first_occurrence():
    # Paris falls back on 25 October 2026 at 03:00 CEST → 02:00 CET: 02:30 happens at 00:30 and at 01:30 UTC.
    first = at(2026, 10, 25, 0, 30)
    assert cron.latest_fire("30 2 * * *", "Europe/Paris", at(2026, 10, 25, 1, 45)) == first
    assert cron.latest_fire("30 2 * * *", "Europe/Paris", at(2026, 10, 25, 12)) == first
    # Every-minute schedules see the repeated hour's minutes once each, at their first occurrence.
    assert cron.latest_fire("15 * * * *", "Europe/Paris", at(2026, 10, 25, 1, 20)) == at(2026, 10, 25, 0, 15)


def test_a_moment_in_any_zone_is_compared_as_an_instant():
    paris = datetime(2026, 1, 15, 2, 30, tzinfo=cron.zone("Europe/Paris"))
    assert cron.latest_fire("0 * * * *", "Etc/UTC", paris) == at(2026, 1, 15, 1)


def test_a_time_zone_must_be_an_iana_name():
    assert str(cron.zone("Europe/Paris")) == "Europe/Paris"
    for bad in ("Mars/Olympus", "CEST+2", "", "../../etc/passwd"):
        with pytest.raises(cron.CronError, match="time_zone"):
            cron.zone(bad)


def test_the_policy_schema_refuses_a_bad_cron_or_zone_naming_the_field():
    assert Schedule(cron="0 2 * * MON-FRI", time_zone="Europe/Paris").catch_up == "latest"
    with pytest.raises(ValidationError) as bad_cron:
        TriggerPolicy.model_validate({"schedule": {"cron": "0 25 * * *"}})
    assert "hour" in str(bad_cron.value) and "outside 0-23" in str(bad_cron.value)
    with pytest.raises(ValidationError) as bad_zone:
        TriggerPolicy.model_validate({"schedule": {"cron": "0 2 * * *", "time_zone": "Europe/Atlantis"}})
    assert "time_zone" in str(bad_zone.value)
