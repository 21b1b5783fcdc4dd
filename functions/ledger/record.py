"""The ledger record: one request's whole history, as the control bucket keeps it (functions/ledger/requests.py), with
the rungs of its capacity ladder and where it stands in the steps after a success.

Events to publish are first written into the record's outbox (in the same compare-and-swap that changes its
state), then published, then moved to `published` (functions/ledger/outbox.py): a crash between the two leaves the event
in the outbox for the next handler, so no state change is lost or published twice under two ids. The decisions
made on a record are functions/lifecycle/transitions.py's and functions/capacity/ladder.py's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.ledger.first_step import TrainerFigures, first_step_split, goodput
from functions.ledger.model_charter import Rule
from schemas.events import (
    EVENT_ADAPTER,
    FINAL_REQUEST_STATES,
    Artifacts,
    CodeObject,
    CostEstimate,
    JobEvent,
    RequestState,
    RungOutcome,
    Spend,
    Timestamps,
    Trigger,
)
from schemas.secrets import unsealed_request

# How many published events' ids a record remembers (a redelivered event older than that is not recognised).
MAX_PUBLISHED_IDS = 200


class LadderRung(BaseModel):
    """What the controller needs of one rung after admission, without validating the request again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: str  # in words, for events
    region: str
    quota_metric: str  # the metric Vertex's error and trainctl's events name (for Spot: the preemptible one)
    gpus: int
    max_pending: int
    max_preemptions: int
    skipped: str | None = None  # why admission skipped it (it can never fit the GPU quota)
    hourly_usd: float | None = None  # the rung's estimated price an hour (None in records from before it was kept)
    # Every metric the rung is gated on, quota_metric first (schemas/catalog.py quota_metrics: a Spot rung's two);
    # empty in records from before issue 40, which were gated on quota_metric alone.
    quota_metrics: list[str] = Field(default_factory=list)

    @property
    def gated_metrics(self) -> list[str]:
        return self.quota_metrics or [self.quota_metric]


