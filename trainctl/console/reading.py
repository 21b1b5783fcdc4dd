"""What the console reads, and only reads: the ledger (active requests, one request's record, the history index), the
quota pools, the teams' budget records, the run's own metrics files (bounded: a job wrote them) and the Model Registry
with the models' records, through the same adapters as the controller and the other commands. Nothing here writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.capacity.quota_pool import Pool, QuotaPools
from functions.cloud.gcs import Gcs, StorageError, TooLarge
from functions.ledger.budget_records import BudgetRecords, MonthSpend, month_of
from functions.ledger.history import METADATA_KEY, MODEL_DECISION_KEY, TRIGGER_POLICY_KEY, Outcome
from functions.ledger.keys import id_namespace
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from functions.settings import Settings

# The most active requests a page reads records of (each is one object read); the rest are counted, not shown.
MAX_ACTIVE_SHOWN = 200
# The history listing of one window is kept this long, so paging through it lists it once, not once a page.
OUTCOMES_TTL_SECONDS = 30.0
# metrics.json a job wrote: the same bound as `trainctl curve` (trainctl/curve.py).
MAX_METRICS_BYTES = 64 * 1024
# The history's days listed at once (each day is a listing of its own).
LISTING_THREADS = 8
# A request's outcome is looked for on at most this many days back from its record's last change.
MAX_DAYS_LOOKED_BACK = 3


@dataclass
class Active:
    records: list[Record]  # at most MAX_ACTIVE_SHOWN, newest first
    total: int  # every active entry


@dataclass(frozen=True)
class History:
    since: datetime
    outcomes: list[Outcome]  # finished requests
    decisions: list[Outcome]  # model decisions (promoted, held, deployed, rolled back)
    coalesced: list[Outcome]  # the trigger policies' own filings


@dataclass
class Sources:
    settings: Settings
    gcs: Gcs
    ledger: Ledger
    pools: QuotaPools
    quota_limit: Callable[[str, str], int | None] | None = None  # (metric, region) → the project's limit
    log_paths: Callable[[str], dict[str, str]] | None = None  # a job's node logs (the local stack only)
    _histories: dict[datetime, tuple[float, History]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of_settings(cls, settings: Settings, log_paths: Callable[[str], dict[str, str]] | None = None) -> Sources:
        from functions.cloud.quotas import GpuQuotas

        gcs = Gcs(settings.project)
        quotas = GpuQuotas(settings.project, settings.quotas_endpoint)
        return cls(
            settings,
            gcs,
            Ledger(gcs, settings.control_bucket),
            QuotaPools(gcs, settings.control_bucket),
            quota_limit=quotas.limit,
            log_paths=log_paths,
        )

    # ---- now -----------------------------------------------------------------------------------------------

    def active(self, limit: int = MAX_ACTIVE_SHOWN) -> Active:
        """The active requests' records, the newest entries first, at most `limit` read."""
        hashes = self.ledger.active()
        records = [found[0] for khash in hashes[:limit] if (found := self.ledger.read(khash))]
        records.sort(key=lambda r: r.updated, reverse=True)
        return Active(records, len(hashes))

    def pool_states(self) -> dict[str, Pool]:
        return {name: self.pools.state(name) for name in self.pools.names()}

    def limit(self, metric: str, region: str) -> int | None:
        if self.quota_limit is None:
            return None
        try:
            return self.quota_limit(metric, region)
        except Exception:  # the page shows the queue without the limit rather than fail
            return None

    def month_spend(self, team: str, now: datetime) -> MonthSpend:
        """The team's budget record for this month, as written (a month never written reads empty: seeding it would
        read the month's whole history on every page load)."""
        return BudgetRecords(self.gcs, self.settings.control_bucket).figures(team, month_of(now))

    # ---- a request -----------------------------------------------------------------------------------------

    def record(self, request_id: str, team: str | None) -> Record | None:
        teams = self.settings.teams
        if team is not None and (teams is None or team not in teams.teams):
            return None  # not one of this deployment's teams: no namespace to look in
        namespace = id_namespace(team, teams.default_team if teams else None) if team else None
        found = self.ledger.find_by_request_id(request_id, namespace)
        return found[0] if found else None

    def run_files(self, record: Record) -> tuple[bytes | None, bytes | None, str | None]:
        """The run's metrics.jsonl and metrics.json, bounded as `trainctl curve` reads them, and why they could not
        be read (None when they were, or are absent)."""
        from trainctl.curve import read_run_metrics

        try:
            return (*read_run_metrics(self.gcs, record.artifacts.model_dir), None)
        except TooLarge as exc:
            return None, None, f"{exc.uri} is larger than {exc.limit // 1024:,} KiB: not shown"
        except (StorageError, ValueError) as exc:
            return None, None, f"cannot be read: {exc}"

    def final_outcome(self, record: Record) -> Outcome | None:
        """What the history index filed when the request ended (its job's start and end as Vertex reported them):
        `history/<day>/<key hash>`, on the day its final event happened, between its creation and its record's last
        change (a few reads at most; None for a request still active)."""
        from functions.ledger.history import MAX_OUTCOME_BYTES
        from functions.ledger.requests import HISTORY_PREFIX

        if not record.final:
            return None
        day, first = record.updated.astimezone(UTC).date(), record.created.astimezone(UTC).date()
        for _ in range(MAX_DAYS_LOOKED_BACK):
            try:
                found = self.gcs.read(
                    self.settings.control_bucket,
                    f"{HISTORY_PREFIX}{day:%Y-%m-%d}/{record.key_hash}",
                    max_bytes=MAX_OUTCOME_BYTES,
                )
                if found is not None:
                    return Outcome.model_validate_json(found[0])
            except (TooLarge, StorageError, ValueError):
                return None
            if day <= first:
                return None
            day -= timedelta(days=1)
        return None

    def node_logs(self, job_name: str | None) -> dict[str, str]:
        if job_name is None or self.log_paths is None:
            return {}
        try:
            return self.log_paths(job_name)
        except Exception:  # the stack stopped, or never ran the job: no paths to show
            return {}

    # ---- history -------------------------------------------------------------------------------------------

    def history(self, since: datetime) -> History:
        """The history index from `since`: finished requests, model decisions and the trigger policies' filings, from
        one listing, kept OUTCOMES_TTL_SECONDS for the same window start (rounded down to the minute), so paging
        through a window lists it once."""
        start = since.astimezone(UTC).replace(second=0, microsecond=0)
        with self._lock:
            cached = self._histories.get(start)
            if cached and time.monotonic() - cached[0] < OUTCOMES_TTL_SECONDS:
                return cached[1]
        keys = (METADATA_KEY, MODEL_DECISION_KEY, TRIGGER_POLICY_KEY)
        # The index is filed by day: the window's days are listed side by side (and tomorrow's, for a clock ahead).
        first, last = start.date(), datetime.now(UTC).date() + timedelta(days=1)
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        with ThreadPoolExecutor(min(LISTING_THREADS, len(days)), thread_name_prefix="console-history") as pool:
            listed = list(pool.map(lambda day: self.ledger.outcomes_by_key(start, keys, day), days))
        history = History(start, *([o for found in listed for o in found[key]] for key in keys))
        with self._lock:
            now = time.monotonic()
            self._histories = {k: v for k, v in self._histories.items() if now - v[0] < OUTCOMES_TTL_SECONDS}
            self._histories[start] = (now, history)
        return history

    def history_if_kept(self, since: datetime) -> History | None:
        """The listing `history` keeps for this window start, if it still does."""
        with self._lock:
            cached = self._histories.get(since)
        return cached[1] if cached and time.monotonic() - cached[0] < OUTCOMES_TTL_SECONDS else None

    # ---- models --------------------------------------------------------------------------------------------

    def models(self) -> Any:
        """trainctl/models.py's Models over this deployment (the registry, the models' records)."""
        from functions.cloud.registry import ModelRegistry
        from functions.ledger.model_records import ModelCharters, ModelLedger
        from trainctl.models import Models

        bucket = self.settings.control_bucket
        registry = ModelRegistry(self.settings.project, self.settings.region, self.settings.vertex_endpoint)
        return Models(self.settings, registry, ModelLedger(self.gcs, bucket), self.gcs, ModelCharters(self.gcs, bucket))
