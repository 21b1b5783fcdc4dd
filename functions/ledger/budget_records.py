"""Each team's spend against its monthly budget (issue 40, points 1 and 2): one small object per team and month in the
control bucket, changed only by compare-and-swap (as the GPU quota pool, functions/capacity/quota_pool.py), so that
deliveries at once never together reserve more than the budget, and what a request spent cannot be dropped.

  budgets/<team>/<YYYY-MM>.json   {"reserved": {key hash: {"usd": worst case, "at": time, "attempt": n}},
                                   "spent": {key hash: {"usd": what it ran, "at": time}}, "spent_before": usd}

A request counts in the month it was accepted in (its record's `budget_month`): its worst case is reserved before its
claim (functions/capacity/budgets.py decides whether it fits), and replaced by what it spent when its final event is
published (`settle`, from the outbox: a failed write keeps the event in the outbox, so it is tried again). Keyed by
the request's key hash, so a redelivery or a second publication never counts it twice. `tidy` (reconcile) settles or
drops what a handler that died left, and folds the entries of requests retired long ago into `spent_before`, so the
object holds only what is recent.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions import logs
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.ports import Storage
from functions.ledger.record import Record

BUDGETS_PREFIX = "budgets/"


def month_of(time_: datetime) -> str:
    """The calendar month (UTC) a budget counts in, YYYY-MM."""
    return f"{time_.astimezone(UTC):%Y-%m}"


@dataclass
class Held:
    """One request's figure in a month: its reservation (its worst case for `attempt` on) or what it spent."""

    usd: float
    at: datetime
    attempt: int = 1

    def dump(self) -> dict[str, Any]:
        return {"usd": round(self.usd, 6), "at": self.at.isoformat(), "attempt": self.attempt}

    @classmethod
    def load(cls, data: dict[str, Any]) -> Held:
        return cls(float(data["usd"]), datetime.fromisoformat(data["at"]), int(data.get("attempt", 1)))


@dataclass(frozen=True)
class IdleCharge:
    seconds: float
    usd: float


@dataclass
class MonthSpend:
    """A team's month: what its active requests may still spend at worst, and what its ended ones spent."""

    reserved: dict[str, Held] = field(default_factory=dict)
    spent: dict[str, Held] = field(default_factory=dict)
    spent_before: float = 0.0  # requests retired long ago, folded
    # The idle time of the team's warm pools (issue 43): per pool life (`<pool id>#<n>`), its idle seconds and what
    # they cost so far, written over by reconcile as they grow; never folded (a pool's life is one entry).
    pool_idle: dict[str, IdleCharge] = field(default_factory=dict)

    def spent_usd(self) -> float:
        return self.spent_before + sum(held.usd for held in self.spent.values()) + self.idle_usd()

    def idle_usd(self) -> float:
        return sum(charge.usd for charge in self.pool_idle.values())

    def idle_seconds(self) -> float:
        return sum(charge.seconds for charge in self.pool_idle.values())

    def charge_idle(self, pool_life: str, seconds: float, usd: float) -> bool:
        """A warm pool's idle time so far in this life; whether anything changed."""
        charge = IdleCharge(round(seconds, 3), round(usd, 6))
        if self.pool_idle.get(pool_life) == charge:
            return False
        self.pool_idle[pool_life] = charge
        return True

    def reserved_usd(self, but: str | None = None) -> float:
        """The worst case of the active requests, `but` one (the request being checked)."""
        return sum(held.usd for khash, held in self.reserved.items() if khash != but)

    def settle(self, khash: str, usd: float, now: datetime) -> bool:
        """The request ended having spent `usd`: its reservation becomes that; whether anything changed."""
        done = self.spent.get(khash)
        if khash not in self.reserved and done is not None and done.usd == usd:
            return False
        self.reserved.pop(khash, None)
        self.spent[khash] = Held(usd, done.at if done else now)
        return True

    def dump(self) -> str:
        return json.dumps(
            {
                "reserved": {k: v.dump() for k, v in self.reserved.items()},
                "spent": {k: v.dump() for k, v in self.spent.items()},
                "spent_before": round(self.spent_before, 6),
                **({"pool_idle": {k: vars(v) for k, v in self.pool_idle.items()}} if self.pool_idle else {}),
            },
            sort_keys=True,
        )

    @classmethod
    def load(cls, raw: bytes) -> MonthSpend:
        data = json.loads(raw)
        return cls(
            {k: Held.load(v) for k, v in data.get("reserved", {}).items()},
            {k: Held.load(v) for k, v in data.get("spent", {}).items()},
            float(data.get("spent_before", 0.0)),
            {k: IdleCharge(float(v["seconds"]), float(v["usd"])) for k, v in data.get("pool_idle", {}).items()},
        )


# What a month holds before trainctl kept it: filled from the history and the active records (the rollout month).
Seed = Callable[[str, str], MonthSpend]


