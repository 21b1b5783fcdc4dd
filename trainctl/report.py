"""`trainctl report --since 7d [--by LABEL] [--json] [--png FILE]`: what finished in a time window, from the
ledger's history index (functions/ledger/history.py), the same against the local stack and a deployment.

Figures: requests by final state, failures by reason, success rate (succeeded among the requests that got a
job: succeeded, failed, cancelled), p50/p95 time to start (accepted → the job running) and run time (the last
attempt's job, start → end), GPU-hours (GPUs × run time) and estimated cost (the catalog's hourly list price
× run time); with model blocks, per model how many successful runs were promoted and how many held, and how many
requests the data check rejected at admission with the GPU-hours and cost their own estimates say it saved at most
(issue 27); what the trigger policies spared (issue 42): requests skipped by reason, runs superseded, markers
coalesced, and the GPU-hours saved; time to first step (issue 43: p50/p90 of accepted → first step and of its
phases) and goodput (scheduling: running ÷ accepted → end; runtime: steps kept ÷ steps run). Percentiles
are nearest-rank: the smallest value with at least p% of the values at or below it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from functions.ledger.budget_records import MonthSpend, month_of
from functions.ledger.history import METADATA_KEY, MODEL_DECISION_KEY, TRIGGER_POLICY_KEY, Outcome
from functions.teams import Teams
from schemas.rules import parse_duration

NO_LABEL = "(none)"
STATES = ("succeeded", "failed", "cancelled", "rejected", "skipped")


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("report", help="what finished in a time window: states, failures, times, GPU-hours, cost")
    cmd.add_argument("--since", default="7d", help="the window, back from now: 7d, 24h, 90m (default 7d)")
    cmd.add_argument("--by", metavar="LABEL", help="one group per value of this request label (e.g. team)")
    cmd.add_argument("--json", action="store_true", help="the figures as JSON, for programs")
    cmd.add_argument(
        "--png",
        metavar="FILE",
        type=Path,
        help="also draw the window as a PNG: requests by outcome, promotions and data rejections, time to start, "
        "GPU time and cost, per 5 minutes for windows up to 2 hours, 15 minutes up to 6 hours, hours up to 2 days, "
        "else days",
    )
    cmd.set_defaults(run=run_report)


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def figures(outcomes: list[Outcome]) -> dict[str, Any]:
    """Every figure the report shows, for one group of outcomes."""
    states = Counter(o.state for o in outcomes)
    got_a_job = states["succeeded"] + states["failed"] + states["cancelled"]
    start = [s for o in outcomes if (s := o.start_seconds) is not None]
    run = [s for o in outcomes if (s := o.run_seconds) is not None]
    reasons = Counter(o.reason or "unknown" for o in outcomes if o.state == "failed")
    return {
        "requests": len(outcomes),
        "by_state": {state: states[state] for state in STATES},
        "failures_by_reason": dict(sorted(reasons.items())),
        "success_rate": round(states["succeeded"] / got_a_job, 4) if got_a_job else None,
        "time_to_start_seconds": {"p50": percentile(start, 50), "p95": percentile(start, 95)},
        "run_time_seconds": {"p50": percentile(run, 50), "p95": percentile(run, 95)},
        "gpu_hours": round(sum(o.gpu_hours for o in outcomes), 4),
        "estimated_cost_usd": round(sum(o.cost_usd for o in outcomes), 2),
        "data_rejections": data_rejections(outcomes),
        "first_step_seconds": first_step_figures(outcomes),
        "goodput": goodput_figures(outcomes),
    }


PHASES = ("total", "queue", "provisioning", "startup", "other")


def first_step_figures(outcomes: list[Outcome]) -> dict[str, Any]:
    """Accepted → first step (issue 43), p50 and p90 of the whole and of each phase, over the requests whose final
    event had a first step (the built-in trainer's, within its job's times)."""
    splits = [o.first_step for o in outcomes if o.first_step is not None]
    found: dict[str, Any] = {"requests": len(splits)}
    for phase in PHASES:
        values = [getattr(split, f"{phase}_seconds") for split in splits]
        found[phase] = {"p50": percentile(values, 50), "p90": percentile(values, 90)}
    return found


def goodput_figures(outcomes: list[Outcome]) -> dict[str, Any]:
    """Goodput over the group (issue 43): scheduling, every request's running time over the sum of their accepted →
    end; runtime, every request's steps kept over the sum of their steps run (built-in trainer runs only)."""
    timed = [(o.goodput.running_seconds, total) for o in outcomes if o.goodput and (total := o.total_seconds)]
    counted = [
        (g.steps_kept, g.steps_run)
        for o in outcomes
        if (g := o.goodput) and g.steps_run is not None and g.steps_kept is not None
    ]
    total_time, steps_run = sum(t for _, t in timed), sum(r for _, r in counted)
    return {
        "scheduling": round(sum(r for r, _ in timed) / total_time, 4) if total_time > 0 else None,
        "runtime": round(sum(k for k, _ in counted) / steps_run, 4) if steps_run > 0 else None,
        "steps_run": steps_run,
        "steps_kept": sum(k for k, _ in counted),
    }


