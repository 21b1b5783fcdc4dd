"""Pure: what a Vertex job state means for a request's ledger record (functions/ledger/record.py) and for the events to
publish — one function per state. A new attempt, on the same rung or down the ladder, is
functions/capacity/attempts.py's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from functions.capacity import ladder
from functions.capacity.attempts import Transition, ladder_exhausted, resubmit
from functions.cloud.failures import (
    QUOTA_ADVICE,
    RESUBMITTABLE,
    blamed_on_data,
    classify_job_failure,
    is_stockout,
    quota_metric,
)
from functions.cloud.job_snapshot import JobSnapshot
from functions.ledger.record import Record
from schemas.events import (
    Cancelled,
    Failed,
    JobEvent,
    JobRef,
    Running,
    Stuck,
    Succeeded,
    Timestamps,
)
from schemas.rules import format_duration

# Vertex states in which a job has not started yet, and those in which it has ended.
VERTEX_WAITING = frozenset({"JOB_STATE_QUEUED", "JOB_STATE_PENDING"})
VERTEX_RUNNING = frozenset({"JOB_STATE_RUNNING", "JOB_STATE_UPDATING"})
VERTEX_ENDED = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"})
# How far ahead of the controller's clock a heartbeat's time may be and still count as one: the trainer's node and
# the function read different clocks. Further ahead, it is no evidence either way (see _silence).
HEARTBEAT_CLOCK_SKEW_SECONDS = 300


# ---- observing a job -----------------------------------------------------------------------------------


def _envelope(record: Record, job: JobSnapshot, ref: JobRef, now: datetime) -> dict[str, Any]:
    """The fields every event of one observation shares: the record's envelope, the job and its times."""
    timestamps = Timestamps(created=job.create_time, started=job.start_time, ended=job.end_time)
    return record.envelope(now) | {"job": ref, "timestamps": timestamps}


@dataclass(frozen=True)
class _Observed:
    """One observation of a record's job, with what the orchestrator has loaded for the decision so far (see
    `observe`): each state's function below reads what it needs of it."""

    job: JobSnapshot
    now: datetime
    common: dict[str, Any]  # the fields every event of this observation shares (_envelope)
    max_pending: int
    max_silence: int | None
    metrics: dict[str, Any] | None
    metrics_note: str
    diagnosis: str | None
    data_failure: bool
    progress: dict[str, Any] | None

    def fields(self, message: str) -> dict[str, Any]:
        """An event's common fields, with its message."""
        return self.common | {"message": message}


def observe(
    record: Record,
    job: JobSnapshot,
    ref: JobRef,
    now: datetime,
    max_pending: int,
    metrics: dict[str, Any] | None,
    diagnosis: str | None = None,
    *,
    max_silence: int | None = None,
    progress: dict[str, Any] | None = None,
    metrics_note: str = "",
    data_failure: bool = False,
) -> Transition:
    """Fold one observation of the record's job into the record; pure apart from mutating `record`. What the job's
    Vertex state means is the function _ON_STATE names for it, below.

    `metrics` is None until the orchestrator has loaded metrics.json: a SUCCEEDED job first asks for it.
    `diagnosis` is None until the orchestrator has looked for the cause of a user failure (the trainer's
    failure note, a missing dataset, an output folder nothing reached): such a FAILED job first asks for it.
    `progress` is None until the orchestrator has read the trainer's progress record ({} when there is none):
    with a `max_silence`, a RUNNING job of the built-in trainer first asks for it, and one whose progress has not
    moved for longer is hung — Vertex restarts only workers that exit, and a collective stuck forever never exits.
    `metrics_note` says what of metrics.json could not be used (the `succeeded` message carries it).
    `data_failure`: the diagnosis found the built-in trainer's note saying it refused the data (issue 27: drift above
    max_drift, before its first epoch): the reason is `data` instead of `user`, and it is not tried again either.
    """
    seen = _Observed(
        job=job,
        now=now,
        common=_envelope(record, job, ref, now),
        max_pending=max_pending,
        max_silence=max_silence if writes_heartbeat(record.request) else None,
        metrics=metrics,
        metrics_note=metrics_note,
        diagnosis=diagnosis,
        data_failure=data_failure,
        progress=progress,
    )
    record.job_state = job.state
    return _ON_STATE.get(job.state, _passing)(record, seen)


