"""The ledger record and the pure decisions made on it: what to do with a repeated request, and what a
Vertex job state means for the record and for the events to publish.

A record is one request's whole history. Events to publish are first written into the record's outbox (in the
same compare-and-swap that changes its state), then published, then moved to `published`: a crash between
the two leaves the event in the outbox for the next handler, so no state change is lost or published twice
under two ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions import ladder
from functions.failures import (
    QUOTA_ADVICE,
    RESUBMITTABLE,
    blamed_on_data,
    classify_job_failure,
    is_stockout,
    quota_metric,
)
from functions.ladder import LadderRung
from schemas.events import (
    EVENT_ADAPTER,
    FINAL_REQUEST_STATES,
    Artifacts,
    Cancelled,
    CostEstimate,
    Failed,
    FailureReason,
    JobEvent,
    JobRef,
    RequestState,
    Retrying,
    RungOutcome,
    Running,
    Stuck,
    Succeeded,
    Timestamps,
    Trigger,
)
from schemas.rules import format_duration

# Vertex states in which a job has not started yet, and those in which it has ended.
VERTEX_WAITING = frozenset({"JOB_STATE_QUEUED", "JOB_STATE_PENDING"})
VERTEX_RUNNING = frozenset({"JOB_STATE_RUNNING", "JOB_STATE_UPDATING"})
MAX_PUBLISHED_IDS = 200
# How far ahead of the controller's clock a heartbeat's time may be and still count as one: the trainer's node and
# the function read different clocks. Further ahead, it is no evidence either way (see _silence).
HEARTBEAT_CLOCK_SKEW_SECONDS = 300


class ModelSteps(BaseModel):
    """Where a request with a model block stands in the steps after `succeeded` (functions/promotion.py): each is
    recorded as it is done, so a redelivery or a crash resumes where it stopped and never repeats one."""

    model_config = ConfigDict(extra="forbid")

    champion_version: str | None = Field(None, description="The version the trainer was given to score.")
    champion_uri: str | None = Field(None, description="Its artifact URI (--champion-model-dir).")
    since: datetime | None = Field(None, description="When the steps began (the first visit after `succeeded`).")
    upload_started: datetime | None = Field(None, description="When an UploadModel was claimed (by `upload_owner`).")
    upload_owner: str | None = None
    operation: str | None = Field(None, description="The UploadModel operation, until it is done.")
    version: str | None = Field(None, description="The registered version's id.")
    evaluated: bool = Field(False, description="The run's metrics are imported as a ModelEvaluation (or refused).")
    decision: Literal["promoted", "held"] | None = None

    @property
    def done(self) -> bool:
        return self.decision is not None


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    key_hash: str
    request_id: str
    spec_hash: str
    explicit_id: bool = Field(description="The requester named the id, so a different spec under it is a conflict.")
    request: dict[str, Any]
    trigger: Trigger | None = None
    state: RequestState = "claimed"
    attempt: int = 1
    max_attempts: int = 1
    max_pending: int | None = Field(None, description="Seconds the job may wait to start (scheduling.max_pending).")
    max_silence: int | None = Field(None, description="Seconds its progress may stand still (scheduling.max_silence).")
    lease_until: datetime | None = None
    owner: str | None = None
    not_before: datetime | None = None
    job_name: str | None = None
    job_state: str | None = None
    stuck: bool = False
    failure_reason: str | None = None
    message: str | None = None
    cost: CostEstimate
    artifacts: Artifacts
    created: datetime
    updated: datetime
    outbox: list[dict[str, Any]] = Field(default_factory=list)
    published: list[str] = Field(default_factory=list)
    sequence: int = Field(0, description="The last sequence number given to one of this request's events.")
    ladder: list[LadderRung] = Field(default_factory=list, description="The capacity ladder's rungs, rung 0 first.")
    rung: int = Field(0, description="The rung the current attempt runs on.")
    rung_attempts: int = Field(0, description="Attempts made on the current rung.")
    rung_preemptions: int = Field(0, description="Attempts on the current rung that ended preempted.")
    rung_history: list[RungOutcome] = Field(default_factory=list, description="Rungs left or skipped, and why.")
    quota_pool: str | None = Field(None, description="The GPU quota pool the request holds or waits in.")
    team: str | None = Field(None, description="The team it arrived as (issue 32); None: the default team.")
    queued_since: datetime | None = Field(None, description="When it began to wait in trainctl's quota queue.")
    cancel_requested: bool = Field(False, description="`trainctl cancel` of a request that has no job yet.")
    permission_denied_since: datetime | None = Field(
        None, description="When Vertex first refused this attempt's submission with PERMISSION_DENIED."
    )
    model_steps: ModelSteps | None = Field(None, description="With a model block: the steps after `succeeded`.")

    @property
    def final(self) -> bool:
        return self.state in FINAL_REQUEST_STATES

    @property
    def model_steps_pending(self) -> bool:
        """A succeeded request whose model steps are not done: it stays active (reconcile visits it) until they are."""
        return self.state == "succeeded" and self.model_steps is not None and not self.model_steps.done

    def lease_live(self, now: datetime) -> bool:
        return self.lease_until is not None and self.lease_until > now

    def envelope(self, now: datetime) -> dict[str, Any]:
        """The fields every lifecycle event of this request's current attempt shares."""
        return {
            "request_id": self.request_id,
            "request_key": self.key,
            "attempt": self.attempt,
            "time": now,
            "trigger": self.trigger,
        }

    def add_events(self, events: list[JobEvent]) -> set[str]:
        """Queue events not published or queued before (same ce-id), in order, each numbered after the last
        (in the same compare-and-swap as the state change, so no two get one number); the ce-ids queued."""
        known = set(self.published) | {e.ce_id for e in self.outbox_events()}
        fresh = [e for e in events if e.ce_id not in known]
        for event in fresh:
            self.sequence += 1
            self.outbox.append(
                event.model_copy(update={"sequence": self.sequence}).model_dump(mode="json", exclude_none=True)
            )
        return {e.ce_id for e in fresh}

    def outbox_events(self) -> list[JobEvent]:
        return [EVENT_ADAPTER.validate_python(e) for e in self.outbox]

    def mark_published(self, ids: set[str]) -> None:
        self.outbox = [e for e in self.outbox if EVENT_ADAPTER.validate_python(e).ce_id not in ids]
        self.published = (self.published + sorted(ids))[-MAX_PUBLISHED_IDS:]