class ModelSteps(BaseModel):
    """Where a request with a model block stands in the steps after `succeeded` (functions/models/promotion.py): each is
    recorded as it is done, so a redelivery or a crash resumes where it stopped and never repeats one."""

    model_config = ConfigDict(extra="forbid")

    champion_version: str | None = Field(None, description="The version the trainer was given to score.")
    champion_uri: str | None = Field(None, description="Its artifact URI (--champion-model-dir).")
    rule: Rule | None = Field(None, description="The model's rule when the request was admitted (issue 38).")
    reference_id: str | None = Field(None, description="The model's reference set the trainer was given.")
    reference_uri: str | None = Field(None, description="Its URI (--reference-data).")
    artifact_uri: str | None = Field(None, description="The controller's copy of the run's model folder, once made.")
    since: datetime | None = Field(None, description="When the steps began (the first visit after `succeeded`).")
    upload_started: datetime | None = Field(None, description="When an UploadModel was claimed (by `upload_owner`).")
    upload_owner: str | None = None
    operation: str | None = Field(None, description="The UploadModel operation, until it is done.")
    version: str | None = Field(None, description="The registered version's id.")
    evaluated: bool = Field(False, description="The run's metrics are imported as a ModelEvaluation (or refused).")
    decision: Literal["promoted", "held"] | None = None
    rollout: Literal["waiting", "deploying", "canary", "deployed", "rolled_back", "skipped"] | None = Field(
        None,
        description="A promoted version of a model with a deploy block: where its rollout stands (issue 41), from "
        "`waiting` (set with the promotion) to deployed, rolled_back or skipped (a later promotion took the alias).",
    )

    @property
    def done(self) -> bool:
        return self.decision is not None and self.rollout not in ("waiting", "deploying", "canary")


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
    quota_pool: str | None = Field(
        None, description="The GPU quota pool the request holds or waits in (the first, for a rung gated on two)."
    )
    other_quota_pools: list[str] = Field(
        default_factory=list,
        description="The other pools a rung gated on more than one quota metric holds or waits in: a Spot rung, on "
        "the preemptible and the on-demand metric (issue 40, point 12).",
    )
    team: str | None = Field(None, description="The team it arrived as (issue 32); None: the default team.")
    budget_month: str | None = Field(
        None, description="The month (YYYY-MM) whose team budget record holds its reservation and spend (issue 40)."
    )
    queued_since: datetime | None = Field(None, description="When it began to wait in trainctl's quota queue.")
    queued_seconds: float = Field(
        0.0, description="Its stays in trainctl's quota queue before this one, summed (issue 43: time to first step)."
    )
    cancel_requested: bool = Field(False, description="`trainctl cancel` of a request that has no job yet.")
    permission_denied_since: datetime | None = Field(
        None, description="When Vertex first refused this attempt's submission with PERMISSION_DENIED."
    )
    model_steps: ModelSteps | None = Field(None, description="With a model block: the steps after `succeeded`.")
    dataset_fingerprint: str | None = Field(
        None,
        description="With a model block: its dataset's fingerprint at admission (functions/data/fingerprint.py), kept "
        "in its version's lineage and its model's record, so model.skip_unchanged rests on the controller's records.",
    )
    supersedes: str | None = Field(
        None, description="model.concurrency replace: the key hash of the model's run this one replaces (issue 42)."
    )
    superseded_by: str | None = Field(
        None,
        description="The request id of the newer run of its model that replaced this one: its job is cancelled, it "
        "ends `cancelled` (reason superseded) and registers no version.",
    )
    earlier_gpu_hours: float = Field(0.0, description="What the attempts before the current one ran, in GPU-hours.")
    earlier_cost_usd: float = Field(0.0, description="… and their estimated cost, each at its own rung's price.")
    earlier_run_seconds: float = Field(0.0, description="… and their running time, summed (scheduling goodput).")
    first_step: datetime | None = Field(
        None,
        description="When the built-in trainer's first step ran, as its record said when its job ended, and only when "
        "within that job's start → end (functions/ledger/first_step.py): the latest attempt's that had one.",
    )
    steps_run: int | None = Field(None, description="The trainer's steps run, every attempt's (its record).")
    steps_kept: int | None = Field(None, description="… and the steps its weights hold.")
    code_objects: list[CodeObject] | None = Field(
        None, description="The content-addressed packages verified at intake: generation and CRC32C (issue 38)."
    )
    sealed_env: dict[str, str] | None = Field(
        None,
        description="The values of the request's secret-looking trainer.env names, which `request` holds redacted "
        "(issue 40, point 7; schemas/secrets.py): kept only while the request is active, since every attempt's job "
        "is planned with them, and dropped when it ends. Nothing copies this field out of the record.",
    )

    @property
    def quota_pools(self) -> list[str]:
        """Every GPU quota pool the request holds or waits in."""
        return [self.quota_pool, *self.other_quota_pools] if self.quota_pool else []

    @property
    def final(self) -> bool:
        return self.state in FINAL_REQUEST_STATES

    def job_request(self) -> dict[str, Any]:
        """The request a job of this record is planned from: `request` with its sealed values put back."""
        return unsealed_request(self.request, self.sealed_env)

    @property
    def model_steps_pending(self) -> bool:
        """A succeeded request whose model steps are not done: it stays active (reconcile visits it) until they are."""
        return self.state == "succeeded" and self.model_steps is not None and not self.model_steps.done

    @property
    def attempt_price(self) -> tuple[int, float]:
        """The current attempt's GPUs and estimated price an hour: its rung's (the request's first rung, or a record
        from before rungs kept their price: the cost estimated at admission)."""
        rung = self.ladder[self.rung] if self.rung < len(self.ladder) else None
        if rung is None or rung.hourly_usd is None:
            return self.cost.gpus, self.cost.hourly_usd
        return rung.gpus, rung.hourly_usd

    def add_run(self, hours: float) -> None:
        """Count an attempt that ran `hours` and will not run again, at its rung's GPUs and price."""
        gpus, hourly = self.attempt_price
        self.earlier_gpu_hours += gpus * hours
        self.earlier_cost_usd += hourly * hours
        self.earlier_run_seconds += hours * 3600

    def spent(self, last_attempt: Timestamps | None) -> Spend:
        """What every attempt ran: the earlier ones, and the current one from its job's start to its end."""
        started, ended = (last_attempt.started, last_attempt.ended) if last_attempt else (None, None)
        hours = (ended - started).total_seconds() / 3600 if started and ended else 0.0
        gpus, hourly = self.attempt_price
        # Finer than a report shows (4 places, cents): a report sums many requests, and the sum of figures each
        # rounded that coarsely drifts from the true total by up to half a unit per request.
        return Spend(
            gpu_hours=round(self.earlier_gpu_hours + gpus * hours, 6),
            estimated_cost_usd=round(self.earlier_cost_usd + hourly * hours, 4),
        )

    def leave_queue(self, now: datetime) -> None:
        """The request leaves trainctl's quota queue (admitted, moved down or ended): its stay is counted."""
        if self.queued_since is not None:
            self.queued_seconds += max(0.0, (now - self.queued_since).total_seconds())
        self.queued_since = None

    def note_trainer(self, figures: TrainerFigures) -> None:
        """What the built-in trainer recorded of the attempt whose job just ended, once checked (first_step.py)."""
        if figures.first_step is not None:
            self.first_step = figures.first_step
        if figures.steps_run is not None:
            self.steps_run, self.steps_kept = figures.steps_run, figures.steps_kept

    def first_step_figures(self, event_time: datetime, last_attempt: Timestamps | None) -> dict[str, Any]:
        """A final event's time to first step and goodput (issue 43): the last attempt's split, every attempt's
        running time, the trainer's step counts."""
        end = last_attempt.ended if last_attempt and last_attempt.ended else event_time
        return {
            "first_step": first_step_split(self.created, self.queued_seconds, last_attempt, self.first_step),
            "goodput": goodput(
                self.created, end, self.earlier_run_seconds, last_attempt, self.steps_run, self.steps_kept
            ),
        }

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
            update: dict[str, Any] = {"sequence": self.sequence}
            if event.team is None and self.team is not None:  # every event of a team's request says its team
                update["team"] = self.team
            if "spent" in type(event).model_fields:  # a final event says what the whole request ran
                update["spent"] = self.spent(event.timestamps)
            if "goodput" in type(event).model_fields:
                update |= self.first_step_figures(event.time, event.timestamps)
            self.outbox.append(event.model_copy(update=update).model_dump(mode="json", exclude_none=True))
        return {e.ce_id for e in fresh}

    def outbox_events(self) -> list[JobEvent]:
        return [EVENT_ADAPTER.validate_python(e) for e in self.outbox]

    def mark_published(self, ids: set[str]) -> None:
        self.outbox = [e for e in self.outbox if EVENT_ADAPTER.validate_python(e).ce_id not in ids]
        self.published = (self.published + sorted(ids))[-MAX_PUBLISHED_IDS:]
