"""What a request may still spend at worst, and whether it fits its team's monthly budget (issue 32, point 4), reserved
atomically in the team's month record (issue 40, point 1: functions/ledger/budget_records.py).

The worst case of a request is its costliest rung run for its whole timeout on every attempt it may make (the same
figure the max_request_cost_usd guardrail reads); an active request's is what its ended attempts ran plus that for
the attempts it has left, the current one included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from functions.jobs import planning
from functions.ledger.budget_records import BudgetRecords, Held, MonthSpend, month_of
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
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


def over(budget_usd: float, team: str, month: str, state: MonthSpend, khash: str, needed: float) -> Budget | None:
    """The team's budget figures when `needed` (the worst case of the request with key hash `khash`) does not fit
    what is left of the month: what its requests accepted this month spent once they ended, plus the worst case of
    its other active ones; None when it fits."""
    spent = state.spent_usd()
    held = state.reserved_usd(but=khash)
    if spent + held + needed <= budget_usd + 1e-9:  # exactly the budget fits; sums of cents drift by far less
        return None
    return Budget(
        team=team,
        month=month,
        budget_usd=round(budget_usd, 2),
        spent_usd=round(spent, 2),
        active_usd=round(held, 2),
        request_usd=round(needed, 2),
    )


@dataclass(frozen=True)
class Reservation:
    """What reserving a new request's worst case came to: the month it counts in (None: its team has no budget),
    and the figures when it does not fit (nothing is reserved then)."""

    month: str | None
    over: Budget | None = None


@dataclass
class Budgets:
    """Each team's monthly budget, reserved by compare-and-swap on its month's record (functions/ledger/
    budget_records.py): a new request's worst case before its claim, a resubmission's again before its job."""

    teams: Teams | None
    records: BudgetRecords
    clock: Callable[[], datetime]

    def budget_of(self, team: str | None) -> float | None:
        teams = self.teams
        return teams.teams[team].monthly_budget_usd if teams and team in teams.teams else None

    def reserve(self, request: TrainingJobRequest, team: str, khash: str) -> Reservation:
        """Reserve the new request's worst case in this month's record, unless it does not fit with what the team's
        requests spent and may still spend. A redelivery replaces its own reservation, never adds a second."""
        budget = self.budget_of(team)
        if budget is None:
            return Reservation(None)
        now = self.clock()
        month = month_of(now)
        needed = request_worst_case_usd(request)
        refused = self._hold(team, month, khash, needed, 1, budget, now, again=False)
        return Reservation(month, refused)

    def release(self, team: str, month: str, khash: str, claimed: Callable[[], bool]) -> None:
        """A new request refused after its reservation holds nothing of the month, unless `claimed()` says another
        delivery of it has meanwhile created its record (whose reservation this is then)."""

        def change(state: MonthSpend) -> bool:
            if khash not in state.reserved or claimed():
                return False
            del state.reserved[khash]
            return True

        self.records.change(team, month, change, seeded=False)

    def recheck(self, record: Record) -> Budget | None:
        """Before a new attempt's job: the request's worst case from here on (what its ended attempts ran, and its
        costliest rung for every attempt left) replaces its reservation, unless it does not fit what is left of
        its month (the figures; the reservation is left as it was). Checked once per attempt."""
        budget = self.budget_of(record.team)
        if budget is None or record.budget_month is None or record.team is None:
            return None
        needed = worst_case_usd(record)
        return self._hold(
            record.team, record.budget_month, record.key_hash, needed, record.attempt, budget, self.clock(), again=True
        )

    def _hold(
        self, team: str, month: str, khash: str, usd: float, attempt: int, budget: float, now: datetime, again: bool
    ) -> Budget | None:
        refused: Budget | None = None

        def change(state: MonthSpend) -> bool:
            nonlocal refused
            refused = None
            held = state.reserved.get(khash)
            if again and held is not None and held.attempt == attempt:
                return False  # this attempt was checked already (a redelivery, a claim taken over)
            refused = over(budget, team, month, state, khash, usd)
            if refused is not None:
                return False
            state.reserved[khash] = Held(usd, now, attempt)  # `at`: a reservation with no record yet is this recent
            return True

        self.records.change(team, month, change)
        return refused


def seed_month(ledger: Ledger, team: str, month: str) -> MonthSpend:
    """A month with no record yet, as the history and the active records have it (a deployment from before the
    records: the rollout's month): what the team's requests accepted in it spent once they ended, and the worst
    case of its active ones accepted in it. Any later month starts empty, as nothing from before counts in it."""
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    state = MonthSpend()
    for outcome in ledger.outcomes(start):
        if outcome.team == team and outcome.accepted is not None and month_of(outcome.accepted) == month:
            state.spent_before += outcome.cost_usd
    for record in ledger.active_records():
        if record.team == team and not record.final and not record.budget_month and month_of(record.created) == month:
            state.reserved[record.key_hash] = Held(worst_case_usd(record), record.created, record.attempt)
    return state


def budget_error(budget: Budget, resubmission: bool = False) -> str:
    """The line for a request over its team's budget: the figures, and what would make it fit. `resubmission`: the
    request was accepted, and its next attempt is what no longer fits."""
    total = budget.spent_usd + budget.active_usd + budget.request_usd
    this = (
        "this one's attempts from here on up to ${:,.2f} (what its ended attempts ran, and its costliest rung for "
        "each attempt left)"
        if resubmission
        else "this one up to ${:,.2f} (its costliest rung × max_attempts)"
    ).format(budget.request_usd)
    return (
        f"budget: team {budget.team}'s budget for {budget.month} is ${budget.budget_usd:,.2f}; its requests accepted "
        f"that month spent ${budget.spent_usd:,.2f}, its other active ones may spend up to ${budget.active_usd:,.2f} "
        f"more, and {this}: ${total:,.2f} in all. Wait for active requests to end, lower this one's GPUs, timeout or "
        "max_attempts, or ask the operator for a larger monthly_budget_usd"
    )