def _mark_running(record: Record, seen: _Observed, events: list[JobEvent]) -> None:
    """`running`, once: the record leaves `submitted`."""
    if record.state == "submitted":
        events.append(Running(**seen.fields(f"job {seen.job.job_id} is running")))
        record.state = "running"


def _running_if_missed(record: Record, seen: _Observed, events: list[JobEvent]) -> None:
    """A job that ended before any observation saw it run: its `running` first, when it did start."""
    if seen.job.start_time is not None:
        _mark_running(record, seen, events)


def _waiting(record: Record, seen: _Observed) -> Transition:
    """QUEUED or PENDING: the job waits to start; past max_pending it is stuck, and cancelled (its reason: quota in
    QUEUED, capacity in PENDING)."""
    job = seen.job
    if record.stuck or record.superseded_by:
        return Transition([], "cancel")  # the earlier cancel has not taken effect (or failed): again
    if job.start_time is not None or record.state == "running":
        # Vertex restarts a job that ran, by itself, after a preemption, a stockout or a crash (reference/
        # apis.md §6): the same job, the same attempt; max_pending is about waiting to start.
        return Transition([])
    waited = (seen.now - job.create_time).total_seconds() if job.create_time else 0
    if waited <= seen.max_pending:
        return Transition([])
    reason = "quota" if job.state == "JOB_STATE_QUEUED" else "capacity"
    record.stuck, record.failure_reason = True, reason
    text = f"job waited {format_duration(int(waited))} in {job.state}, longer than max_pending; " + (
        f"Vertex holds a job in QUEUED until GPU quota frees up. {QUOTA_ADVICE}"
        if reason == "quota"
        else "its machines could not be provisioned. Try another region or GPU type, or "
        "scheduling.strategy flex_start, which waits for capacity instead of failing."
    )
    stuck = Stuck(
        **seen.fields(text),
        reason=reason,
        job_state=job.state,
        pending_seconds=int(waited),
        max_pending_seconds=seen.max_pending,
    )
    return Transition([stuck], "cancel")


def _running(record: Record, seen: _Observed) -> Transition:
    """RUNNING or UPDATING: `running` the first time; with a heartbeat to judge (max_silence), a job whose
    training has not advanced for longer than max_silence is hung, and cancelled."""
    job, max_silence, progress = seen.job, seen.max_silence, seen.progress
    if record.stuck or record.superseded_by:
        return Transition([], "cancel")  # declared hung, or replaced; the earlier cancel has not taken effect
    if max_silence is not None and progress is None:
        return Transition([], "load_progress")
    events: list[JobEvent] = []
    _mark_running(record, seen, events)
    silent = _silence(progress, seen.now, job.start_time)
    if max_silence is None or silent is None or silent <= max_silence:
        return Transition(events)
    record.stuck, record.failure_reason = True, "hang"
    step = progress.get("step") if progress else None
    text = (
        f"job {job.job_id} is RUNNING but its training has not advanced for {format_duration(int(silent))} "
        f"(step {step}), longer than max_silence: a hang (a collective stuck on some rank); cancelling it"
    )
    events.append(
        Stuck(
            **seen.fields(text),
            reason="hang",
            job_state=job.state,
            silent_seconds=int(silent),
            max_silence_seconds=max_silence,
        )
    )
    return Transition(events, "cancel")


def _succeeded(record: Record, seen: _Observed) -> Transition:
    """SUCCEEDED: `succeeded` with the run's metrics, once metrics.json is loaded."""
    job = seen.job
    if seen.metrics is None:
        return Transition([], "load_metrics")
    events: list[JobEvent] = []
    _running_if_missed(record, seen, events)
    record.state = "succeeded"
    text = f"job {job.job_id} succeeded" + (f" in {format_duration(int(d))}" if (d := job.duration_seconds) else "")
    text += f"; {seen.metrics_note}" if seen.metrics_note else ""
    events.append(
        Succeeded(
            **seen.fields(text),
            artifacts=record.artifacts,
            metrics=seen.metrics,
            duration_seconds=job.duration_seconds,
            cost=record.cost,
        )
    )
    return Transition(events)


def _failed(record: Record, seen: _Observed) -> Transition:
    """FAILED, after Vertex's own retries: a user failure is diagnosed first. Vertex has already restarted the job
    itself (stockout: 3 times, Spot preemption: 6), so what follows is the controller's own, later attempt: on the
    next rung of the ladder when this one is out of capacity or quota or preempted too often, else on the same rung
    while attempts remain; else the request fails."""
    job = seen.job
    reason = classify_job_failure(job.error_code, job.error_message, started=job.start_time is not None)
    if reason == "user" and seen.diagnosis is None:
        return Transition([], "diagnose")
    reason = blamed_on_data(reason, seen.data_failure)
    events: list[JobEvent] = []
    _running_if_missed(record, seen, events)
    message = f"{job.error_message} {seen.diagnosis}".strip() if seen.diagnosis else job.error_message
    if reason == "data" and seen.diagnosis:  # the trainer's own words say what changed: first, before Vertex's
        message = f"{seen.diagnosis} ({job.error_message})"
    record.failure_reason, record.message = reason, message
    text = f"attempt {record.attempt} failed ({reason}) after Vertex's own retries: {job.error_message}"
    if reason == "preemption":
        record.rung_preemptions += 1
    stocked_out = is_stockout(job.error_message)
    if record.superseded_by:
        pass  # a newer run of its model replaced it: never tried again
    elif ladder.has_fallbacks(record) and ladder.leaves_rung(record, reason, stocked_out):
        if ladder.next_rung(record) is not None:
            left = ladder.left_because(record, reason, stocked_out)
            return resubmit(record, events, seen.common, reason, text, seen.now, left=left, job=job)
    elif reason in RESUBMITTABLE and record.attempt < record.max_attempts:
        return resubmit(record, events, seen.common, reason, text, seen.now, job=job)
    record.state = "failed"
    advice = f" {QUOTA_ADVICE}" if reason == "quota" else ""
    events.append(
        Failed(
            **seen.fields(f"job {job.job_id} failed ({reason}): {message}{advice}"),
            reason=reason,
            quota_metric=quota_metric(job.error_message) if reason == "quota" else None,
            artifacts=record.artifacts,
            duration_seconds=job.duration_seconds,
            rungs=ladder.final_outcomes(record, f"failed ({reason}): {message}"),
        )
    )
    return Transition(events)


def _cancelled(record: Record, seen: _Observed) -> Transition:
    """CANCELLED: by trainctl, for a job it declared stuck (hung, or waiting past max_pending) or whose run a newer
    run of its model replaced (model.concurrency replace: reason superseded), or by request."""
    if record.superseded_by:
        return _cancelled_superseded(record, seen)
    if record.stuck and record.failure_reason == "hang":
        return _cancelled_hung(record, seen)
    stuck_reason: Literal["quota", "capacity"] | None = None
    if record.stuck and record.failure_reason in ("quota", "capacity"):
        stuck_reason = "quota" if record.failure_reason == "quota" else "capacity"
    if stuck_reason and ladder.has_fallbacks(record):
        return _cancelled_waiting_on_a_ladder(record, seen, stuck_reason)
    record.state = "cancelled"
    why = f"after waiting longer than max_pending ({stuck_reason})" if stuck_reason else "by request"
    cancelled = Cancelled(
        **seen.fields(f"job {seen.job.job_id} was cancelled {why}"),
        reason=stuck_reason,
        duration_seconds=seen.job.duration_seconds,
    )
    return Transition([cancelled])


