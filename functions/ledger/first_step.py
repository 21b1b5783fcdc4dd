"""Pure: time to first step and goodput (issue 43) — what a request's final event says of how long it took to
train at all, and how much of its time and work counted.

Accepted → first step is split into phases that sum to the whole: trainctl's quota queue, Vertex provisioning (the
job's create → start), start-up (the job's start → the trainer's first step) and the rest (admission, submission,
earlier attempts). The first step and the step counts are the trainer's word (checkpoints/progress.json, untrusted:
functions/untrusted/job_outputs.py bounds them); `trainer_figures` keeps a first step only inside its job's own
[start, end], so a forged or stale one (an earlier attempt's) is ignored, never trusted.

Vertex's times (googleapis google/cloud/aiplatform/v1/custom_job.proto, CustomJob): `create_time` "Time when the
CustomJob was created", `start_time` "Time when the CustomJob for the first time entered the JOB_STATE_RUNNING
state", `end_time` when it entered SUCCEEDED, FAILED or CANCELLED. So create → start is the job's wait in PENDING and
QUEUED (provisioning), and a job Vertex restarts itself (a Spot preemption, a stockout retry) keeps its first start
time, as the trainer keeps the first step of its job across restarts (trainer/outputs/progress.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.events import FirstStep, Goodput, Timestamps


@dataclass(frozen=True)
class TrainerFigures:
    """What the built-in trainer recorded of an attempt, once checked against its job's times."""

    first_step: datetime | None
    steps_run: int | None
    steps_kept: int | None


def trainer_figures(
    first_step: float | None, steps_run: int | None, steps_kept: int | None, job: Timestamps, now: datetime
) -> TrainerFigures:
    """The trainer's figures as far as they can be believed: a first step (Unix seconds) only within its job's
    start → end (now, for a job not ended), step counts only when 0 ≤ kept ≤ run."""
    step_time: datetime | None = None
    if first_step is not None and job.started is not None:
        try:
            when = datetime.fromtimestamp(first_step, tz=job.started.tzinfo)
        except (OverflowError, OSError, ValueError):
            when = None
        if when is not None and job.started <= when <= (job.ended or now):
            step_time = when
    counts_hold = steps_run is not None and steps_kept is not None and 0 <= steps_kept <= steps_run
    return TrainerFigures(step_time, steps_run if counts_hold else None, steps_kept if counts_hold else None)


def _ms(delta: timedelta) -> int:
    return max(0, round(delta.total_seconds() * 1000))


def first_step_split(
    accepted: datetime, queued_seconds: float, job: Timestamps | None, first_step: datetime | None
) -> FirstStep | None:
    """Accepted → `first_step`, by phase; None without a first step inside the last attempt's job (see
    trainer_figures). Each phase is at least 0 and no more than what is left of the whole (clocks of different
    machines may disagree by a little), and the rest is `other_seconds`, so the phases always sum to the whole."""
    if job is None or job.started is None or first_step is None or not job.started <= first_step:
        return None
    total = _ms(first_step - accepted)
    startup = min(_ms(first_step - job.started), total)
    provisioning = min(_ms(job.started - job.created), total - startup) if job.created else 0
    queue = min(max(0, round(queued_seconds * 1000)), total - startup - provisioning)
    other = total - startup - provisioning - queue
    return FirstStep(
        total_seconds=total / 1000,
        queue_seconds=queue / 1000,
        provisioning_seconds=provisioning / 1000,
        startup_seconds=startup / 1000,
        other_seconds=other / 1000,
    )


def goodput(
    accepted: datetime,
    end: datetime,
    earlier_run_seconds: float,
    job: Timestamps | None,
    steps_run: int | None,
    steps_kept: int | None,
) -> Goodput:
    """Scheduling goodput: every attempt's running time over accepted → `end` (the last job's end, or the final
    event's time when it has none); runtime goodput: steps kept over steps run."""
    last = (job.ended - job.started).total_seconds() if job and job.started and job.ended else 0.0
    running = max(0.0, earlier_run_seconds) + max(0.0, last)
    total = (end - accepted).total_seconds()
    scheduling = round(min(1.0, running / total), 4) if total > 0 else None
    runtime = None
    if steps_run is not None and steps_kept is not None and 0 <= steps_kept <= steps_run:
        runtime = round(steps_kept / steps_run, 4) if steps_run > 0 else None
    return Goodput(
        scheduling=scheduling,
        runtime=runtime,
        running_seconds=round(running, 3),
        steps_run=steps_run,
        steps_kept=steps_kept,
    )