def policy_figures(outcomes: list[Outcome], coalesced: list[Outcome]) -> dict[str, Any]:
    """What the trigger policies spared (issue 42): requests skipped at their claim, by reason, with the GPU-hours and
    cost their own estimates say they saved at most (each one's GPUs × its timeout); runs superseded by a newer run of
    their model (cancelled: whatever they ran counts as spent, nothing as saved); and markers a rule's quiet window
    folded into one request (`coalesced`, filed under history.TRIGGER_POLICY_KEY), with the GPU-hours saved."""
    skipped = [o for o in outcomes if o.state == "skipped"]
    folded = [o for o in coalesced if o.state == "coalesced"]
    skipped_hours = sum(o.saved_gpu_hours or 0 for o in skipped)
    coalesced_hours = sum(o.saved_gpu_hours or 0 for o in folded)
    return {
        "skipped": {
            "requests": len(skipped),
            "by_reason": dict(sorted(Counter(o.reason or "unknown" for o in skipped).items())),
            "gpu_hours_saved": round(skipped_hours, 4),
            "cost_saved_usd": round(sum(o.saved_usd or 0 for o in skipped), 2),
        },
        "superseded": sum(1 for o in outcomes if o.state == "cancelled" and o.reason == "superseded"),
        "coalesced": {
            "requests": len(folded),
            "markers": sum(o.markers or 0 for o in folded),
            "gpu_hours_saved": round(coalesced_hours, 4),
        },
        "gpu_hours_saved": round(skipped_hours + coalesced_hours, 4),
    }


def data_rejections(outcomes: list[Outcome]) -> dict[str, Any]:
    """Requests the data check refused at admission (issue 27) and what their runs could have spent at most: each
    rejected request's own estimate, its GPUs for its whole timeout."""
    rejected = [o for o in outcomes if o.state == "rejected" and o.reason == "data"]
    return {
        "requests": len(rejected),
        "gpu_hours_saved": round(sum(o.saved_gpu_hours or 0 for o in rejected), 4),
        "cost_saved_usd": round(sum(o.saved_usd or 0 for o in rejected), 2),
    }