def _cancelled_superseded(record: Record, seen: _Observed) -> Transition:
    """The cancel of a replaced run took effect: `cancelled`, reason superseded, never tried again."""
    events: list[JobEvent] = []
    _running_if_missed(record, seen, events)
    record.state, record.message = "cancelled", f"superseded by {record.superseded_by}"
    text = f"job {seen.job.job_id} was cancelled: superseded by {record.superseded_by}, a newer run of its model"
    events.append(Cancelled(**seen.fields(text), reason="superseded", duration_seconds=seen.job.duration_seconds))
    return Transition(events)


def _cancelled_hung(record: Record, seen: _Observed) -> Transition:
    """The cancel of a hung job took effect: another attempt while attempts remain, else `failed` (hang)."""
    events: list[JobEvent] = []
    _running_if_missed(record, seen, events)
    text = f"attempt {record.attempt} hung and was cancelled"
    if record.attempt < record.max_attempts:
        return resubmit(record, events, seen.common, "hang", text, seen.now, job=seen.job)
    record.state, record.message = "failed", text
    events.append(
        Failed(
            **seen.fields(f"job {seen.job.job_id} failed (hang): {text}; no attempts left"),
            reason="hang",
            artifacts=record.artifacts,
            duration_seconds=seen.job.duration_seconds,
        )
    )
    return Transition(events)


def _cancelled_waiting_on_a_ladder(record: Record, seen: _Observed, reason: Literal["quota", "capacity"]) -> Transition:
    """The cancel of a job that waited past max_pending (for `reason`) took effect, and the request has fallbacks:
    down the ladder, or `failed` listing every rung when none is left."""
    events: list[JobEvent] = []
    _running_if_missed(record, seen, events)
    why = f"waited longer than max_pending ({reason})"
    if ladder.next_rung(record) is not None:
        text = f"attempt {record.attempt} {why} and was cancelled"
        left = ladder.outcome(record, why)
        return resubmit(record, events, seen.common, reason, text, seen.now, left=left, job=seen.job)
    return ladder_exhausted(record, events, seen.common, reason, why, seen.job)


def _passing(record: Record, seen: _Observed) -> Transition:
    """CANCELLING and other passing states: wait for the next observation."""
    return Transition([])


# What each Vertex job state means for the record; a state not named here is passing.
_ON_STATE: dict[str, Callable[[Record, _Observed], Transition]] = {
    **dict.fromkeys(VERTEX_WAITING, _waiting),
    **dict.fromkeys(VERTEX_RUNNING, _running),
    "JOB_STATE_SUCCEEDED": _succeeded,
    "JOB_STATE_FAILED": _failed,
    "JOB_STATE_CANCELLED": _cancelled,
}


def writes_heartbeat(request: dict[str, Any]) -> bool:
    """Whether the request's job keeps the built-in trainer's heartbeat (checkpoints/progress.json). Only those
    are judged for hangs: a custom image writes none of its own, and its jobs share one service account, so a
    progress record beside one would be anybody's word (README: a job that writes no heartbeat is never judged)."""
    return runs_builtin(request)


def runs_builtin(request: dict[str, Any]) -> bool:
    """Whether the request (as the record keeps it) runs the built-in trainer, whose output folder no custom image
    can write to: what it left there is the trainer's own word."""
    return bool((request.get("trainer") or {}).get("builtin"))


def _silence(progress: dict[str, Any] | None, now: datetime, started: datetime | None) -> float | None:
    """Seconds since the trainer last reported progress; None when its record is no evidence either way: there is
    none, training has finished, or its time is not one this job can have written — before the job started (an
    earlier attempt's record, or one forged to have the job cancelled) or ahead of now by more than clock skew.
    A job whose heartbeat is no evidence runs until its scheduling.timeout, which Vertex enforces."""
    if not progress or progress.get("state") == "finished":
        return None
    written = progress.get("time")
    if isinstance(written, bool) or not isinstance(written, int | float) or not math.isfinite(written):
        return None
    if started is not None and written < started.timestamp():
        return None
    if written > now.timestamp() + HEARTBEAT_CLOCK_SKEW_SECONDS:
        return None
    return max(0.0, now.timestamp() - written)
