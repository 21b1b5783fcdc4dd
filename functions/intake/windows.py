"""Coalescing (issue 42): a rule whose policy sets `quiet_window` folds its training markers into one open window
(functions/ledger/window_records.py) instead of starting a request per marker; reconcile starts each window once it
closes — no marker for quiet_window, or window_limit after its first — as one request over its newest marker, whose
record's `coalesced` event names every marker folded in.

Exactly once: a marker lands in the rule's record by compare-and-swap (two at the same instant both land; a redelivery
finds itself there); a window is marked closed before its request starts, and dropped only after; the request keeps
its newest marker's own id and key, so a close repeated after a crash, or by two sweeps at once, is a duplicate in
the ledger (DESIGN.md §4) and starts nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions import logs
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.intake import triggers
from functions.intake.delivery import Delivery, Folded
from functions.intake.markers import Arrival
from functions.ledger import keys
from functions.ledger.window_records import (
    MAX_MARKERS,
    MAX_STARTED,
    FoldedMarker,
    StartedMarker,
    Window,
    WindowRecord,
    WindowRecords,
    record_name,
)
from functions.settings import Settings
from schemas.events import Trigger
from schemas.triggers import TriggerPolicy

# Compare-and-swaps tried before a contended record is left to the redelivery (or the next tick).
SWAPS = 8
# A rule's due windows are started only with this much of reconcile's deadline left (a start is a submission, as long
# as a record's observation: functions/lifecycle/observation.py MIN_OBSERVE_SECONDS).
START_SECONDS = 10.0
# Starts of one window that raised something other than a transient error, after which it is dropped (logged).
MAX_FAILURES = 3


# ---- the decisions, pure ------------------------------------------------------------------------------------


def folded_already(record: WindowRecord, uri: str) -> bool:
    """Whether this marker is in a window of the rule's, or in one started lately: its redelivery changes nothing."""
    return any(m.uri == uri for w in record.windows for m in w.markers) or any(s.uri == uri for s in record.started)


def fold_in(record: WindowRecord, marker: FoldedMarker, policy: TriggerPolicy, now: datetime) -> None:
    """Fold a new marker into the rule's open window. A window past its closing time (by the marker's event time), or
    full, takes no more: it is closed — reconcile starts it — and the marker opens the next one."""
    quiet, limit = policy.quiet_window, policy.window_limit
    if quiet is None or limit is None:
        raise ValueError(f"rule {record.rule} has no quiet window")
    open_window = record.windows[-1] if record.windows and record.windows[-1].closed is None else None
    if open_window is not None and (marker.time >= open_window.closes_at() or len(open_window.markers) >= MAX_MARKERS):
        open_window.closed = min(open_window.closes_at(), now)
        open_window = None
    if open_window is None:
        window = Window(id=marker.uri, markers=[marker], first=marker.time, last=marker.time, quiet_window=quiet,
                        limit=limit, coalesce=policy.coalesce)  # fmt: skip
        record.windows.append(window)
        return
    # The rule's policy as it is now: a changed quiet window applies to the open window from its next marker on.
    open_window.markers.append(marker)
    open_window.first, open_window.last = min(open_window.first, marker.time), max(open_window.last, marker.time)
    open_window.quiet_window, open_window.limit, open_window.coalesce = quiet, limit, policy.coalesce


def forget_started(record: WindowRecord, max_event_age: timedelta, now: datetime) -> None:
    """A started marker is remembered as long as a redelivery of it could still be handled (max_event_age after its
    upload), and only the newest MAX_STARTED of them."""
    kept = [s for s in record.started if s.time >= now - max_event_age]
    record.started = kept[-MAX_STARTED:]


def union_folder(rule: str, markers: list[FoldedMarker]) -> str | None:
    """The deepest folder holding every marker's folder, or None when that folder is not within the rule's prefix
    (or the markers lie in two buckets)."""
    folders = [triggers.dataset_folder(m.bucket, m.name).removesuffix("/").split("/") for m in markers]
    common: list[str] = []
    for segments in zip(*folders, strict=False):
        if len(set(segments)) > 1:
            break
        common.append(segments[0])
    union = "/".join(common) + "/"
    return union if len(common) >= 3 and union.startswith(rule) else None  # gs:, '', the bucket


def dataset_of(window: Window, rule: str) -> tuple[str, str | None]:
    """(what the window's request trains on, the folder to set on it instead of the newest marker's own: None)."""
    markers = window.oldest_first()
    newest = triggers.dataset_folder(markers[-1].bucket, markers[-1].name)
    if window.coalesce == "union" and len(markers) > 1:
        union = union_folder(rule, markers)
        if union is None:
            logs.warning("coalesce union: no folder within the rule holds every marker; the newest one's is used",
                         rule=rule, dataset=newest)  # fmt: skip
        elif union != newest:
            return union, union
    return newest, None


def window_arrival(window: Window, rule: str, now: datetime) -> Arrival:
    """The request a closed window starts: its newest marker's, with the marker's own request id and key, trained on
    the window's dataset, its delivery naming every marker folded in."""
    markers = window.oldest_first()
    newest = markers[-1]
    dataset_uri, instead = dataset_of(window, rule)
    trigger = Trigger(kind="gcs", bucket=newest.bucket, object=newest.name, generation=newest.generation)
    folded = Folded(rule, tuple(m.uri for m in markers), dataset_uri)
    delivery = Delivery(trigger, f"window:{window.id}", now, folded=folded)
    return Arrival(
        newest.bucket,
        newest.name,
        newest.generation,
        newest.size,
        rule,
        triggers.derive_request_id(newest.name, newest.generation),
        keys.marker_key(newest.bucket, newest.name, newest.generation),
        delivery,
        instead,
    )


