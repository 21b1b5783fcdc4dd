"""The reconcile sweep's decisions, pure: which active requests a tick must look at, from the ledger's active index
(what the sweep last saw of each) and one listing of the deployment's jobs that wait or run (issue 25, point 9).

A tick lists those jobs (ListCustomJobs: the deployment's label, the waiting and running states, a page at a time)
instead of reading every job. A request whose job is listed in the state the sweep last saw it in, with nothing due
by the clock, has nothing new: neither its record nor its job is read. One whose job is listed in another state is
observed from the listing; one whose job is missing from the listing has ended, and only that job is read
(GetCustomJob). Requests without a job (claimed, queued) are looked at every tick, as before.

What the sweep last saw is kept in the request's active index entry (`active/<key hash>`) as custom metadata, which
the listing of the index returns: the job, its state, the request's state, and when to look again whatever the
listing shows —
  - a job waiting to start, when it will have waited max_pending (it is `stuck` then);
  - a running job of the built-in trainer, when its heartbeat will have stood still max_silence (a hang);
  - at the latest RELOOK_EVERY later, at a moment set by the key hash so that a few records come due each tick
    (1/72 of them a tick at the deployed 5 minutes): what no listing shows (a handler that died with events in
    the outbox while its job went back to the state last seen) is caught within that time, and delayed no longer.
A request that is not settled (stuck and being cancelled, events waiting in its outbox, ended) is seen as nothing,
and looked at every tick.

Vertex documents no maximum page size for ListCustomJobs. So that a small one cannot make the listing long, a region
with many jobs is listed in create-time windows side by side (`listing_windows`), each holding about WINDOW_JOBS of
the jobs last seen there.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.cloud.job_snapshot import JobSnapshot
from functions.ledger.record import Record
from functions.lifecycle.transitions import VERTEX_RUNNING, VERTEX_WAITING, _silence, writes_heartbeat

RELOOK_EVERY = timedelta(hours=6)
# Jobs last seen per listing window: 2 pages at 1,000 a page, 20 at 100; and at most so many windows a region.
WINDOW_JOBS = 2000
MAX_WINDOWS = 8
# A decision comes due only once its moment has passed (observe compares with `>`).
_PAST = timedelta(seconds=1)
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_VERSION = "1"  # of the metadata below: an entry of another version is no record of anything


def region_of(job_name: str) -> str:
    """projects/P/locations/L/customJobs/ID → L."""
    parts = job_name.split("/")
    return parts[3] if len(parts) > 3 and parts[2] == "locations" else ""


@dataclass(frozen=True)
class Seen:
    """What the sweep last saw of an active request that had nothing pending: its job, in which state, the request's
    own state, and when to look again even if the listing shows nothing new."""

    job: str
    job_state: str
    state: str
    look_again: datetime
    created: datetime | None = None  # the job's create_time, for the listing's windows

    def metadata(self) -> dict[str, str]:
        return {
            "seen": _VERSION,
            "job": self.job,
            "job_state": self.job_state,
            "state": self.state,
            "look_again": self.look_again.isoformat(),
            "created": self.created.isoformat() if self.created else "",
        }

    @classmethod
    def from_metadata(cls, metadata: dict[str, str]) -> Seen | None:
        """None for an entry without it (new, or last seen unsettled), of another version, or not understood."""
        if metadata.get("seen") != _VERSION:
            return None
        try:
            when = datetime.fromisoformat(metadata["look_again"])
            created = datetime.fromisoformat(metadata["created"]) if metadata.get("created") else None
            seen = cls(metadata["job"], metadata["job_state"], metadata["state"], when, created)
        except (KeyError, ValueError):
            return None
        aware = seen.look_again.tzinfo is not None and (created is None or created.tzinfo is not None)
        return seen if seen.job and aware else None


# What an entry's metadata holds once nothing is seen (Cloud Storage keeps keys; every value says "nothing").
NOTHING_SEEN = dict.fromkeys(Seen("", "", "", _EPOCH).metadata(), "")


@dataclass(frozen=True)
class Listing:
    """The deployment's jobs that waited or ran when the listing began (`taken`), by name, in the regions listed in
    full (a region whose listing failed is not one of them: its jobs are read one by one)."""

    jobs: dict[str, JobSnapshot] = field(default_factory=dict)
    regions: frozenset[str] = frozenset()
    taken: datetime = _EPOCH

    def covers(self, job_name: str) -> bool:
        return region_of(job_name) in self.regions

    def job_of(self, record: Record) -> JobSnapshot | None:
        """The record's job as listed, or None when it must be read: it is missing from the listing (it has ended),
        its region was not listed, or the record has since seen it in another state (the listing would be older)."""
        if record.job_name is None or not self.covers(record.job_name):
            return None
        listed = self.jobs.get(record.job_name)
        if listed is None or (record.updated > self.taken and record.job_state != listed.state):
            return None
        return listed


def unchanged(seen: Seen | None, listing: Listing, now: datetime) -> bool:
    """Whether the request can be left alone this tick: its job is listed in the state last seen, nothing is due."""
    if seen is None or now >= seen.look_again or not listing.covers(seen.job):
        return False
    listed = listing.jobs.get(seen.job)
    return listed is not None and listed.state == seen.job_state


Window = tuple[datetime | None, datetime | None]  # [since, before) of create_time; None: open


def listings(home: str, seen: list[Seen | None]) -> dict[str, list[Window]]:
    """What to list: the deployment's own region and every region a job last seen runs in (a ladder's other rungs),
    each in its create-time windows."""
    created: dict[str, list[datetime]] = {home: []}
    for last in seen:
        if last is not None and (region := region_of(last.job)):
            created.setdefault(region, []).extend([last.created] if last.created else [])
    return {region: listing_windows(times) for region, times in sorted(created.items())}


def listing_windows(created: list[datetime]) -> list[Window]:
    """Create-time windows that split one region's listing into parts of about WINDOW_JOBS of the jobs last seen
    (`created`), to be listed side by side. Boundaries are whole seconds, the first window is open below and the last
    open above, so that every job — one created since, one of unknown time — falls in exactly one of them."""
    parts = min(MAX_WINDOWS, len(created) // WINDOW_JOBS + 1)
    ordered = sorted(created)
    bounds = sorted({ordered[len(ordered) * i // parts].replace(microsecond=0) for i in range(1, parts)})
    edges: list[datetime | None] = [None, *bounds, None]
    return list(itertools.pairwise(edges))


def next_look(key_hash: str, now: datetime) -> datetime:
    """The first moment after `now` at which this request's turn comes round, once every RELOOK_EVERY: spread by
    the key hash over the period, so that a tick re-reads its share of records rather than all of them at once."""
    period = RELOOK_EVERY.total_seconds()
    phase = int(hashlib.sha256(key_hash.encode()).hexdigest()[:8], 16) / 0x1_0000_0000 * period
    wait = (phase - (now - _EPOCH).total_seconds()) % period
    return now + timedelta(seconds=wait or period)


def seen_after(
    record: Record,
    job: JobSnapshot,
    now: datetime,
    max_pending: int,
    max_silence: int | None,
    progress: dict[str, Any] | None,
) -> Seen | None:
    """What to remember of a request just observed at `now` (and saved), or None when it is not settled: it ended,
    its job is not the record's, it is stuck (its cancel is sent again each tick until it takes effect), or events
    wait in its outbox. `progress`: the heartbeat the observation read, if it read one."""
    settled = record.state in ("submitted", "running") and record.job_name == job.name
    if not settled or record.stuck or record.outbox:
        return None
    due = next_look(record.key_hash, now)
    if job.state in VERTEX_WAITING and job.start_time is None and record.state == "submitted":
        started_waiting = job.create_time or now
        due = min(due, started_waiting + timedelta(seconds=max_pending) + _PAST)
    if job.state in VERTEX_RUNNING and max_silence is not None and writes_heartbeat(record.request):
        silent = _silence(progress, now, job.start_time)
        last_heard = now - timedelta(seconds=silent) if silent is not None else now
        due = min(due, last_heard + timedelta(seconds=max_silence) + _PAST)
    return Seen(job.name, job.state, record.state, max(due, now), job.create_time)
