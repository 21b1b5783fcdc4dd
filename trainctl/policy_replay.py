"""`trainctl replay EVENTS --dry-run` with many recorded events (a day of markers, say): what the trigger rules'
policies would have started (issue 42, point 6). The events go through the real handlers in time order on the dry
run's in-memory stand-ins, with the controller's clock at each event's time; before each event, every coalescing
window that would have closed by then is started at its closing time (quiet_window after its last marker, or its
limit), as reconcile would start it — a deployed reconcile does so at its next tick, up to its period later.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cloudevents.http import CloudEvent

from functions.controller import Controller
from functions.intake.markers import Arrival

# What a start's outcome says of its run: one was started (or waits for quota to start).
STARTED = frozenset({"submitted", "queued", "waiting"})


@dataclass
class WindowStart:
    rule: str
    markers: tuple[str, ...]
    dataset_uri: str
    closed: datetime
    request_id: str
    outcome: str


@dataclass
class DayReport:
    """What each event and each window's close came to."""

    lines: list[str] = field(default_factory=list)
    markers: int = 0
    runs: int = 0
    rejected: int = 0
    windows: list[WindowStart] = field(default_factory=list)

    def marker(self, when: datetime, uri: str, outcome: str) -> None:
        if outcome == "ignored":
            return
        self.markers += 1
        self.runs += outcome in STARTED
        self.rejected += outcome == "rejected"
        self.lines.append(f"{when:%H:%M:%S}  {uri}  {outcome}")

    def window(self, start: WindowStart) -> None:
        self.windows.append(start)
        self.runs += start.outcome in STARTED
        self.rejected += start.outcome == "rejected"
        folded = len(start.markers)
        span = f"; first {start.markers[0]}, newest {start.markers[-1]}" if folded > 1 else ""
        self.lines.append(
            f"{start.closed:%H:%M:%S}  window of {start.rule} closed: {folded} marker{'s' * (folded != 1)} → one run "
            f"{start.request_id} on {start.dataset_uri} ({start.outcome}){span}"
        )

    def summary(self) -> str:
        coalesced = sum(len(w.markers) - 1 for w in self.windows)
        into = f"{coalesced} coalesced into {len(self.windows)} window{'s' * (len(self.windows) != 1)}"
        rejected = f", {self.rejected} rejected" if self.rejected else ""
        runs = f"{self.runs} run{'s' * (self.runs != 1)}"
        return f"{self.markers} marker{'s' * (self.markers != 1)} → {runs} ({into}{rejected})"


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The recorded events in `path`: a folder of .json files, a JSON array, JSON Lines, or one JSON document."""
    if path.is_dir():
        return [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]
    text = path.read_text()
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return document if isinstance(document, list) else [document]


def event_time(event: CloudEvent) -> datetime | None:
    try:
        return datetime.fromisoformat(str(event["time"]).replace("Z", "+00:00"))
    except (KeyError, ValueError, TypeError):
        return None


def replay_day(
    events: list[CloudEvent],
    ctl: Controller,
    now: list[datetime],
    handle: Callable[[CloudEvent, Controller], str],
    verbose: bool = False,
) -> DayReport:
    """Each event in time order at its own time (one without a time: at the replay's start), the windows closing
    between; `now` is the controller's clock. Log lines are dropped unless `verbose`."""
    report = DayReport()
    timed = [(event_time(e), i, e) for i, e in enumerate(events)]
    ordered = sorted(timed, key=lambda t: (t[0] or now[0], t[1]))
    for when, _, event in ordered:
        _close_windows(ctl, now, when, report, verbose)
        now[0] = when or now[0]
        with _quiet(verbose):
            outcome = handle(event, ctl)
        data = event.data if isinstance(event.data, dict) else {}
        uri = (
            f"gs://{data.get('bucket')}/{data.get('name')}#{data.get('generation')}" if "name" in data else event["id"]
        )
        report.marker(now[0], uri, outcome)
    _close_windows(ctl, now, None, report, verbose)
    return report


def _close_windows(
    ctl: Controller, now: list[datetime], until: datetime | None, report: DayReport, verbose: bool
) -> None:
    """Start the windows due by `until` (None: all), each at its closing time."""

    def arrive(arrival: Arrival) -> str:
        with _quiet(verbose):
            outcome = ctl.markers.arrive(arrival)
        folded = arrival.delivery.folded
        if folded is not None:
            report.window(
                WindowStart(folded.rule, folded.markers, folded.dataset_uri, now[0], arrival.request_id, outcome)
            )
        return outcome

    while (due := ctl.windows.records.first_due()) is not None and (until is None or due <= until):
        now[0] = max(now[0], due)
        with _quiet(verbose):
            summary = ctl.windows.close_due(arrive)
        if not summary.get("windows_started"):
            break  # nothing more would start (an error, logged)


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    if verbose:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield
