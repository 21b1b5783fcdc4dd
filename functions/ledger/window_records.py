"""The control bucket's record of each trigger rule's coalescing windows (issue 42, functions/intake/windows.py),
changed only by compare-and-swap (if_generation_match), so that two markers folded in at the same instant both land:

  windows/<rule hash>.json   WindowRecord: the rule's open window, the windows closed but not yet started, and the
                             markers of the windows started lately (a redelivery of one of them starts nothing)

Its custom metadata `due` is when its first window comes due ('' : none), so reconcile's one listing of `windows/`
finds the records with something to start without reading the others.
"""

from __future__ import annotations

import contextlib
import hashlib
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.cloud.ports import Storage

WINDOWS_PREFIX = "windows/"
# A window holding this many markers takes no more: it is closed, the next marker opens another, and reconcile starts
# the full one at its next tick (its record stays a few hundred kilobytes).
MAX_MARKERS = 1000
# The markers of started windows remembered (each for max_event_age after its upload, the longest a redelivery of it
# is still handled): past this many, the oldest are forgotten, and a redelivery of one would open a window of its own.
MAX_STARTED = 2000


class FoldedMarker(BaseModel):
    """A training marker folded into a window: the object, its size (0: empty) and its event's time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str
    name: str
    generation: str
    size: int
    time: datetime

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}#{self.generation}"


class Window(BaseModel):
    """One coalescing window: its markers in the order they were folded in, and the policy they were folded under."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="The first marker folded in (gs://bucket/object#generation).")
    markers: list[FoldedMarker]
    first: datetime = Field(description="The earliest event time of its markers.")
    last: datetime = Field(description="The latest event time of its markers.")
    quiet_window: int = Field(description="Seconds without a marker after which it closes (the rule's, when folded).")
    limit: int = Field(description="Seconds after its first marker at which it closes however busy (window_limit).")
    coalesce: Literal["newest", "union"] = "newest"
    closed: datetime | None = Field(None, description="When it stopped taking markers; reconcile starts it.")
    failures: int = Field(0, description="Starts that raised something other than a transient error.")

    def closes_at(self) -> datetime:
        """When it stops taking markers: `closed`, else quiet_window after its last marker or `limit` after its first,
        whichever comes first."""
        if self.closed is not None:
            return self.closed
        return min(self.last + timedelta(seconds=self.quiet_window), self.first + timedelta(seconds=self.limit))

    def oldest_first(self) -> list[FoldedMarker]:
        """Its markers by event time, then generation (events' times may share a second; a marker's generation is its
        upload's microsecond on Cloud Storage), then the order folded in: the last is the newest."""
        order = {marker.uri: index for index, marker in enumerate(self.markers)}

        def age(marker: FoldedMarker) -> tuple[datetime, int, int]:
            generation = int(marker.generation) if marker.generation.isdigit() and len(marker.generation) <= 20 else 0
            return marker.time, generation, order[marker.uri]

        return sorted(self.markers, key=age)


class StartedMarker(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    time: datetime


class WindowRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str
    windows: list[Window] = Field(default_factory=list, description="Oldest first; only the last may be open.")
    started: list[StartedMarker] = Field(default_factory=list, description="Markers of started windows, oldest first.")

    def due(self) -> datetime | None:
        return min((window.closes_at() for window in self.windows), default=None)


def record_name(rule: str) -> str:
    return f"{WINDOWS_PREFIX}{hashlib.sha256(rule.encode()).hexdigest()[:40]}.json"


class WindowRecords:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    def read(self, name: str) -> tuple[WindowRecord, int] | None:
        """The record at `name` (record_name(rule)) and its generation; None when it does not exist yet."""
        found = self._gcs.read(self.bucket, name)
        if found is None:
            return None
        return WindowRecord.model_validate_json(found[0]), found[1]

    def write(self, record: WindowRecord, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`; 0 creates it); the new generation."""
        due = record.due()
        return self._gcs.write(
            self.bucket,
            record_name(record.rule),
            record.model_dump_json(exclude_none=True),
            generation,
            custom_metadata={"due": due.isoformat() if due else ""},
        )

    def first_due(self) -> datetime | None:
        """When the first window of any rule comes due (trainctl replay's clock moves there), None when none is open."""
        times = []
        for _, metadata in self._gcs.metadata_under(self.bucket, WINDOWS_PREFIX):
            due = metadata.get("due", "")
            with contextlib.suppress(ValueError):
                if due:
                    times.append(datetime.fromisoformat(due))
        return min(times, default=None)

    def due(self, now: datetime) -> list[str]:
        """The names of the records whose first window is due at `now` (from one listing of their metadata); a record
        whose `due` cannot be read is listed too, so that reading it says what is wrong."""
        names = []
        for name, metadata in self._gcs.metadata_under(self.bucket, WINDOWS_PREFIX):
            due = metadata.get("due", "")
            try:
                if not due or datetime.fromisoformat(due) > now:
                    continue
            except (ValueError, TypeError):  # not a time, or one without its zone
                pass
            names.append(name)
        return names