class BudgetRecords:
    def __init__(self, gcs: Storage, bucket: str, seed: Seed | None = None, window: timedelta = timedelta(minutes=10)):
        self._gcs = gcs
        self.bucket = bucket
        self._seed = seed
        # Longer than a handler lives (the function's timeout) and a claim is held (the lease): what a handler
        # started is done or dead by then.
        self.window = window

    @staticmethod
    def name(team: str, month: str) -> str:
        return f"{BUDGETS_PREFIX}{team}/{month}.json"

    def read(self, team: str, month: str, seeded: bool = True) -> tuple[MonthSpend, int] | None:
        """The month's figures and generation (0: not written yet, seeded when `seeded`); None when it was never
        written and is not to be seeded."""
        found = self._gcs.read(self.bucket, self.name(team, month))
        if found is not None:
            return MonthSpend.load(found[0]), found[1]
        if not seeded:
            return None
        return (self._seed(team, month) if self._seed else MonthSpend()), 0

    def figures(self, team: str, month: str) -> MonthSpend:
        """The month as it stands (as seeded, when it was never written)."""
        found = self.read(team, month)
        return found[0] if found else MonthSpend()

    def change(self, team: str, month: str, change: Callable[[MonthSpend], bool], seeded: bool = True) -> MonthSpend:
        """Apply `change(state) -> changed` to the month by compare-and-swap, again on a conflict; the state as
        written (or as read, when nothing changed)."""
        while True:
            found = self.read(team, month, seeded)
            if found is None:
                return MonthSpend()
            state, generation = found
            if not change(state):
                return state
            try:
                self._gcs.write(self.bucket, self.name(team, month), state.dump(), generation)
                return state
            except Conflict:
                if not deadline.allows(1.0):
                    raise Transient(f"team {team}'s budget record for {month} kept changing") from None
                time.sleep(random.uniform(0.02, 0.2))

    def settle(self, record: Record, usd: float, now: datetime) -> None:
        """The request ended having spent `usd`: counted in its month as that, never again as its worst case. A
        request accepted before its team's month was kept here (no budget_month) is settled only where the month's
        record holds its reservation (the rollout's seed); otherwise the history counts it when the month is seeded.
        Raises (Transient) when the record cannot be written, so the caller's final event is tried again."""
        if record.team is None:
            return
        month = record.budget_month or month_of(record.created)
        legacy = record.budget_month is None

        def change(state: MonthSpend) -> bool:
            if legacy and record.key_hash not in state.reserved:
                return False
            return state.settle(record.key_hash, usd, now)

        self.change(record.team, month, change, seeded=not legacy)

    def months(self, since: str) -> list[tuple[str, str]]:
        """(team, month) of every month record from `since` (YYYY-MM) on."""
        found = []
        for name in self._gcs.names(self.bucket, BUDGETS_PREFIX):
            team, _, month = name.removeprefix(BUDGETS_PREFIX).removesuffix(".json").partition("/")
            if month >= since:
                found.append((team, month))
        return found

    def tidy(
        self,
        active: Callable[[], set[str]],
        record_of: Callable[[str], Record | None],
        now: datetime,
    ) -> int:
        """reconcile's care of this month's and last month's records (requests end within weeks, a claim within
        the window); how many entries changed. A reservation whose request is no longer active is settled when its
        record is final (a handler that died between publishing the end and settling it; the final event's spend,
        else its reservation), dropped when no record was created within `window` of it (the delivery was refused,
        or its handler died before its claim), and kept while its record is being claimed. Spent entries of
        requests retired longer than `window` ago are folded into `spent_before`: nothing can settle them again."""
        last_month = month_of(now.astimezone(UTC).replace(day=1) - timedelta(days=1))
        changed = 0
        for team, month in self.months(last_month):
            count = 0

            def change(state: MonthSpend) -> bool:
                nonlocal count
                count = 0
                now_active = active()
                for khash, held in list(state.reserved.items()):
                    if khash in now_active:
                        continue
                    record = record_of(khash)
                    if record is None and now - held.at > self.window:
                        del state.reserved[khash]
                    elif record is not None and record.final:
                        spent = final_spend(record)
                        if spent is None:
                            logs.warning(
                                f"{record.request_id} ended with no spend to settle; its reservation counts as spent",
                                key_hash=khash,
                            )
                        state.settle(khash, held.usd if spent is None else spent, now)
                    else:
                        continue
                    count += 1
                for khash, held in list(state.spent.items()):
                    if khash not in now_active and now - held.at > self.window:
                        state.spent_before += state.spent.pop(khash).usd
                        count += 1
                return count > 0

            self.change(team, month, change, seeded=False)
            changed += count
        return changed


def final_spend(record: Record) -> float | None:
    """What a final record's request spent, from the final event still in its outbox; None once it is published."""
    for event in record.outbox_events():
        if event.state == record.state and (spent := getattr(event, "spent", None)) is not None:
            return float(spent.estimated_cost_usd)
        if event.state == record.state == "rejected":
            return 0.0
    return None
