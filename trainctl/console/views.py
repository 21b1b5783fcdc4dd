"""The console's pages as data: pure functions from what the ledger, the history index, the quota pools and the Model
Registry hold to the rows a template shows. The figures are the ones trainctl already computes (trainctl/jobs.py's
summary, trainctl/report.py's report, functions/capacity/fair_share.py's verdict, trainctl/curve.py's parsing);
nothing here reads or writes anything. Every text a requester or job wrote passes through as it is: the templates
escape it."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from functions.capacity.fair_share import Ask, decide
from functions.capacity.quota_pool import Pool, pool_name
from functions.ledger.history import Outcome
from functions.ledger.record import Record
from functions.teams import NO_TEAMS, Teams, everyone_shares
from schemas.events import JobEvent, Timestamps
from trainctl.console.identity import Viewer
from trainctl.curve import parse_final, parse_history
from trainctl.eventstream import headline_metrics
from trainctl.jobs import summary
from trainctl.loss_chart import history_metric

# The history page's requests list, a page at a time.
PAGE_SIZE = 50
# The most scalar metrics a request page lists (a job chose how many it wrote).
MAX_METRICS_SHOWN = 40
# The longest text a cell shows of what a requester or job wrote (the rest is cut, with an ellipsis).
MAX_TEXT = 300


def team_of(team: str | None, teams: Teams | None) -> str | None:
    """The team a record or event belongs to: its own, else the default team's (None without teams)."""
    if teams is None:
        return team
    return team or teams.default_team


def clipped(text: str | None, limit: int = MAX_TEXT) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def duration(seconds: float | None) -> str:
    """A duration as a person reads it: 42s, 7.5m, 3.2h, 2.1d."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def money(usd: float | None) -> str:
    return "-" if usd is None else f"${usd:,.2f}"


# ---- now ---------------------------------------------------------------------------------------------------------


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
    held: int
    nominal: int | None
    borrowed: int
    spent: str
    reserved: str
    budget: str


def team_rows(
    teams: Teams | None, pools: dict[str, Pool], spends: dict[str, tuple[float, float]], viewer: Viewer
) -> list[TeamRow]:
    """Per team: the GPUs it holds in every pool, its nominal share of those pools' metrics, what it borrows beyond
    them; and this month's spend and reservation against its budget (`spends`: team → (spent, reserved) USD).
    Without teams, one row: everyone."""
    names = sorted(teams.teams) if teams else [NO_TEAMS]
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
        spent, reserved = spends.get(name, (0.0, 0.0))
        rows.append(
            TeamRow(
                team=name,
                held=held,
                nominal=nominal if teams else None,
                borrowed=borrowed,
                spent=money(spent),
                reserved=money(reserved),
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
    }


# ---- a request ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    time: str
    state: str  # the data-state of its li: a lifecycle state, or `ladder` for a move down the capacity ladder
    attempt: int | None
    text: str


def timeline(record: Record, seen: Iterable[JobEvent], outcome: Outcome | None = None) -> list[Step]:
    """The request's story in order: the lifecycle events this console saw (each once, by sequence), and where it saw
    none, what the ledger keeps: its acceptance (the record's creation), its last job's start (the history's outcome,
    once it ended), each rung of the capacity ladder it left and why, and where it stands now."""
    events = sorted({e.ce_id: e for e in seen if e.request_key == record.key}.values(), key=_order)
    steps = [Step(_when(e.time), e.state, e.attempt, clipped(e.message, 2 * MAX_TEXT)) for e in events]
    states = {e.state for e in events}
    if "accepted" not in states:
        steps.append(Step(_when(record.created), "accepted", 1, "accepted (the record's creation)"))
    if outcome is not None and outcome.started and "running" not in states:
        steps.append(Step(_when(outcome.started), "running", outcome.attempt, "its last job started running"))
    steps.sort(key=lambda s: s.time)
    for moved in sorted(record.rung_history, key=lambda o: o.rung):
        steps.append(
            Step(
                "",
                "ladder",
                None,
                f"left rung {moved.rung} ({moved.resources}) after {moved.attempts}: {moved.outcome}",
            )
        )
    if record.attempt > 1 and "retrying" not in states:
        text = f"resubmitted: attempt {record.attempt} of at most {record.max_attempts}, into the same output folder"
        steps.append(Step("", "retrying", record.attempt, text))
    if record.rung_preemptions and "retrying" not in states:
        steps.append(Step("", "preempted", record.attempt, f"preempted {record.rung_preemptions} time(s) on this rung"))
    if record.state not in states:
        since = outcome.time if outcome is not None else in_state_since(record)
        text = clipped(record.message, 2 * MAX_TEXT) or record.state
        steps.append(Step(_when(since), record.state, record.attempt, text))
    return steps


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def _order(event: JobEvent) -> tuple[int, datetime]:
    return (event.sequence or 0, event.time)


def request_view(record: Record) -> dict[str, Any]:
    """`trainctl status --json`'s summary (trainctl/jobs.py), which the request page lays out."""
    return summary(record)


def metric_rows(content: bytes | None) -> list[tuple[str, str]]:
    """The scalar numbers of the run's metrics.json (a job wrote it: only finite numbers, at most MAX_METRICS_SHOWN,
    names cut), as (name, value) rows."""
    import json

    from trainctl.eventstream import readable

    try:
        found = json.loads(content) if content else {}
    except ValueError:
        return []
    if not isinstance(found, dict):
        return []
    rows = []
    for name, value in found.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            rows.append((clipped(str(name), 80), readable(value)))
        if len(rows) >= MAX_METRICS_SHOWN:
            break
    return rows


@dataclass
class Curve:
    """The loss curve as the browser's chart draws it: one x series and named y series (uPlot's data shape)."""

    x_name: str = "epoch"
    x: list[float] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    best_epoch: int | None = None
    stopped_early: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "x_name": self.x_name,
            "x": self.x,
            "series": self.series,
            "best_epoch": self.best_epoch,
            "stopped_early": self.stopped_early,
        }


