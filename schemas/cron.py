"""Unix-cron as Cloud Scheduler takes it (issue 42, schedules), and a schedule's fire times. Pure.

Cloud Scheduler's format (cloud.google.com/scheduler/docs/configuring/cron-job-schedules): five fields, minute (0-59),
hour (0-23), day of the month (1-31), month (1-12 or JAN-DEC), day of the week (0-6 or SUN-SAT, 7 also Sunday); `*`
stands for first-last, `a-b` is an inclusive range, a range or `*` followed by `/N` takes every Nth value of it, and a
list joins numbers and ranges with commas. Names are a month's or a day's first three letters in uppercase. `L` (the
last day of the month) is not supported, nor is the App Engine syntax ("every 5 minutes"). The day of the month and the
day of the week are an inclusive OR unless one of them is `*`.

What trainctl refuses beyond the page's grammar, each with a message naming the field: a range whose start is past its
end, a step of 0, a step after a single value (`5/15`), and a schedule that never fires (`0 0 31 2 *`).

Time zones and daylight saving time: the schedule is read on the wall clock of its IANA zone, as Cloud Scheduler runs
it ("Cloud Scheduler runs on wall clock time", the page's Time zone section). The page leaves the two odd cases as
"anomalies"; trainctl decides them so that each fire time has one instant: a wall-clock time that a spring-forward
skips never fires, and one that a fall-back repeats fires once, at its first occurrence (fold=0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

FIELDS = ("minute", "hour", "day of the month", "month", "day of the week")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {name: number for number, name in enumerate(_MONTHS, 1)},
    {name: number for number, name in enumerate(_DAYS)},
)
_ATOM = re.compile(r"^(?P<start>[0-9]+|[A-Za-z]+)(?:-(?P<end>[0-9]+|[A-Za-z]+))?$")
# How far back a fire time is looked for: a 29 February on a given weekday comes back within 28 years.
_SEARCH_DAYS = 366 * 29


class CronError(ValueError):
    """A cron expression Cloud Scheduler would refuse; the message names the field."""


@dataclass(frozen=True)
class Cron:
    """A parsed schedule: the values each field matches (day of the week 0-6, Sunday 0)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool  # the day of the month is `*`
    any_weekday: bool  # the day of the week is `*`

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_month, in_week = day.day in self.days, (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:  # one is `*`: the other alone decides (both `*`: every day)
            return in_month and in_week
        return in_month or in_week


def parse(expression: str) -> Cron:
    """The schedule of a unix-cron expression; CronError naming the field for one Cloud Scheduler would refuse."""
    if not isinstance(expression, str):
        raise CronError("a cron schedule is a string of five fields")
    parts = expression.split()
    if len(parts) != 5:
        raise CronError(
            f"a cron schedule has five fields (minute hour day-of-month month day-of-week), got {len(parts)}: "
            f"{expression!r}"
        )
    values = [_field(index, text) for index, text in enumerate(parts)]
    weekdays = frozenset(0 if day == 7 else day for day in values[4])
    cron = Cron(
        frozenset(values[0]), frozenset(values[1]), frozenset(values[2]), frozenset(values[3]), weekdays,
        parts[2] == "*", parts[4] == "*",
    )  # fmt: skip
    if not _ever_fires(cron):
        raise CronError(f"day of the month: {parts[2]!r} never falls in month {parts[3]!r}; the schedule never fires")
    return cron


def _field(index: int, text: str) -> set[int]:
    name = FIELDS[index]
    low, high = _BOUNDS[index]
    found: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{name}: an empty item in the list {text!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name}: the step in {item!r} must be a whole number of at least 1")
            step = int(step_text)
        if base == "*":
            start, end = low, (6 if index == 4 else high)
        else:
            match = _ATOM.match(base)
            if match is None:
                raise CronError(
                    f"{name}: {item!r} is not a number, a range a-b, a step */N or a-b/N, or a list of them"
                    + ("; Cloud Scheduler does not support L, ? or #" if re.search(r"[L?#]", item) else "")
                )
            start = _value(index, match["start"], item)
            end = _value(index, match["end"], item) if match["end"] else start
            if slash and not match["end"]:
                raise CronError(f"{name}: a step follows a range or *, not a single value: {item!r}")
            if start > end:
                raise CronError(f"{name}: the range {item!r} starts after it ends")
        found.update(range(start, end + 1, step))
    return found


def _value(index: int, text: str, item: str) -> int:
    name = FIELDS[index]
    low, high = _BOUNDS[index]
    if text.isdigit():
        number = int(text)
        if not low <= number <= high:
            shown = "0-6 (or 7 for Sunday)" if index == 4 else f"{low}-{high}"
            raise CronError(f"{name}: {number} in {item!r} is outside {shown}")
        return number
    names = _NAMES[index]
    if text in names:
        return names[text]
    if names:
        listed = "JAN to DEC" if index == 3 else "SUN to SAT"
        raise CronError(f"{name}: {text!r} in {item!r} is not a name Cloud Scheduler takes ({listed}, in uppercase)")
    unsupported = "; Cloud Scheduler does not support L (the last day)" if "L" in text.upper() else ""
    raise CronError(f"{name}: {item!r} must be numbers, {low}-{high}{unsupported}")


def _ever_fires(cron: Cron) -> bool:
    """Whether some day of a leap year matches (every month/day pair is in one; a weekday is in every month)."""
    if not cron.any_weekday and not cron.any_day:
        return True  # OR: some weekday of the months is always there
    if not cron.any_weekday:  # the day of the month is `*`: any month has every weekday
        return True
    lengths = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    return any(day <= lengths[month - 1] for month in cron.months for day in cron.days)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone a schedule is read in; CronError for a name that is not one."""
    if not isinstance(name, str) or name not in _zone_names():
        raise CronError(f"time_zone: {name!r} is not an IANA time zone name (such as Etc/UTC or Europe/Paris)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(f"time_zone: {name!r} is not an IANA time zone name") from None


_ZONES: set[str] = set()


def _zone_names() -> set[str]:
    if not _ZONES:
        _ZONES.update(available_timezones())
        _ZONES.add("UTC")
    return _ZONES


def latest_fire(cron: Cron | str, time_zone: str, moment: datetime) -> datetime | None:
    """The latest fire time at or before `moment` (aware), in UTC, on the wall clock of `time_zone` (see the module's
    note on daylight saving time); None when none is within the search (29 years)."""
    schedule = parse(cron) if isinstance(cron, str) else cron
    tz = zone(time_zone)
    local = moment.astimezone(tz)
    hours, minutes = sorted(schedule.hours, reverse=True), sorted(schedule.minutes, reverse=True)
    day = local.date()
    for back in range(_SEARCH_DAYS):
        if back:
            day -= timedelta(days=1)
        if not schedule.day_matches(day):
            continue
        for hour in hours:
            for minute in minutes:
                wall = datetime.combine(day, time(hour, minute), tzinfo=tz)  # fold=0: a repeated time's first
                instant = wall.astimezone(UTC)
                if instant.astimezone(tz).replace(tzinfo=None) != wall.replace(tzinfo=None):
                    continue  # a wall-clock time skipped by a spring-forward never happens
                if instant <= moment.astimezone(UTC):
                    return instant
    return None
