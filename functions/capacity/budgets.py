"""What a request may still spend at worst, and whether it fits its team's monthly budget (issue 32, point 4).

Pure (the history and the active records are handed in). The worst case of a request is its costliest rung run for
its whole timeout on every attempt it may make (the same figure the max_request_cost_usd guardrail reads); an active
request's is what its ended attempts ran plus that for the attempts it has left, the current one included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from functions.jobs import planning
from functions.ledger.history import Outcome
from functions.ledger.record import Record
from functions.teams import Teams
from schemas.events import Budget
from schemas.request import TrainingJobRequest


def costliest_attempt_usd(request: TrainingJobRequest) -> float:
    """The most one attempt of the request can cost: its costliest rung for its whole timeout."""
    costs = []
    for rung in request.rungs():
        at = request.at_rung(rung.index)
        costs.append(planning.estimate_cost(at, planning.plan_reduction_server(at)).max_usd)
    return max(costs)


def request_worst_case_usd(request: TrainingJobRequest) -> float:
    return costliest_attempt_usd(request) * request.scheduling.max_attempts


def worst_case_usd(record: Record) -> float:
    """What an active request counts against its team's budget: what its attempts that ended ran, and at worst the
    attempts it has left (the current one included)."""
    request = TrainingJobRequest.model_validate(record.request)
    left = costliest_attempt_usd(request) * max(1, record.max_attempts - record.attempt + 1)
    return record.earlier_cost_usd + left


def over_budget(
    teams: Teams | None,
    team: str,
    request: TrainingJobRequest,
    now: datetime,
    outcomes: Callable[[datetime], Iterable[Outcome]],
    active: Callable[[], Iterable[Record]],
) -> Budget | None:
    """The team's budget figures when this request's worst case does not fit what is left of it this month: what
    its requests that ended this month cost (`outcomes` since a time: the history), plus the worst case of its
    `active` ones; None when it fits, or the team has no budget."""
    budget = teams.teams[team].monthly_budget_usd if teams and team in teams.teams else None
    if budget is None:
        return None
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    spent = sum(o.cost_usd for o in outcomes(month_start) if o.team == team)
    held = sum(worst_case_usd(r) for r in active() if r.team == team and not r.final)
    needed = request_worst_case_usd(request)
    if spent + held + needed <= budget:
        return None
    return Budget(
        team=team,
        month=f"{month_start:%Y-%m}",
        budget_usd=round(budget, 2),
        spent_usd=round(spent, 2),
        active_usd=round(held, 2),
        request_usd=round(needed, 2),
    )


def budget_error(budget: Budget) -> str:
    """The rejection's line for a request over its team's budget: the figures, and what would make it fit."""
    total = budget.spent_usd + budget.active_usd + budget.request_usd
    return (
        f"budget: team {budget.team}'s budget for {budget.month} is ${budget.budget_usd:,.2f}; its requests spent "
        f"${budget.spent_usd:,.2f}, its active ones may spend up to ${budget.active_usd:,.2f} more, and this one "
        f"up to ${budget.request_usd:,.2f} (its costliest rung × max_attempts): ${total:,.2f} in all. Wait for "
        "active requests to end, lower this one's GPUs, timeout or max_attempts, or ask the operator for a larger "
        "monthly_budget_usd"
    )
