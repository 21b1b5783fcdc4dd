"""The now page's data: the active requests, the quota pools' waiters and what holds each, the teams' GPUs and spend,
and the live list's lines."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from functions.capacity.fair_share import Ask, decide
from functions.capacity.quota_pool import Pool, pool_name
from functions.ledger.record import Record
from functions.teams import NO_TEAMS, Teams, everyone_shares
from schemas.events import JobEvent, Timestamps
from trainctl.console.identity import Viewer
from trainctl.console.views.common import clipped, duration, money, team_of, title_of


def in_state_since(record: Record) -> datetime:
    """When the request entered the state it is in, as well as the record says: its wait in the queue began at
    queued_since; any other state at its last change."""
    return record.queued_since if record.state == "queued" and record.queued_since else record.updated


def rung_in_words(record: Record) -> str:
    if not record.ladder:
        return "-"
    rung = record.ladder[record.rung] if record.rung < len(record.ladder) else None
    return f"{record.rung}: {rung.resources}" if rung else str(record.rung)


def cost_so_far(record: Record, now: datetime, running_since: datetime | None = None) -> float:
    """What the request has run so far, at its rungs' prices: the attempts before this one (the record's), and the
    current attempt from when its job started running (`running_since`: its `running` event's start, when the
    console saw it; else the record's last change) to now."""
    started = (running_since or record.updated) if record.state == "running" else None
    return record.spent(Timestamps(started=started, ended=now) if started else None).estimated_cost_usd


@dataclass(frozen=True)
class ActiveRow:
    request_id: str
    team: str | None
    state: str
    rung: str
    gpus: int
    since: str
    in_state: str
    cost: str
    message: str
    job_state: str | None
    title: str = ""  # the whole message, where `message` is cut


def running_since(record: Record, seen: Iterable[JobEvent]) -> datetime | None:
    """When the current attempt's job started running, from its `running` event (Vertex's start time)."""
    for event in seen:
        if event.state == "running" and event.attempt == record.attempt and event.request_key == record.key:
            return event.timestamps.started if event.timestamps and event.timestamps.started else event.time
    return None


def active_rows(
    records: Iterable[Record],
    now: datetime,
    viewer: Viewer,
    teams: Teams | None,
    started: dict[str, datetime] | None = None,
) -> list[ActiveRow]:
    """`started`: when each request's current job started running (by key hash), where the console knows it."""
    rows = []
    for record in records:
        team = team_of(record.team, teams)
        if not viewer.sees(team):
            continue
        since = in_state_since(record)
        rows.append(
            ActiveRow(
                request_id=record.request_id,
                team=team,
                state=record.state,
                rung=rung_in_words(record),
                gpus=record.attempt_price[0],
                since=since.isoformat(timespec="seconds"),
                in_state=duration((now - since).total_seconds()),
                cost=money(cost_so_far(record, now, (started or {}).get(record.key_hash))),
                message=clipped(record.message),
                job_state=record.job_state,
                title=title_of(record.message),
            )
        )
    return rows


@dataclass(frozen=True)
class QueueRow:
    request_id: str
    team: str | None
    pool: str
    gpus: int
    place: int  # 1: fair share admits it next
    held_by: str  # team_share | project_quota | unknown
    why: str
    waiting: str


HELD_BY_WORDS = {
    "team_share": "its team's share (its cap, or another team's fair turn first)",
    "project_quota": "the project's GPU quota (full; next in line when it frees up)",
    "unknown": "the project's GPU quota (its limit cannot be read now)",
}


def queue_rows(
    pools: dict[str, Pool],
    records: dict[str, Record],
    limits: dict[str, int | None],
    viewer: Viewer,
    teams: Teams | None,
    now: datetime,
) -> list[QueueRow]:
    """Every request waiting in a quota pool, in each pool's admission order, with what holds it: fair share's
    verdict (functions/capacity/fair_share.py decide) on the pool as it stands. `records`: the waiters' records by key
    hash (one not among them, a request the page did not read, is shown by its key hash alone); `limits`: each pool's
    limit, None when unknown."""
    rows = []
    for name, pool in sorted(pools.items()):
        holders = {k: Ask(k, pool.team(k), n) for k, n in pool.holders.items()}
        line = [Ask(k, pool.team(k), pool.wants.get(k, 0)) for k in pool.waiting]
        metric = name.split("/", 1)[-1]

        def shares(team: str, metric: str = metric) -> Any:
            return teams.share(team, metric) if teams else everyone_shares(team)

        limit = limits.get(name)
        for ask in line:
            record = records.get(ask.key)
            team = team_of(record.team if record else (None if ask.team == NO_TEAMS else ask.team), teams)
            if not viewer.sees(team):
                continue
            if limit is None:
                held_by, place = "unknown", line.index(ask) + 1
            else:
                verdict = decide(ask, holders, line, shares, limit)
                held_by, place = verdict.held_by or "project_quota", verdict.ahead + 1
            since = record.queued_since if record and record.queued_since else None
            rows.append(
                QueueRow(
                    request_id=record.request_id if record else ask.key,
                    team=team,
                    pool=name,
                    gpus=ask.gpus or (record.attempt_price[0] if record else 0),
                    place=place,
                    held_by=held_by,
                    why=HELD_BY_WORDS[held_by],
                    waiting=duration((now - since).total_seconds()) if since else "-",
                )
            )
    return sorted(rows, key=lambda r: (r.pool, r.place))


def pool_limits_wanted(pools: dict[str, Pool], records: dict[str, Record]) -> dict[str, tuple[str, str]]:
    """Each pool's (quota metric, region), as the records of its holders and waiters name them."""
    wanted: dict[str, tuple[str, str]] = {}
    for record in records.values():
        for rung in record.ladder:
            for metric in rung.gated_metrics:
                name = pool_name(rung.region, metric)
                if name in pools:
                    wanted.setdefault(name, (metric, rung.region))
    return wanted


@dataclass(frozen=True)
class TeamRow:
    team: str
    in_jobs: int  # the GPUs of its requests with a job (submitted or running), from their records
    held: int  # what trainctl's count of the quota pools holds for it (requests on a rung gated by a quota metric)
    nominal: int | None
    borrowed: int
    spent: str
    reserved: str
    budget: str


# The states in which a request's GPUs are in a job of its own (asked for, or running).
JOB_STATES = frozenset({"submitted", "running"})


def team_rows(
    teams: Teams | None,
    pools: dict[str, Pool],
    spends: dict[str, tuple[float, float]],
    viewer: Viewer,
    records: Iterable[Record] = (),
) -> list[TeamRow]:
    """Per team: the GPUs of its active requests that have a job (`records`: the active records the page read), the
    GPUs trainctl's quota pools hold for it, its nominal share of those pools' metrics, what it borrows beyond them;
    and this month's spend and reservation against its budget (`spends`: team → (spent, reserved) USD). The budget
    records keep a month only for a team with a monthly budget (functions/capacity/budgets.py): a team without one,
    and a deployment without teams, show "-" there, not $0.00 (the history page estimates every request's cost).
    Without teams, one row: everyone."""
    names = sorted(teams.teams) if teams else [NO_TEAMS]
    in_jobs: dict[str, int] = {}
    for record in records:
        if record.state in JOB_STATES:
            owner = team_of(record.team, teams) or NO_TEAMS
            in_jobs[owner] = in_jobs.get(owner, 0) + record.attempt_price[0]
    rows = []
    for name in names:
        if not viewer.sees(name if teams else None):
            continue
        held = nominal = borrowed = 0
        for pool_key, pool in pools.items():
            mine = pool.held_by(name)
            share = teams.share(name, pool_key.split("/", 1)[-1]) if teams else everyone_shares(name)
            held += mine
            nominal += share.nominal or 0
            borrowed += max(0, mine - share.nominal) if share.nominal is not None else 0
        team = teams.teams[name] if teams else None
        budgeted = team is not None and team.monthly_budget_usd is not None
        spent, reserved = spends.get(name, (0.0, 0.0))
        rows.append(
            TeamRow(
                team=name,
                in_jobs=in_jobs.get(name, 0),
                held=held,
                nominal=nominal if teams else None,
                borrowed=borrowed,
                spent=money(spent) if budgeted else "-",
                reserved=money(reserved) if budgeted else "-",
                budget=money(team.monthly_budget_usd) if team and team.monthly_budget_usd is not None else "none",
            )
        )
    return rows


def live_item(event: JobEvent) -> dict[str, Any]:
    """One line of the live list, as the now page first renders it and as static/live.js inserts later ones."""
    return {
        "state": event.state,
        "request_id": event.request_id,
        "team": event.team,
        "time": event.time.isoformat(timespec="seconds"),
        "message": clipped(event.message),
        "title": title_of(event.message),
    }
