"""Fair share of one GPU quota pool among teams (issue 32, points 2 and 3): which waiting request is admitted next.

Pure. The rules, in order:
  - first in, first out within a team: only a team's oldest waiting request can be next (a large request is
    never overtaken by its own team's small ones);
  - a team never holds more than its cap: its nominal share plus what it may borrow (and never more than the quota);
  - requests within their team's nominal share go before requests that would borrow: borrowed GPUs are the first
    to wait when their owners want them back (no running job is stopped: this is admission order only);
  - among those, the team holding the least GPUs per unit of weight goes first; ties go to the longest waiting;
  - only the one request so chosen may be admitted, and only when it fits under the quota: nobody else overtakes
    it meanwhile, so no team starves (what it waits for only ever frees up).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from functions.teams import Share

HeldBy = Literal["team_share", "project_quota"]


@dataclass(frozen=True)
class Ask:
    key: str
    team: str
    gpus: int


@dataclass(frozen=True)
class Verdict:
    granted: bool
    held: int  # GPUs the other holders hold
    ahead: int  # requests fair share would admit before this one
    held_by: HeldBy | None  # why it waits: its team's share (or another team's turn), or the project's quota


Shares = Callable[[str], Share]


def next_to_admit(waiting: list[Ask], held_by_team: dict[str, int], shares: Shares, limit: int) -> Ask | None:
    """The request fair share admits next, if the quota has room for it; None when every team's oldest waiting
    request is over its team's cap."""
    heads: dict[str, tuple[int, Ask]] = {}
    for arrival, ask in enumerate(waiting):
        heads.setdefault(ask.team, (arrival, ask))
    best: tuple[tuple[bool, float, int], Ask] | None = None
    for arrival, ask in heads.values():
        share, held = shares(ask.team), held_by_team.get(ask.team, 0)
        if held + ask.gpus > share.cap(limit):
            continue
        rank = (share.borrows(held + ask.gpus), held / share.weight, arrival)
        if best is None or rank < best[0]:
            best = (rank, ask)
    return best[1] if best else None


def admission_order(waiting: list[Ask], held_by_team: dict[str, int], shares: Shares, limit: int) -> list[Ask]:
    """The order fair share would admit the waiting requests in, were the quota to free up for all of them; those
    their team's cap keeps out come last, in arrival order."""
    left, held, order = list(waiting), dict(held_by_team), []
    while (ask := next_to_admit(left, held, shares, limit)) is not None:
        order.append(ask)
        left.remove(ask)
        held[ask.team] = held.get(ask.team, 0) + ask.gpus
    return order + left


def decide(ask: Ask, holders: dict[str, Ask], waiting: list[Ask], shares: Shares, limit: int) -> Verdict:
    """Whether `ask` (a holder, one of `waiting`, or new) is admitted now. A new ask joins the end of the line."""
    others = sum(h.gpus for key, h in holders.items() if key != ask.key)
    if ask.key in holders:
        return Verdict(True, others, 0, None)
    line = waiting if any(w.key == ask.key for w in waiting) else [*waiting, ask]
    held_by_team: dict[str, int] = {}
    for holder in holders.values():
        held_by_team[holder.team] = held_by_team.get(holder.team, 0) + holder.gpus
    first = next_to_admit(line, held_by_team, shares, limit)
    if first is not None and first.key == ask.key and others + ask.gpus <= limit:
        return Verdict(True, others, 0, None)
    order = [w.key for w in admission_order(line, held_by_team, shares, limit)]
    share, team_held = shares(ask.team), held_by_team.get(ask.team, 0)
    over_share = team_held + ask.gpus > share.cap(limit)
    # Another team goes first because this team holds more per unit of weight, or would borrow: its share holds it.
    # Otherwise (its turn, or an earlier arrival's at an equal share) it is the project's quota that is full.
    behind_a_fairer_team = (
        first is not None
        and first.team != ask.team
        and (
            share.borrows(team_held + ask.gpus)
            > shares(first.team).borrows(held_by_team.get(first.team, 0) + first.gpus)
            or team_held / share.weight > held_by_team.get(first.team, 0) / shares(first.team).weight
        )
    )
    held_by: HeldBy = "team_share" if over_share or behind_a_fairer_team else "project_quota"
    return Verdict(False, others, order.index(ask.key), held_by)