# ---- the records ---------------------------------------------------------------------------------------------


@dataclass
class Windows:
    settings: Settings
    records: WindowRecords
    clock: Callable[[], datetime]

    def fold(self, a: Arrival, policy: TriggerPolicy) -> str:
        """A training marker under a coalescing rule (after its size and its team's folders are checked): into the
        rule's open window. 'coalesced' (acked) whether it was folded now or by an earlier delivery."""
        marker = FoldedMarker(bucket=a.bucket, name=a.name, generation=a.generation, size=a.size, time=a.delivery.time)
        name = record_name(a.rule)
        for _ in range(SWAPS):
            now = self.clock()
            found = self.records.read(name)
            record, generation = found or (WindowRecord(rule=a.rule), 0)
            if folded_already(record, marker.uri):
                logs.info("this marker is already in its rule's window; starts nothing", marker=marker.uri)
                return "coalesced"
            fold_in(record, marker, policy, now)
            forget_started(record, timedelta(seconds=self.settings.max_event_age), now)
            try:
                self.records.write(record, generation)
            except Conflict:
                continue  # another marker landed (or a window closed) meanwhile: fold into what is there now
            window = record.windows[-1]
            logs.info(f"folded into the window of rule {a.rule}", marker=marker.uri, window=window.id,
                      markers=len(window.markers), closes_at=window.closes_at().isoformat())  # fmt: skip
            return "coalesced"
        raise Transient(f"the window record of rule {a.rule} kept changing; the redelivery folds this marker in")

    def close_due(self, arrive: Callable[[Arrival], str]) -> dict[str, int]:
        """reconcile: start every window that has closed, each once, through `arrive` (Markers.arrive). A record that
        cannot be read or started is logged and counted in `errors`, and the sweep goes on; with too little of the
        deadline left, the rest are counted in `windows_deferred`, for the next tick."""
        now = self.clock()
        summary = {"windows_started": 0, "errors": 0}
        try:
            due = self.records.due(now)
        except Exception as exc:
            logs.error(f"reconcile could not list the coalescing windows: {type(exc).__name__}: {exc}")
            return {"windows_started": 0, "errors": 1}
        for name in due:
            if not deadline.allows(START_SECONDS):
                summary["windows_deferred"] = summary.get("windows_deferred", 0) + 1  # the next tick's
                continue
            try:
                summary["windows_started"] += self._close_record(name, now, arrive)
            except Exception as exc:  # one rule's record never stops the others'
                logs.error(f"reconcile could not close the windows of {name}: {type(exc).__name__}: {exc}",
                           window_record=name, transient=isinstance(exc, Transient))  # fmt: skip
                summary["errors"] += 1
        return summary

    def _close_record(self, name: str, now: datetime, arrive: Callable[[Arrival], str]) -> int:
        """Start the due windows of one rule's record, oldest first; how many were started."""
        started = 0
        while True:
            found = self.records.read(name)
            if found is None:
                return started
            record, generation = found
            window = next((w for w in record.windows if w.closes_at() <= now), None)
            if window is None:
                return started
            if record.rule not in self.settings.trigger_rules:
                logs.warning(f"the rule {record.rule} is gone from the trigger rules; its window starts nothing",
                             window=window.id, markers=len(window.markers))  # fmt: skip
                self._drop(name, window.id, now)
                continue
            if window.closed is None:
                # Closed first, in its own swap: a marker folded in meanwhile makes this fail, and is then in it.
                window.closed = window.closes_at()
                try:
                    generation = self.records.write(record, generation)
                except Conflict:
                    continue
            try:
                outcome = arrive(window_arrival(window, record.rule, now))
            except Transient:
                raise  # the next tick starts it again: the ledger makes a second start a duplicate
            except Exception as exc:
                self._failed(name, window.id, exc)
                raise
            logs.info(f"window of rule {record.rule} started: {outcome}", window=window.id,
                      markers=len(window.markers))  # fmt: skip
            self._drop(name, window.id, now)
            started += 1

    def _failed(self, name: str, window_id: str, exc: Exception) -> None:
        """A start that raised (a bug, or a record it cannot read): counted; a window that fails MAX_FAILURES times
        is dropped, logged, rather than tried every tick forever."""
        for _ in range(SWAPS):
            found = self.records.read(name)
            window = next((w for w in found[0].windows if w.id == window_id), None) if found else None
            if found is None or window is None:
                return
            record, generation = found
            window.failures += 1
            if window.failures >= MAX_FAILURES:
                logs.error(f"dropped the window {window_id} of rule {record.rule} after {window.failures} failed "
                           f"starts: {type(exc).__name__}: {exc}", window=window_id)  # fmt: skip
                record.windows = [w for w in record.windows if w.id != window_id]
            try:
                self.records.write(record, generation)
                return
            except Conflict:
                continue

    def _drop(self, name: str, window_id: str, now: datetime) -> None:
        """The window's request has started (or was refused): the window goes, its markers are remembered."""
        for _ in range(SWAPS):
            found = self.records.read(name)
            if found is None:
                return
            record, generation = found
            window = next((w for w in record.windows if w.id == window_id), None)
            if window is None:
                return  # another sweep dropped it
            record.windows = [w for w in record.windows if w.id != window_id]
            record.started += [StartedMarker(uri=m.uri, time=m.time) for m in window.oldest_first()]
            forget_started(record, timedelta(seconds=self.settings.max_event_age), now)
            try:
                self.records.write(record, generation)
                return
            except Conflict:
                continue
        raise Transient(f"could not drop the started window {window_id}; the next tick starts it again (a duplicate)")