CURVE_SERIES = ("train_loss", "val_loss", "val_accuracy", "val_rmse")


def curve_of(history_content: bytes | None, final_content: bytes | None) -> Curve | None:
    """trainctl/curve.py's parse of metrics.jsonl and metrics.json, as chart series; None with nothing to draw."""
    history = parse_history(history_content) if history_content else []
    if not history:
        return None
    final = parse_final(final_content)
    x_name = "epoch" if all("epoch" in h for h in history) else "step"
    metric = history_metric(history)
    names = [n for n in CURVE_SERIES if n in ("train_loss", "val_loss") or n == metric]
    return Curve(
        x_name=x_name,
        x=[h.get(x_name, i) for i, h in enumerate(history)],
        series={n: [h.get(n) for h in history] for n in names if any(n in h for h in history)},
        best_epoch=final.get("best_epoch"),
        stopped_early=bool(final.get("stopped_early")),
    )


def cloud_logs_url(project: str, job_name: str) -> str:
    """The job's logs in the Cloud Console's Logs Explorer: Vertex writes them as resource.type="ml_job" with
    resource.labels.job_id (local/FIDELITY.md, the job logs rows; google-cloud-sdk's log_util.py). The URL's shape,
    `logs/query;query=<the query, percent-encoded>?project=P`, is the one vvakame/gcplogurl builds (its example:
    `https://console.cloud.google.com/logs/query;query=trace%3D%22projects%2F…%22;…?project=test-project`)."""
    from urllib.parse import quote

    job_id = job_name.rsplit("/", 1)[-1]
    query = f'resource.type="ml_job"\nresource.labels.job_id="{job_id}"'
    return f"https://console.cloud.google.com/logs/query;query={quote(query, safe='')}?project={quote(project)}"


# ---- history -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paged:
    rows: list[Outcome]
    page: int
    pages: int
    total: int


def history_page(outcomes: list[Outcome], page: int, size: int = PAGE_SIZE) -> Paged:
    """One page of the window's finished requests, the latest first; a page past the end shows the last."""
    total = len(outcomes)
    pages = max(1, math.ceil(total / size))
    page = min(max(1, page), pages)
    ordered = sorted(outcomes, key=lambda o: o.time, reverse=True)  # already so, when the app sorted them once
    return Paged(ordered[(page - 1) * size : page * size], page, pages, total)


def visible_outcomes(outcomes: list[Outcome], viewer: Viewer, teams: Teams | None) -> list[Outcome]:
    return [o for o in outcomes if viewer.sees(team_of(o.team, teams))]


def history_charts(report: dict[str, Any]) -> dict[str, Any]:
    """trainctl/report.py's timeline as chart series: per bin, requests by final state, GPU-hours, cost, and the
    median time to start."""
    bins = report["timeline"]["bins"]
    states = list(bins[0]["by_state"]) if bins else []

    def median(values: list[float]) -> float | None:
        ordered = sorted(values)
        return ordered[(len(ordered) - 1) // 2] if ordered else None

    return {
        "bin": report["timeline"]["bin"],
        "x": [datetime.fromisoformat(b["start"]).timestamp() for b in bins],
        "by_state": {s: [b["by_state"][s] for b in bins] for s in states},
        "gpu_hours": [b["gpu_hours"] for b in bins],
        "cost_usd": [b["estimated_cost_usd"] for b in bins],
        "time_to_start_seconds": [median(b["time_to_start_seconds"]) for b in bins],
        "data_rejections": [b["data_rejections"] for b in bins],
        "promoted": [b["promoted"] for b in bins],
        "held": [b["held"] for b in bins],
    }


# ---- models ------------------------------------------------------------------------------------------------------


def model_visible(described: dict[str, Any], viewer: Viewer) -> bool:
    """A model is its owner team's (its charter's); one without a charter only the viewers of every team see."""
    charter = described.get("charter")
    return viewer.sees(charter["owner"] if charter else None)


def models_view(described: list[dict[str, Any]]) -> dict[str, Any]:
    """trainctl/models.py describe()'s models as the models page's three tables, every model's rows in each: versions
    (the newest first), decisions (the latest first) and endpoints."""
    versions, decisions, endpoints, champions = [], [], [], []
    for model in described:
        name = model["model"].rsplit("/", 1)[-1]
        for alias, held in model["aliases"].items():
            champions.append({"model": name, "alias": alias, **held})
        for v in reversed(model["versions"]):
            versions.append({"model": name, "headline": headline_metrics(v["metrics"], limit=4) or "-", **v})
        for d in model["decisions"]:
            decisions.append({"model": name, **d})
        if model.get("serving"):
            endpoints.append({"model": name, **model["serving"]})
    decisions.sort(key=lambda d: d["time"], reverse=True)
    return {
        "models": [{"name": m["model"].rsplit("/", 1)[-1], "charter": m.get("charter")} for m in described],
        "champions": champions,
        "versions": versions,
        "decisions": decisions,
        "endpoints": endpoints,
    }


def figure_text(value: Any) -> str:
    from trainctl.eventstream import readable

    return readable(value) if isinstance(value, int | float) and not isinstance(value, bool) else "-"
