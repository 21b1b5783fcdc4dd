"""Pure: a request's next attempt after one ended without success — into the same output directory, on the same rung
or down the capacity ladder (functions/capacity/ladder.py) — or its end when the ladder is exhausted; and the pause
before a refused submission is tried again. What a decision on a record changes is a Transition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from functions.capacity import ladder
from functions.cloud.job_snapshot import JobSnapshot
from functions.ledger.record import Record
from schemas.events import Failed, FailureReason, JobEvent, Retrying, RungOutcome


@dataclass
class Transition:
    """What an observation changes: events to queue and an action for the orchestrator."""

    events: list[JobEvent]
    action: Literal["none", "cancel", "resubmit", "load_metrics", "diagnose", "load_progress"] = "none"


def resubmit(
    record: Record,
    events: list[JobEvent],
    common: dict[str, Any],
    reason: FailureReason,
    text: str,
    now: datetime,
    left: RungOutcome | None = None,
    job: JobSnapshot | None = None,
) -> Transition:
    """A new attempt of the request, into the same output directory (the trainer resumes from its checkpoint);
    `left`: the rung the ladder moves down from (to the next one it did not skip); `job`: the attempt's job, whose
    run (start to end) the record counts at the rung's price before it moves."""
    if job is not None and job.start_time is not None:
        record.add_run(((job.end_time or now) - job.start_time).total_seconds() / 3600)
    ladder_fields: dict[str, Any] = {}
    if left is not None:
        ladder.move_down(record, left.outcome)
        rung = record.ladder[record.rung]
        text = f"{text}; moving down the ladder to rung {record.rung}: {rung.resources}"
    if ladder.has_fallbacks(record):
        ladder_fields = {"rung": record.rung, "rung_resources": record.ladder[record.rung].resources, "left_rung": left}
    events.append(
        Retrying(
            **common | {"message": f"{text}; resubmitting"},
            reason=reason,
            max_attempts=record.max_attempts,
            **ladder_fields,
        )
    )
    record.state, record.job_name, record.job_state = "claimed", None, None
    record.attempt += 1
    record.lease_until, record.not_before, record.stuck = None, now, False
    return Transition(events, "resubmit")


def ladder_exhausted(
    record: Record,
    events: list[JobEvent],
    common: dict[str, Any],
    reason: FailureReason,
    why: str,
    job: JobSnapshot | None = None,
) -> Transition:
    """Every rung has been tried (or skipped): the request fails, listing what became of each rung."""
    record.state, record.failure_reason, record.message = "failed", reason, f"the capacity ladder is exhausted: {why}"
    rungs = ladder.all_outcomes(record, why)
    summary = "; ".join(f"rung {o.rung} ({o.resources}): {o.outcome}" for o in rungs)
    events.append(
        Failed(
            **common | {"message": f"the capacity ladder is exhausted ({reason}): {summary}"},
            reason=reason,
            artifacts=record.artifacts,
            duration_seconds=job.duration_seconds if job else None,
            rungs=rungs,
        )
    )
    return Transition(events)


def backoff(attempt: int, base: timedelta = timedelta(minutes=2), cap: timedelta = timedelta(minutes=30)) -> timedelta:
    return min(cap, base * (2 ** max(0, attempt - 1)))