@dataclass(frozen=True)
class JobSnapshot:
    """What the controller needs to know of a CustomJob, free of proto types."""

    name: str
    state: str
    error_code: int = 0
    error_message: str = ""
    create_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    labels: dict[str, str] | None = None

    @property
    def job_id(self) -> str:
        return self.name.rsplit("/", 1)[-1]


# ---- repeated requests ---------------------------------------------------------------------------------

ExistingDecision = Literal["duplicate", "conflict", "wait", "take_over"]


def decide_on_existing(record: Record, spec_hash: str, now: datetime) -> ExistingDecision:
    """DESIGN.md §4 step 2: what a delivery does when the request's record already exists."""
    if record.explicit_id and record.spec_hash != spec_hash:
        return "conflict"
    if record.state != "claimed":
        return "duplicate"
    if record.lease_live(now):
        return "wait"
    if record.not_before is not None and record.not_before > now:
        return "duplicate"  # a resubmission is scheduled; reconcile will make it
    return "take_over"


# ---- observing a job -----------------------------------------------------------------------------------


@dataclass
class Transition:
    """What an observation changes: events to queue and an action for the orchestrator."""

    events: list[JobEvent]
    action: Literal["none", "cancel", "resubmit", "load_metrics", "diagnose", "load_progress"] = "none"


def job_ref(name: str, region: str, project: str) -> JobRef:
    """The job's name and console URL; the console page is in the job's own region (a ladder's rung may be in
    another than the deployment's `region`)."""
    job_id = name.rsplit("/", 1)[-1]
    parts = name.split("/")
    if len(parts) > 3 and parts[2] == "locations":
        region = parts[3]
    return JobRef(
        name=name,
        console_url=f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{job_id}?project={project}",
    )


