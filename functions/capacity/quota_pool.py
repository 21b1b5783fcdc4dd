"""trainctl's own count of the GPU quota its jobs hold, per (region, Vertex quota metric): one small object in the
control bucket per pool, changed only by compare-and-swap, so concurrent admissions never together admit more
GPUs than the limit. Requests that do not fit wait in the pool's queue, in arrival order; the one fair share
names next (functions/capacity/fair_share.py: first in, first out within a team, the team holding least per weight
first) is the only one that may be admitted (a large request is not overtaken for ever by small ones).

  quota/<region>/<metric>.json   {"holders": {key hash: GPUs}, "waiting": [key hash, …],
                                  "teams": {key hash: team}, "wants": {waiting key hash: GPUs}}

A pool written before teams (no "teams", no "wants") reads as one team whose waiters are asked again.

A holder is released when its request ends; reconcile also drops holders and waiters whose request is no longer
active (a handler that died between the two), so the count cannot leak.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from functions.capacity.fair_share import Ask, HeldBy, Shares, decide
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.ports import Storage
from functions.teams import NO_TEAMS, everyone_shares

QUOTA_PREFIX = "quota/"


def pool_name(region: str, metric: str) -> str:
    """The pool of a Vertex quota metric (aiplatform.googleapis.com/custom_model_training_…) in a region."""
    return f"{region}/{metric.rsplit('/', 1)[-1]}"


@dataclass
class Pool:
    holders: dict[str, int] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    teams: dict[str, str] = field(default_factory=dict)  # holders' and waiters' teams
    wants: dict[str, int] = field(default_factory=dict)  # waiters' GPUs

    @property
    def held(self) -> int:
        return sum(self.holders.values())

    def team(self, khash: str) -> str:
        return self.teams.get(khash, NO_TEAMS)

    def held_by(self, team: str) -> int:
        return sum(gpus for khash, gpus in self.holders.items() if self.team(khash) == team)

    def forget(self, khash: str) -> None:
        self.holders.pop(khash, None)
        if khash in self.waiting:
            self.waiting.remove(khash)
        self.teams.pop(khash, None)
        self.wants.pop(khash, None)


@dataclass(frozen=True)
class Admission:
    granted: bool
    held: int  # GPUs the other holders hold
    ahead: int  # requests fair share admits before this one
    held_by: HeldBy | None = None  # why it waits: its team's share, or the project's quota


class QuotaPools:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    def _read(self, pool: str) -> tuple[Pool, int]:
        found = self._gcs.read(self.bucket, f"{QUOTA_PREFIX}{pool}.json")
        if found is None:
            return Pool(), 0
        data = json.loads(found[0])
        state = Pool(
            dict(data.get("holders", {})),
            list(data.get("waiting", [])),
            dict(data.get("teams", {})),
            dict(data.get("wants", {})),
        )
        return state, found[1]

    def _write(self, pool: str, state: Pool, generation: int) -> None:
        body = json.dumps(
            {"holders": state.holders, "waiting": state.waiting, "teams": state.teams, "wants": state.wants},
            sort_keys=True,
        )
        self._gcs.write(self.bucket, f"{QUOTA_PREFIX}{pool}.json", body, generation)

    def _change(self, pool: str, change: Callable[[Pool], tuple[Admission, bool]]) -> Admission:
        """Apply `change(state) -> (Admission, changed)` by compare-and-swap, again on a conflict."""
        while True:
            state, generation = self._read(pool)
            admission, changed = change(state)
            if not changed:
                return admission
            try:
                self._write(pool, state, generation)
                return admission
            except Conflict:
                if not deadline.allows(1.0):
                    raise Transient(f"the GPU quota pool {pool} kept changing") from None
                time.sleep(random.uniform(0.02, 0.2))

    def acquire(
        self,
        pool: str,
        khash: str,
        gpus: int,
        limit: int,
        team: str = NO_TEAMS,
        shares: Shares = everyone_shares,
    ) -> Admission:
        """Hold `gpus` of the pool for the request of `team` if they fit under `limit` and fair share names it next
        (`shares`: each team's share of this pool's metric); else queue it (once). Asking again is safe: a holder
        is granted, a waiter keeps its place."""

        def change(state: Pool) -> tuple[Admission, bool]:
            holders = {k: Ask(k, state.team(k), n) for k, n in state.holders.items()}
            # A waiter from before teams has no recorded want: counted as this ask's size until it asks again.
            waiting = [Ask(k, state.team(k), state.wants.get(k, gpus)) for k in state.waiting]
            verdict = decide(Ask(khash, team, gpus), holders, waiting, shares, limit)
            admission = Admission(verdict.granted, verdict.held, verdict.ahead, verdict.held_by)
            if khash in state.holders:
                return admission, False
            if verdict.granted:
                state.forget(khash)
                state.holders[khash], state.teams[khash] = gpus, team
                return admission, True
            if khash in state.waiting and state.wants.get(khash) == gpus and state.team(khash) == team:
                return admission, False
            if khash not in state.waiting:
                state.waiting.append(khash)
            state.teams[khash], state.wants[khash] = team, gpus
            return admission, True

        return self._change(pool, change)

    def release(self, pool: str, khash: str) -> None:
        """The request holds nothing of the pool and waits for nothing in it any more."""

        def change(state: Pool) -> tuple[Admission, bool]:
            changed = khash in state.holders or khash in state.waiting
            state.forget(khash)
            return Admission(False, state.held, 0), changed

        self._change(pool, change)

    def held(self, pool: str, team: str | None = None) -> int:
        """GPUs held in the pool: by everyone, or by one team."""
        state = self._read(pool)[0]
        return state.held if team is None else state.held_by(team)

    def state(self, pool: str) -> Pool:
        """The pool as it stands: its holders, its line and their teams (for people: the console's now page)."""
        return self._read(pool)[0]

    def waiting(self, pool: str) -> list[str]:
        """The requests waiting in the pool, first in line first."""
        return self._read(pool)[0].waiting

    def names(self) -> list[str]:
        """Every pool trainctl has counted in."""
        return [
            name.removeprefix(QUOTA_PREFIX).removesuffix(".json") for name in self._gcs.names(self.bucket, QUOTA_PREFIX)
        ]

    def forget_inactive(self, active: Callable[[], set[str]]) -> int:
        """Drop holders and waiters whose request is no longer active; how many were dropped. The active set is
        listed after each read of a pool: a request is marked active before it first asks for quota, so one that
        asked after the read makes the compare-and-swap fail, and is seen active on the next round."""
        dropped = 0
        for pool in self.names():
            stale: list[str] = []

            def change(state: Pool) -> tuple[Admission, bool]:
                nonlocal stale
                now_active = active()
                stale = [k for k in [*state.holders, *state.waiting] if k not in now_active]
                for khash in stale:
                    state.forget(khash)
                return Admission(False, state.held, 0), bool(stale)

            self._change(pool, change)
            dropped += len(stale)
        return dropped
