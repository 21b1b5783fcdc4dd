"""The capacity ladder (a request's `resources`, then its `fallbacks`): its rungs as a record keeps them
(record.LadderRung), and the pure decision of when to move down one — a stockout or quota failure after Vertex's
own retries, a wait longer than the rung's max_pending (in trainctl's queue or in Vertex's), or more preempted
attempts than the rung allows.

Each move is a new attempt into the same output directory, so the trainer resumes from its checkpoint.
"""

from __future__ import annotations

from functions.jobs import planning
from functions.ledger.record import LadderRung, Record
from schemas.catalog import quota_metric, quota_metrics
from schemas.events import RungOutcome
from schemas.request import TrainingJobRequest


def ladder_of(request: TrainingJobRequest, default_region: str) -> list[LadderRung]:
    """Every rung of the request, rung 0 first."""
    return [
        LadderRung(
            resources=rung.describe(default_region),
            region=rung.region or default_region,
            quota_metric=quota_metric(rung.resources.accelerator_type, rung.strategy),
            quota_metrics=list(quota_metrics(rung.resources.accelerator_type, rung.strategy)),
            gpus=rung.resources.total_gpus,
            max_pending=rung.max_pending,
            max_preemptions=rung.max_preemptions,
            hourly_usd=planning.estimate_cost(at, planning.plan_reduction_server(at)).hourly_usd,
        )
        for rung in request.rungs()
        for at in [request.at_rung(rung.index)]
    ]


def has_fallbacks(record: Record) -> bool:
    return len(record.ladder) > 1


def next_rung(record: Record) -> int | None:
    """The next rung below the current one that admission did not skip, if an attempt is left for it."""
    if record.attempt >= record.max_attempts:
        return None
    for index in range(record.rung + 1, len(record.ladder)):
        if record.ladder[index].skipped is None:
            return index
    return None


def leaves_rung(record: Record, reason: str, stocked_out: bool = False) -> bool:
    """Whether a failure for `reason` is the current rung's fault: out of capacity or quota (a job that ran and
    then met a stockout Vertex could not get past, `stocked_out`, counts too), or preempted more often than the
    rung allows. (Internal errors and hangs are tried again on the same machines.)"""
    if reason in ("capacity", "quota") or stocked_out:
        return True
    return reason == "preemption" and record.rung_preemptions > record.ladder[record.rung].max_preemptions


def left_because(record: Record, reason: str, stocked_out: bool = False) -> RungOutcome:
    """The current rung's outcome as a failure for `reason` leaves it."""
    if stocked_out:
        return outcome(record, "stocked out after Vertex's own retries")
    if reason == "preemption":
        allowed = record.ladder[record.rung].max_preemptions
        why = f"preempted in {record.rung_preemptions} attempts (max_preemptions {allowed})"
    else:
        why = "stocked out after Vertex's own retries" if reason == "capacity" else "refused for GPU quota"
    return outcome(record, why)


def final_outcomes(record: Record, why: str) -> list[RungOutcome] | None:
    """Every rung's outcome for a request that ends on the current rung; None without fallbacks."""
    return all_outcomes(record, why) if has_fallbacks(record) else None


def outcome(record: Record, why: str) -> RungOutcome:
    """The current rung's outcome, as the ladder leaves it (or ends on it)."""
    rung = record.ladder[record.rung]
    return RungOutcome(rung=record.rung, resources=rung.resources, attempts=record.rung_attempts, outcome=why)


def move_down(record: Record, why: str) -> RungOutcome:
    """Leave the current rung for the next one (next_rung must have found one); the rung left, and why."""
    target = next_rung(record)
    assert target is not None, "move_down without a rung to move to"
    left = outcome(record, why)
    record.rung_history.append(left)
    record.rung, record.rung_attempts, record.rung_preemptions = target, 0, 0
    record.max_pending = record.ladder[target].max_pending
    return left


def all_outcomes(record: Record, why: str) -> list[RungOutcome]:
    """Every rung's outcome, in ladder order, when the ladder ends on the current rung for `why`: the rungs left
    and skipped (from the record's history), this one, and those never reached."""
    known = [*record.rung_history, outcome(record, why)]
    seen = {o.rung for o in known}
    unreached = [
        RungOutcome(rung=index, resources=rung.resources, outcome="not reached")
        for index, rung in enumerate(record.ladder)
        if index not in seen
    ]
    return sorted(known + unreached, key=lambda o: o.rung)


def skipped_outcomes(ladder: list[LadderRung]) -> list[RungOutcome]:
    """The rungs admission skipped, and why."""
    return [
        RungOutcome(rung=index, resources=rung.resources, outcome=rung.skipped)
        for index, rung in enumerate(ladder)
        if rung.skipped is not None
    ]