def _common(record: Record, job: JobSnapshot, ref: JobRef, now: datetime, message: str) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "request_key": record.key,
        "attempt": record.attempt,
        "time": now,
        "message": message,
        "trigger": record.trigger,
        "job": ref,
        "timestamps": Timestamps(created=job.create_time, started=job.start_time, ended=job.end_time),
    }


def _duration(job: JobSnapshot) -> float | None:
    if job.start_time and job.end_time:
        return round((job.end_time - job.start_time).total_seconds(), 1)
    return None


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
    """Fold one observation of the record's job into the record; pure apart from mutating `record`.

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
    if not writes_heartbeat(record.request):
        max_silence = None
    events: list[JobEvent] = []
    common = _common(record, job, ref, now, "")
    record.job_state = job.state

    def running_if_missed() -> None:
        if record.state == "submitted" and job.start_time is not None:
            events.append(Running(**common | {"message": f"job {job.job_id} is running"}))
            record.state = "running"

    if job.state in VERTEX_WAITING:
        if record.stuck:
            return Transition(events, "cancel")  # the earlier cancel has not taken effect (or failed): again
        if job.start_time is not None or record.state == "running":
            # Vertex restarts a job that ran, by itself, after a preemption, a stockout or a crash (reference/
            # apis.md §6): the same job, the same attempt; max_pending is about waiting to start.
            return Transition(events)
        waited = (now - job.create_time).total_seconds() if job.create_time else 0
        if waited > max_pending:
            reason = "quota" if job.state == "JOB_STATE_QUEUED" else "capacity"
            record.stuck, record.failure_reason = True, reason
            text = f"job waited {format_duration(int(waited))} in {job.state}, longer than max_pending; " + (
                f"Vertex holds a job in QUEUED until GPU quota frees up. {QUOTA_ADVICE}"
                if reason == "quota"
                else "its machines could not be provisioned. Try another region or GPU type, or "
                "scheduling.strategy flex_start, which waits for capacity instead of failing."
            )
            events.append(
                Stuck(
                    **common | {"message": text},
                    reason=reason,
                    job_state=job.state,
                    pending_seconds=int(waited),
                    max_pending_seconds=max_pending,
                )
            )
            return Transition(events, "cancel")
        return Transition(events)
    if job.state in VERTEX_RUNNING:
        if record.stuck:
            return Transition(events, "cancel")  # declared hung; the earlier cancel has not taken effect
        if max_silence is not None and progress is None:
            return Transition([], "load_progress")
        if record.state == "submitted":
            events.append(Running(**common | {"message": f"job {job.job_id} is running"}))
            record.state = "running"
        silent = _silence(progress, now, job.start_time)
        if max_silence is not None and silent is not None and silent > max_silence:
            record.stuck, record.failure_reason = True, "hang"
            step = progress.get("step") if progress else None
            text = (
                f"job {job.job_id} is RUNNING but its training has not advanced for {format_duration(int(silent))} "
                f"(step {step}), longer than max_silence: a hang (a collective stuck on some rank); cancelling it"
            )
            events.append(
                Stuck(
                    **common | {"message": text},
                    reason="hang",
                    job_state=job.state,
                    silent_seconds=int(silent),
                    max_silence_seconds=max_silence,
                )
            )
            return Transition(events, "cancel")
        return Transition(events)
    if job.state == "JOB_STATE_SUCCEEDED":
        if metrics is None:
            return Transition([], "load_metrics")
        running_if_missed()
        record.state = "succeeded"
        text = f"job {job.job_id} succeeded" + (f" in {format_duration(int(d))}" if (d := _duration(job)) else "")
        text += f"; {metrics_note}" if metrics_note else ""
        events.append(
            Succeeded(
                **common | {"message": text},
                artifacts=record.artifacts,
                metrics=metrics,
                duration_seconds=_duration(job),
                cost=record.cost,
            )
        )
        return Transition(events)
    if job.state == "JOB_STATE_FAILED":
        reason = classify_job_failure(job.error_code, job.error_message, started=job.start_time is not None)
        if reason == "user" and diagnosis is None:
            return Transition([], "diagnose")
        reason = blamed_on_data(reason, data_failure)
        running_if_missed()
        message = f"{job.error_message} {diagnosis}".strip() if diagnosis else job.error_message
        metric = quota_metric(job.error_message) if reason == "quota" else None
        record.failure_reason, record.message = reason, message
        # Vertex has already restarted the job itself (stockout: 3 times, Spot preemption: 6), so what follows is
        # the controller's own, later attempt: on the next rung of the ladder when this one is out of capacity or
        # quota or preempted too often, else on the same rung while attempts remain.
        text = f"attempt {record.attempt} failed ({reason}) after Vertex's own retries: {job.error_message}"
        if reason == "preemption":
            record.rung_preemptions += 1
        stocked_out = is_stockout(job.error_message)
        if ladder.has_fallbacks(record) and ladder.leaves_rung(record, reason, stocked_out):
            if ladder.next_rung(record) is not None:
                left = ladder.left_because(record, reason, stocked_out)
                return resubmit(record, events, common, reason, text, now, left=left)
        elif reason in RESUBMITTABLE and record.attempt < record.max_attempts:
            return resubmit(record, events, common, reason, text, now)
        record.state = "failed"
        advice = f" {QUOTA_ADVICE}" if reason == "quota" else ""
        events.append(
            Failed(
                **common | {"message": f"job {job.job_id} failed ({reason}): {message}{advice}"},
                reason=reason,
                quota_metric=metric,
                artifacts=record.artifacts,
                duration_seconds=_duration(job),
                rungs=ladder.final_outcomes(record, f"failed ({reason}): {message}"),
            )
        )
        return Transition(events)
    if job.state == "JOB_STATE_CANCELLED":
        if record.stuck and record.failure_reason == "hang":
            running_if_missed()
            text = f"attempt {record.attempt} hung and was cancelled"
            if record.attempt < record.max_attempts:
                return resubmit(record, events, common, "hang", f"{text}", now)
            record.state, record.message = "failed", text
            events.append(
                Failed(
                    **common | {"message": f"job {job.job_id} failed (hang): {text}; no attempts left"},
                    reason="hang",
                    artifacts=record.artifacts,
                    duration_seconds=_duration(job),
                )
            )
            return Transition(events)
        stuck_reason: Literal["quota", "capacity"] | None = None
        if record.stuck and record.failure_reason in ("quota", "capacity"):
            stuck_reason = "quota" if record.failure_reason == "quota" else "capacity"
        if stuck_reason and ladder.has_fallbacks(record):
            running_if_missed()
            why = f"waited longer than max_pending ({stuck_reason})"
            if ladder.next_rung(record) is not None:
                text = f"attempt {record.attempt} {why} and was cancelled"
                return resubmit(record, events, common, stuck_reason, text, now, left=ladder.outcome(record, why))
            return ladder_exhausted(record, events, common, stuck_reason, why, job)
        record.state = "cancelled"
        why = f"after waiting longer than max_pending ({stuck_reason})" if stuck_reason else "by request"
        events.append(
            Cancelled(
                **common | {"message": f"job {job.job_id} was cancelled {why}"},
                reason=stuck_reason,
                duration_seconds=_duration(job),
            )
        )
        return Transition(events)
    return Transition(events)  # CANCELLING and other passing states: wait for the next observation


def resubmit(
    record: Record,
    events: list[JobEvent],
    common: dict[str, Any],
    reason: FailureReason,
    text: str,
    now: datetime,
    left: RungOutcome | None = None,
) -> Transition:
    """A new attempt of the request, into the same output directory (the trainer resumes from its checkpoint);
    `left`: the rung the ladder moves down from (to the next one it did not skip)."""
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
            duration_seconds=_duration(job) if job else None,
            rungs=rungs,
        )
    )
    return Transition(events)


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


def backoff(attempt: int, base: timedelta = timedelta(minutes=2), cap: timedelta = timedelta(minutes=30)) -> timedelta:
    return min(cap, base * (2 ** max(0, attempt - 1)))
