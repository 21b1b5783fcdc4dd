"""trainctl's count of the GPU quota (functions/capacity/quota_pool.py) under the load it is built for (issue 29,
points 1 and 2): many admissions at once against one pool object changed only by compare-and-swap. The storage is
trainctl replay's in-memory Cloud Storage, made to interleave its callers and to check every write it accepts."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field

import pytest

from functions.capacity.fair_share import Ask, next_to_admit
from functions.capacity.quota_pool import QUOTA_PREFIX, QuotaPools
from functions.cloud.gcs import Conflict
from functions.teams import Share
from local.memory_gcs import MemoryGcs

POOL = "us-central1/custom_model_training_nvidia_l4_gpus"
NAME = f"{QUOTA_PREFIX}{POOL}.json"
LIMIT = 8


@dataclass
class WatchedGcs(MemoryGcs):
    """MemoryGcs whose compare-and-swap is atomic across threads, whose reads yield to other threads (so that
    read-change-write cycles overlap, as a function's instances do), and which checks each write of the pool
    against the one it replaces: never more GPUs held than the limit, and a waiter admitted only from the head
    of the line (nobody enters before an earlier waiter)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    race_first_reads: bool = False  # make the first two reads meet, so that one of their swaps must fail
    first_two_reads: threading.Barrier = field(default_factory=lambda: threading.Barrier(2))
    reads: int = 0
    conflicts: int = 0
    broken: list[str] = field(default_factory=list)
    admitted_from_line: list[str] = field(default_factory=list)

    def read(self, bucket, name, generation=None, max_bytes=None):  # type: ignore[no-untyped-def]
        with self.lock:
            found = super().read(bucket, name, generation, max_bytes)
            self.reads += 1
            first_two = self.race_first_reads and self.reads <= 2
        if first_two:
            self.first_two_reads.wait(timeout=30)  # both read one generation: one of them must lose the swap
        else:
            time.sleep(random.uniform(0, 0.001))  # another thread may read the same generation meanwhile
        return found

    def write(self, bucket, name, data, if_generation_match, custom_metadata=None):  # type: ignore[no-untyped-def]
        with self.lock:
            before = self.objects.get((bucket, name))
            try:
                generation = super().write(bucket, name, data, if_generation_match)
            except Conflict:
                self.conflicts += 1
                raise
            self._check(json.loads(before[0]) if before else {"holders": {}, "waiting": []}, json.loads(data))
            return generation

    def _check(self, old: dict, new: dict) -> None:  # type: ignore[type-arg]
        if sum(new["holders"].values()) > LIMIT:
            self.broken.append(f"{sum(new['holders'].values())} GPUs held, over the limit {LIMIT}")
        for khash in set(new["holders"]) - set(old["holders"]):
            if khash in old["waiting"]:
                if old["waiting"][0] != khash:
                    self.broken.append(f"{khash} admitted before {old['waiting'][0]}, who waited longer")
                self.admitted_from_line.append(khash)
            elif old["waiting"]:
                self.broken.append(f"{khash} admitted while {old['waiting'][0]} waited")


def run_requests(
    pools: QuotaPools, gpus: dict[str, int], hold_for: float, teams: dict[str, Share] | None = None
) -> list[BaseException]:
    """Each request asks for its GPUs at once, and again until granted (as reconcile visits a queued one), holds
    them briefly, releases them; the errors any thread met. Nobody releases before everyone has asked once, so
    the line forms whatever the threads' timing. With `teams`, a request's team is its key's first letter."""
    errors: list[BaseException] = []
    start, everyone_asked = threading.Barrier(len(gpus)), threading.Barrier(len(gpus))

    def request(khash: str) -> None:
        team = {"team": khash[0], "shares": teams.__getitem__} if teams else {}
        try:
            start.wait()
            granted = pools.acquire(POOL, khash, gpus[khash], LIMIT, **team).granted  # type: ignore[arg-type]
            everyone_asked.wait(timeout=60)
            while not granted:
                time.sleep(0.001)
                granted = pools.acquire(POOL, khash, gpus[khash], LIMIT, **team).granted  # type: ignore[arg-type]
            time.sleep(hold_for)
            pools.release(POOL, khash)
        except BaseException as exc:  # reported to the test, which fails on it
            errors.append(exc)

    threads = [threading.Thread(target=request, args=(khash,)) for khash in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a request never got its GPUs"
    return errors


def test_concurrent_admissions_never_hold_more_than_the_limit_and_the_line_is_first_in_first_out():
    """Issue 29, point 1: sixteen requests of 1 to 4 GPUs ask for an 8-GPU pool at the same moment and keep
    asking until admitted. The compare-and-swap retry is what keeps this true: without it a request that lost a
    race fails (or, with the generation check gone, two admissions overwrite each other and the pool over-admits);
    every write is checked against the one before it."""
    random.seed(29)
    gcs = WatchedGcs(race_first_reads=True)
    pools = QuotaPools(gcs, "control")
    gpus = {f"r{i:02d}": 1 + i % 4 for i in range(16)}

    errors = run_requests(pools, gpus, hold_for=0.01)

    assert errors == []
    assert gcs.broken == []
    assert gcs.conflicts > 0, "the requests never raced: the test proved nothing"
    assert gcs.admitted_from_line, "nobody ever waited: the test proved nothing"
    assert pools.held(POOL) == 0 and pools.waiting(POOL) == []


def test_a_large_request_waiting_first_is_not_overtaken_by_small_ones():
    """Issue 29, point 1: a 4-GPU request that queued while 6 of 8 GPUs were held is admitted before the 1-GPU
    requests that queued after it, though each of those would fit alone."""
    pools = QuotaPools(WatchedGcs(), "control")
    assert pools.acquire(POOL, "holder", 6, LIMIT).granted
    assert not pools.acquire(POOL, "large", 4, LIMIT).granted
    small = [pools.acquire(POOL, f"small{i}", 1, LIMIT) for i in range(2)]
    assert [s.granted for s in small] == [False, False] and [s.ahead for s in small] == [1, 2]

    pools.release(POOL, "holder")
    assert not pools.acquire(POOL, "small0", 1, LIMIT).granted, "small0 overtook the large request"
    assert pools.acquire(POOL, "large", 4, LIMIT).granted
    assert pools.acquire(POOL, "small0", 1, LIMIT).granted
    assert pools.waiting(POOL) == ["small1"]


def test_forget_inactive_drops_holders_and_waiters_whose_request_ended():
    """Issue 29, point 2: a handler that died between ending a request and releasing its GPUs leaves a hold
    behind; reconcile's forget_inactive drops it (and a leaked waiter) and keeps the active ones."""
    pools = QuotaPools(WatchedGcs(), "control")
    pools.acquire(POOL, "leaked", 6, LIMIT)
    pools.acquire(POOL, "active", 2, LIMIT)
    pools.acquire(POOL, "gone-waiter", 4, LIMIT)
    pools.acquire(POOL, "active-waiter", 4, LIMIT)

    assert pools.forget_inactive(lambda: {"active", "active-waiter"}) == 2

    assert pools.held(POOL) == 2 and pools.waiting(POOL) == ["active-waiter"]
    assert pools.acquire(POOL, "active-waiter", 4, LIMIT).granted, "the leaked hold still blocked the queue"


@pytest.mark.parametrize("asked_again", [1, 3])
def test_asking_again_keeps_the_place_in_line_and_does_not_hold_twice(asked_again: int):
    """A redelivered admission (the same request asking again) is idempotent: one hold, one place in line."""
    pools = QuotaPools(WatchedGcs(), "control")
    for _ in range(asked_again):
        assert pools.acquire(POOL, "a", 5, LIMIT).granted
        assert not pools.acquire(POOL, "b", 5, LIMIT).granted
    assert pools.held(POOL) == 5 and pools.waiting(POOL) == ["b"]


TEAM_SHARES = {"a": Share(nominal=2, borrow_limit=4, weight=1.0), "b": Share(nominal=6, borrow_limit=0, weight=1.0)}


@dataclass
class TeamWatchedGcs(WatchedGcs):
    """…and, with teams, checks each admission against fair share's choice on the state it replaced, and each
    team's hold against its cap (issue 32)."""

    def _check(self, old: dict, new: dict) -> None:  # type: ignore[type-arg]
        if sum(new["holders"].values()) > LIMIT:
            self.broken.append(f"{sum(new['holders'].values())} GPUs held, over the limit {LIMIT}")
        for team, share in TEAM_SHARES.items():
            held = sum(n for k, n in new["holders"].items() if new["teams"][k] == team)
            if held > share.cap(LIMIT):
                self.broken.append(f"team {team} holds {held}, over its cap {share.cap(LIMIT)}")
        teams, wants = old.get("teams", {}), old.get("wants", {})
        for khash in set(new["holders"]) - set(old["holders"]):
            line = [Ask(k, teams[k], wants[k]) for k in old["waiting"]]
            if khash not in old["waiting"]:
                line.append(Ask(khash, new["teams"][khash], new["holders"][khash]))
            held: dict[str, int] = {}
            for k, n in old["holders"].items():
                held[teams[k]] = held.get(teams[k], 0) + n
            first = next_to_admit(line, held, TEAM_SHARES.__getitem__, LIMIT)
            if first is None or first.key != khash:
                self.broken.append(f"{khash} admitted where fair share named {first}")
            elif khash in old["waiting"]:
                self.admitted_from_line.append(khash)


def test_concurrent_admissions_of_two_teams_keep_the_quota_the_caps_and_the_fair_order():
    """Issue 32, points 2 and 3 (and issue 29, point 1's invariants): sixteen requests of two teams ask for an 8-GPU
    pool at once; every write keeps the quota and each team's cap, and admits only whom fair share names."""
    random.seed(32)
    gcs = TeamWatchedGcs(race_first_reads=True)
    pools = QuotaPools(gcs, "control")
    asks = {f"{'ab'[i % 2]}{i:02d}": 1 + i % 2 for i in range(16)}

    errors = run_requests(pools, asks, hold_for=0.01, teams=TEAM_SHARES)

    assert errors == [] and gcs.broken == []
    assert gcs.conflicts > 0 and gcs.admitted_from_line
    assert pools.held(POOL) == 0 and pools.waiting(POOL) == []


def test_a_team_over_its_share_waits_while_the_other_is_admitted_and_the_admission_says_why():
    """Issue 32, points 2 and 5: team a at its cap (2 nominal + 4 borrowed) waits on its share though GPUs are
    free; team b is admitted; once b's owner share is wanted, a's borrowing waits on b."""
    pools = QuotaPools(WatchedGcs(), "control")
    shares = TEAM_SHARES.__getitem__
    assert pools.acquire(POOL, "a1", 6, LIMIT, "a", shares).granted
    over = pools.acquire(POOL, "a2", 1, LIMIT, "a", shares)
    assert (over.granted, over.held_by) == (False, "team_share")
    assert pools.acquire(POOL, "b1", 2, LIMIT, "b", shares).granted
    assert pools.held(POOL, "a") == 6 and pools.held(POOL, "b") == 2
    assert pools.waiting(POOL) == ["a2"]
