"""What a request may still spend at worst, for a team's monthly budget (issue 32, point 4).

Pure. The worst case of a request is its costliest rung run for its whole timeout on every attempt it may make
(the same figure the max_request_cost_usd guardrail reads); an active request's is what its ended attempts ran
plus that for the attempts it has left, the current one included.
"""

from __future__ import annotations

from functions import planning
from functions.record import Record
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
