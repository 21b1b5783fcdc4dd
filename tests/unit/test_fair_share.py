"""The fair-share admission order among teams (functions/capacity/fair_share.py), simulated over a few hundred requests
(issue 32, points 2 and 3): a pool that admits whoever fair share names next while it fits, jobs that end after
their run time, and the invariants checked at every step."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from functions.capacity.fair_share import Ask, admission_order, decide, next_to_admit
from functions.teams import Share


@dataclass
class Job:
    ask: Ask
    arrives: int
    runs: int
    admitted: int | None = None


def simulate(jobs: list[Job], shares: dict[str, Share], limit: int, steps: int = 10_000) -> list[tuple[int, dict]]:
    """Each step: jobs that ran their time end, new ones arrive, then fair share admits while the next fits. Returns
    (step, GPUs held per team) after every step; the jobs get their admission step."""
    waiting: list[Job] = []
    running: list[Job] = []
    trace = []
    for step in range(steps):
        running = [j for j in running if j.admitted is not None and j.admitted + j.runs > step]
        waiting += [j for j in jobs if j.arrives == step]
        while True:
            held = defaultdict(int)
            for j in running:
                held[j.ask.team] += j.ask.gpus
            first = next_to_admit([j.ask for j in waiting], held, shares.__getitem__, limit)
            if first is None or sum(held.values()) + first.gpus > limit:
                break
            job = next(j for j in waiting if j.ask is first)
            job.admitted = step
            waiting.remove(job)
            running.append(job)
        held = defaultdict(int)
        for j in running:
            held[j.ask.team] += j.ask.gpus
        trace.append((step, dict(held)))
        if not waiting and all(j.arrives <= step for j in jobs) and not running:
            break
    return trace


def test_a_few_hundred_requests_of_three_teams_keep_every_rule():
    """Issue 32, points 2 and 3: 300 requests of 1-4 GPUs from three teams arriving at random on a 16-GPU quota.
    Never more than the quota, never a team over its cap, first in first out within each team, and every request
    admitted (no starvation)."""
    rng = random.Random(32)
    shares = {
        "vision": Share(nominal=8, borrow_limit=4, weight=2.0),
        "ranking": Share(nominal=6, borrow_limit=6, weight=1.0),
        "speech": Share(nominal=2, borrow_limit=2, weight=1.0),
    }
    jobs = [
        Job(Ask(f"r{i:03d}", rng.choice(list(shares)), rng.randint(1, 4)), arrives=rng.randint(0, 400),
            runs=rng.randint(1, 12))
        for i in range(300)
    ]  # fmt: skip
    trace = simulate(jobs, shares, limit=16)

    for step, held in trace:
        assert sum(held.values()) <= 16, f"step {step}: {held} holds more than the quota"
        for team, gpus in held.items():
            assert gpus <= shares[team].cap(16), f"step {step}: {team} holds {gpus}, over its cap"
    assert all(j.admitted is not None for j in jobs), "a request was never admitted"
    for team in shares:
        mine = sorted((j for j in jobs if j.ask.team == team), key=lambda j: (j.arrives, j.ask.key))
        admitted = [j.admitted for j in mine]
        assert admitted == sorted(admitted), f"{team}: a later request was admitted before an earlier one"


def test_when_both_teams_wait_they_hold_the_quota_in_proportion_to_their_weights():
    """Issue 32, point 3: two teams flood one 8-GPU quota with 2-GPU requests at once, weights 1 and 3, neither
    with a nominal share of its own: while both wait, team b holds three times what team a holds."""
    shares = {"a": Share(nominal=0, borrow_limit=None, weight=1), "b": Share(nominal=0, borrow_limit=None, weight=3)}
    jobs = [Job(Ask(f"{t}{i:03d}", t, 2), arrives=0, runs=3) for i in range(120) for t in ("a", "b")]
    trace = simulate(jobs, shares, limit=8)

    both_waiting = [held for step, held in trace if step < 100]
    assert all(held == {"a": 2, "b": 6} for held in both_waiting[3:]), both_waiting[:12]


def test_an_idle_teams_share_is_borrowed_and_its_owner_goes_first_when_it_comes_back():
    """Issue 32, point 2: team b alone borrows a's idle share up to its borrow limit; when a's requests arrive, the
    GPUs that b's ending jobs free go to a, within its nominal share, before b's next borrowing request."""
    shares = {"a": Share(nominal=4, borrow_limit=0, weight=1.0), "b": Share(nominal=4, borrow_limit=2, weight=1.0)}
    jobs = [Job(Ask(f"b{i:02d}", "b", 1), arrives=0, runs=4) for i in range(40)]
    jobs += [Job(Ask(f"a{i:02d}", "a", 1), arrives=10, runs=100) for i in range(4)]
    trace = simulate(jobs, shares, limit=8)

    assert trace[1][1] == {"b": 6}, "b did not borrow a's idle GPUs up to its limit"
    a_admitted = sorted(j.admitted for j in jobs if j.ask.team == "a")
    b_after = [j for j in jobs if j.ask.team == "b" and j.admitted is not None and j.admitted >= 10]
    assert a_admitted[-1] <= 12, f"a waited for its own share behind b's borrowing: {a_admitted}"
    assert all(held.get("b", 0) <= 4 for step, held in trace if a_admitted[-1] <= step < 100), (
        "b kept borrowing while a held its nominal share"
    )
    assert b_after, "b stopped entirely"


def test_a_teams_large_request_is_not_overtaken_by_its_own_small_ones():
    """Issue 32, point 3: first in, first out within a team."""
    shares = {"a": Share(nominal=None, borrow_limit=None)}.__getitem__
    line = [Ask("large", "a", 4), Ask("small", "a", 1)]
    assert next_to_admit(line, {"a": 3}, shares, 8) == line[0]
    assert next_to_admit(line, {"a": 6}, shares, 8) is None, "the small request went past the large one"
    assert not decide(line[1], {"h": Ask("h", "a", 6)}, line, shares, 8).granted


def test_the_event_says_which_limit_holds_a_request():
    """Issue 32, point 5: over its team's cap: the team's share; behind a team with a smaller share: the team's
    share; next in line with no room: the project's quota."""
    shares = {"a": Share(nominal=2, borrow_limit=0), "b": Share(nominal=6, borrow_limit=0)}.__getitem__
    holders = {"a1": Ask("a1", "a", 2), "b1": Ask("b1", "b", 6)}
    assert decide(Ask("a2", "a", 1), holders, [], shares, 8).held_by == "team_share"
    assert decide(Ask("b2", "b", 1), holders, [], shares, 16).held_by == "team_share"
    both = {"a": Share(nominal=None, borrow_limit=None), "b": Share(nominal=None, borrow_limit=None)}.__getitem__
    full = {"a1": Ask("a1", "a", 8)}
    verdict = decide(Ask("b2", "b", 2), full, [], both, 8)
    assert (verdict.granted, verdict.held_by, verdict.held) == (False, "project_quota", 8)
    verdict = decide(Ask("a2", "a", 2), full, [Ask("b2", "b", 2)], both, 8)
    assert (verdict.held_by, verdict.ahead) == ("team_share", 1)
    assert [a.key for a in admission_order([Ask("a2", "a", 2), Ask("b2", "b", 2)], {"a": 8}, both, 16)] == ["b2", "a2"]


def test_a_team_within_its_share_goes_before_one_that_would_borrow_even_holding_more_per_weight():
    """Issue 40, point 14: the owner-goes-first case where the owner holds more GPUs per unit of weight (team a, 4
    of its nominal 6) than the team that would borrow (team b, its nominal 2, asking for a third), and b waited
    longer: a's request is next, and b's is held by its team's share. (Ranking by GPUs per weight alone names b.)"""
    shares = {
        "a": Share(nominal=6, borrow_limit=0, weight=1.0),
        "b": Share(nominal=2, borrow_limit=6, weight=1.0),
    }.__getitem__
    line = [Ask("b-borrows", "b", 1), Ask("a-owns", "a", 1)]
    held = {"a": 4, "b": 2}
    assert next_to_admit(line, held, shares, 8) == line[1]
    holders = {"a1": Ask("a1", "a", 4), "b1": Ask("b1", "b", 2)}
    assert decide(line[1], holders, line, shares, 8).granted
    waits = decide(line[0], holders, line, shares, 8)
    assert (waits.granted, waits.ahead, waits.held_by) == (False, 1, "team_share")