def per_day(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Requests by state and GPU-hours, per day the requests finished on (UTC)."""
    days: dict[str, dict[str, Any]] = defaultdict(lambda: {"by_state": dict.fromkeys(STATES, 0), "gpu_hours": 0.0})
    for o in outcomes:
        day = days[f"{o.time.astimezone(UTC):%Y-%m-%d}"]
        day["by_state"][o.state] += 1
        day["gpu_hours"] += o.gpu_hours
    return {d: days[d] | {"gpu_hours": round(days[d]["gpu_hours"], 4)} for d in sorted(days)}


class TimelineBin(TypedDict):
    """One bin of the timeline: when it starts, and what finished in it."""

    start: str
    by_state: dict[str, int]
    gpu_hours: float
    estimated_cost_usd: float
    time_to_start_seconds: list[float]
    data_rejections: int
    promoted: int
    held: int


# The bin a window is cut into (issue 44, point 5): the first whose window it fits, so that an hour is a dozen bars of
# five minutes, not one wide bar, and a week seven days: (longest window, bin's name, bin).
BINS = (
    (timedelta(hours=2), "5 minutes", timedelta(minutes=5)),
    (timedelta(hours=6), "15 minutes", timedelta(minutes=15)),
    (timedelta(days=2), "hour", timedelta(hours=1)),
    (timedelta.max, "day", timedelta(days=1)),
)


def bin_for(window: timedelta) -> tuple[str, timedelta]:
    """The bin (its name and length) for a window of this length."""
    return next((name, step) for longest, name, step in BINS if window <= longest)


def timeline(
    outcomes: list[Outcome], since: datetime, until: datetime, decisions: list[Outcome] | None = None
) -> dict[str, Any]:
    """The window cut into equal bins (bin_for: five minutes for windows up to two hours … a day for windows over two
    days), on the clock's boundaries, every bin listed even when nothing finished in it, so that a chart shows the
    window as it was: per bin, requests by final state, the data check's rejections, the model decisions (promoted,
    held; `decisions`), GPU-hours and estimated cost, and each started request's time to start."""
    name, step = bin_for(until - since)
    start = since.astimezone(UTC)
    first = start.replace(hour=0 if step >= timedelta(days=1) else start.hour, minute=0, second=0, microsecond=0)
    first += ((start - first) // step) * step  # the bin holding `since`
    count = max(1, math.ceil((until - first) / step))
    bins: list[TimelineBin] = [
        {"start": (first + i * step).isoformat(), "by_state": dict.fromkeys(STATES, 0), "gpu_hours": 0.0,
         "estimated_cost_usd": 0.0, "time_to_start_seconds": [], "data_rejections": 0, "promoted": 0, "held": 0}
        for i in range(count)
    ]  # fmt: skip

    def slot(o: Outcome) -> TimelineBin:
        return bins[min(count - 1, max(0, int((o.time - first) / step)))]

    for o in outcomes:
        found = slot(o)
        found["by_state"][o.state] += 1
        found["gpu_hours"] += o.gpu_hours
        found["estimated_cost_usd"] += o.cost_usd
        found["data_rejections"] += o.state == "rejected" and o.reason == "data"
        if o.start_seconds is not None:
            found["time_to_start_seconds"].append(round(o.start_seconds, 1))
    for d in decisions or []:
        if d.state in ("promoted", "held"):
            slot(d)[d.state] += 1  # type: ignore[literal-required]
    for found in bins:
        found["gpu_hours"], found["estimated_cost_usd"] = (
            round(found["gpu_hours"], 4),
            round(found["estimated_cost_usd"], 2),
        )
    return {"bin": name, "bin_seconds": int(step.total_seconds()), "bins": bins}


def model_figures(decisions: list[Outcome]) -> dict[str, dict[str, int]]:
    """Per model, how many successful runs were promoted and how many held (issue 26), and how many promoted versions
    rolled out to the model's endpoint and how many were rolled back (issue 41)."""
    models: dict[str, dict[str, int]] = defaultdict(lambda: {"promoted": 0, "held": 0, "deployed": 0, "rolled_back": 0})
    for d in decisions:
        if d.model and d.state in ("promoted", "held", "deployed", "rolled_back"):
            models[d.model][d.state] += 1
    return {model: models[model] for model in sorted(models)}


def build_report(
    outcomes: list[Outcome],
    since: datetime,
    until: datetime,
    by: str | None,
    decisions: list[Outcome] | None = None,
    coalesced: list[Outcome] | None = None,
) -> dict[str, Any]:
    """The report's figures; `decisions`: the controller's model decisions in the window (promoted, held);
    `coalesced`: the trigger policies' own filings (history.TRIGGER_POLICY_KEY)."""
    decisions, coalesced = decisions or [], coalesced or []
    report: dict[str, Any] = {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "prices": "approximate: catalog list prices × run time, reducers included",
        "total": figures(outcomes)
        | {"models": model_figures(decisions), "trigger_policies": policy_figures(outcomes, coalesced)},
        "per_day": per_day(outcomes),
        "timeline": timeline(outcomes, since, until, decisions),
    }
    if by:
        groups: dict[str, list[Outcome]] = defaultdict(list)
        decided: dict[str, list[Outcome]] = defaultdict(list)
        folded: dict[str, list[Outcome]] = defaultdict(list)
        for o in outcomes:
            groups[_group_of(o, by)].append(o)
        for d in decisions:
            decided[_group_of(d, by)].append(d)
        for c in coalesced:
            folded[_group_of(c, by)].append(c)
        report["by"] = by
        report["groups"] = {
            value: figures(groups[value])
            | {
                "models": model_figures(decided[value]),
                "trigger_policies": policy_figures(groups[value], folded[value]),
            }
            for value in sorted(groups)
        }
    return report


def _group_of(outcome: Outcome, by: str) -> str:
    """`--by team` groups by the team a request arrived as (issue 32), the label only for outcomes before teams."""
    if by == "team" and outcome.team:
        return outcome.team
    return outcome.labels.get(by, NO_LABEL)


def budgets(months: Callable[[str], MonthSpend], teams: Teams, until: datetime) -> dict[str, dict[str, Any]]:
    """Per team with a monthly budget, this month (UTC) as its budget counts it (`months`: the team's month record,
    functions/ledger/budget_records.py): what its requests accepted this month spent once they ended, and the worst
    case its active ones still hold reserved; and the idle time of its warm pools (issue 43), which the spend includes.
    A team with warm pools and no budget is shown too (its budget null)."""
    month = month_of(until)
    found = {}
    for name, team in sorted(teams.teams.items()):
        if team.monthly_budget_usd is None and not team.warm_pools:
            continue
        state = months(name)
        found[name] = {
            "month": month,
            "spent_usd": round(state.spent_usd(), 2),
            "reserved_usd": round(state.reserved_usd(), 2),
            "budget_usd": team.monthly_budget_usd,
            "pool_idle_seconds": round(state.idle_seconds(), 1),
            "pool_idle_usd": round(state.idle_usd(), 2),
        }
    return found


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.1f}m" if value < 7200 else f"{value / 3600:.1f}h"


def _gpu_hours(hours: float) -> str:
    """GPU-hours to two places, and under one hour the GPU time in seconds or minutes too: a short run shows as
    `0.02 (90s of GPU time)`, not as 0.00 (issue 44, point 5)."""
    return f"{hours:.2f}" if hours >= 1 or hours == 0 else f"{hours:.2f} ({_seconds(hours * 3600)} of GPU time)"


def _lines(name: str, f: dict[str, Any]) -> list[str]:
    states = "  ".join(f"{s} {n}" for s, n in f["by_state"].items())
    reasons = ", ".join(f"{r} {n}" for r, n in f["failures_by_reason"].items()) or "-"
    rate = "-" if f["success_rate"] is None else f"{f['success_rate']:.0%}"
    start, run = f["time_to_start_seconds"], f["run_time_seconds"]
    return [
        f"{name}: {f['requests']} request{'' if f['requests'] == 1 else 's'}  ({states})",
        f"  success rate     {rate}",
        f"  failures         {reasons}",
        f"  time to start    p50 {_seconds(start['p50'])}  p95 {_seconds(start['p95'])}",
        f"  run time         p50 {_seconds(run['p50'])}  p95 {_seconds(run['p95'])}",
        f"  GPU-hours        {_gpu_hours(f['gpu_hours'])}   estimated cost ${f['estimated_cost_usd']:,.2f}",
        *_first_step_lines(f.get("first_step_seconds"), f.get("goodput")),
        *_data_lines(f.get("data_rejections")),
        *_policy_lines(f.get("trigger_policies")),
    ] + [
        f"  model {model:<10} promoted {n['promoted']}, held {n['held']}"
        + (f"; rollouts: deployed {n['deployed']}, rolled back {n['rolled_back']}" if n["deployed"] + n["rolled_back"]
           else "")
        for model, n in f.get("models", {}).items()
    ]  # fmt: skip


def _first_step_lines(first_step: dict[str, Any] | None, goodput: dict[str, Any] | None) -> list[str]:
    """Time to first step by phase and goodput (issue 43), when any request in the group has them."""
    lines = []
    if first_step and first_step["requests"]:

        def shown(phase: str) -> str:
            return f"p50 {_seconds(first_step[phase]['p50'])} p90 {_seconds(first_step[phase]['p90'])}"

        lines += [
            f"  to first step    {shown('total')}  ({first_step['requests']} with a first step)",
            f"    queue {shown('queue')} · provisioning {shown('provisioning')} · start-up {shown('startup')} "
            f"· other {shown('other')}",
        ]
    if goodput and (goodput["scheduling"] is not None or goodput["runtime"] is not None):
        scheduling = "-" if goodput["scheduling"] is None else f"{goodput['scheduling']:.0%}"
        runtime = "-" if goodput["runtime"] is None else f"{goodput['runtime']:.0%}"
        lines.append(
            f"  goodput          scheduling {scheduling} (running of accepted → end)  runtime {runtime} "
            f"({goodput['steps_kept']} of {goodput['steps_run']} steps kept)"
        )
    return lines


def _data_lines(rejections: dict[str, Any] | None) -> list[str]:
    if not rejections or not rejections["requests"]:
        return []
    return [
        f"  data rejections  {rejections['requests']}, saving up to {rejections['gpu_hours_saved']:.2f} GPU-hours "
        f"(${rejections['cost_saved_usd']:,.2f}; each request's GPUs × its timeout)"
    ]


def _policy_lines(policies: dict[str, Any] | None) -> list[str]:
    """The trigger policies' lines (issue 42), only when one of them did anything in the window."""
    if not policies:
        return []
    skipped, coalesced = policies["skipped"], policies["coalesced"]
    if not (skipped["requests"] or coalesced["requests"] or policies["superseded"]):
        return []
    reasons = ", ".join(f"{reason} {n}" for reason, n in skipped["by_reason"].items()) or "-"
    return [
        f"  skipped          {skipped['requests']} ({reasons}), saving up to {skipped['gpu_hours_saved']:.2f} "
        f"GPU-hours (${skipped['cost_saved_usd']:,.2f})",
        f"  superseded       {policies['superseded']} (cancelled for a newer run of their model; nothing saved)",
        f"  coalesced        {coalesced['requests']} requests from {coalesced['markers']} markers, saving up to "
        f"{coalesced['gpu_hours_saved']:.2f} GPU-hours",
        f"  policies saved   up to {policies['gpu_hours_saved']:.2f} GPU-hours (each run's GPUs × its timeout)",
    ]


def format_report(report: dict[str, Any]) -> str:
    head = (
        f"trainctl report: requests finished {report['since'][:19]} → {report['until'][:19]} UTC ({report['prices']})"
    )
    lines = [head, *_lines("all", report["total"])]
    for value, group in report.get("groups", {}).items():
        lines += _lines(f"{report['by']}={value}", group)
        if (budget := report.get("budgets", {}).get(value)) is not None:
            of = "no budget" if budget["budget_usd"] is None else f"of ${budget['budget_usd']:,.2f}"
            lines.append(
                f"  budget {budget['month']}  spent ${budget['spent_usd']:,.2f} and up to "
                f"${budget['reserved_usd']:,.2f} reserved, {of}"
            )
            if budget["pool_idle_seconds"]:
                lines.append(
                    f"  warm pools idle  {_seconds(budget['pool_idle_seconds'])}  ${budget['pool_idle_usd']:,.2f} "
                    "(in the spend)"
                )
    return "\n".join(lines)


def report_from_ledger(since: timedelta, by: str | None = None) -> dict[str, Any]:
    from functions.cloud.gcs import Gcs
    from functions.ledger.requests import Ledger
    from trainctl.context import cli_settings

    settings = cli_settings()
    until = datetime.now(UTC)
    start = until - since
    gcs = Gcs(settings.project)
    ledger = Ledger(gcs, settings.control_bucket)
    found = ledger.outcomes_by_key(start, (METADATA_KEY, MODEL_DECISION_KEY, TRIGGER_POLICY_KEY))
    report = build_report(found[METADATA_KEY], start, until, by, found[MODEL_DECISION_KEY], found[TRIGGER_POLICY_KEY])
    if by == "team" and settings.teams is not None:
        from functions.capacity.budgets import seed_month
        from functions.ledger.budget_records import BudgetRecords

        records = BudgetRecords(gcs, settings.control_bucket, functools.partial(seed_month, ledger))
        report["budgets"] = budgets(lambda team: records.figures(team, month_of(until)), settings.teams, until)
    return report


def run_report(args: argparse.Namespace) -> int:
    try:
        window = timedelta(seconds=parse_duration(args.since))
    except ValueError as exc:
        print(f"--since: {exc}")
        return 2
    report = report_from_ledger(window, args.by)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    if args.png:
        from trainctl.report_chart import draw

        draw(report, args.png)
        if not args.json:
            print(f"chart: {args.png}")
    return 0
