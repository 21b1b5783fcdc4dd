"""Lifecycle events: what trainctl publishes on the events topic, one model per state.

Every event shares the same envelope fields; `to_pubsub_message` turns one into JSON bytes plus the
CloudEvents attributes of the Pub/Sub binary binding (`ce-*`) and the plain `request_id` and `state`
attributes that subscription filters use (plus `team` with teams, and `delivery` and `rejected_delivery` on events
about one delivery); it is published with the request id as its ordering key. `ce-id` is a hash of (request key,
state, attempt) — and, for events about one delivery (duplicate, rejected), of that delivery's id — so a re-published
event keeps its id and consumers can drop the copy.

A `rejected` with `rejected_delivery` set is about one arrival that claimed nothing (issue 38, point 6): its
`request_id` is only what that arrival's document said, so it is never the end of the request that holds the id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

EVENT_TYPE_PREFIX = "trainctl.job.v1."
SPEC_VERSION = "1.0"

State = Literal[
    "accepted",
    "duplicate",
    "rejected",
    "queued",
    "submitted",
    "running",
    "retrying",
    "stuck",
    "succeeded",
    "failed",
    "cancelled",
    "registered",
    "promoted",
    "held",
    "rule_changed",
    "deploying",
    "canary",
    "deployed",
    "rolled_back",
    "scoring",
    "scored",
    "scoring_failed",
    "skipped",
    "coalesced",
    "superseded",
    "pool_created",
    "pool_deleted",
]
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
FailureReason = Literal[
    "quota", "capacity", "preemption", "hang", "internal", "user", "invalid", "permission", "data", "budget"
]
# A rejection of one arrival that claimed nothing (DESIGN.md §4): `unclaimed`, refused before any claim (schema,
# guardrail, budget, data check …); `conflicting_delivery`, its request id or key already belongs to a request it does
# not match (another spec, another key), which goes on untouched.
RejectedDelivery = Literal["unclaimed", "conflicting_delivery"]
# Where a request stands in the controller's ledger: claimed until its job exists (queued while it waits in
# trainctl for GPU quota), then as its job goes.
# `skipped`: a trigger policy decided at the claim that it starts nothing (issue 42): no job, no GPU.
RequestState = Literal[
    "claimed", "queued", "submitted", "running", "succeeded", "failed", "cancelled", "rejected", "skipped"
]
FINAL_REQUEST_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "rejected", "skipped"})
# Why a trigger policy started nothing (issue 42): one of the model's runs was active under `concurrency: skip`; the
# dataset's fingerprint is the champion's (`skip_unchanged`); a schedule tick arrived after a newer one was due and
# the rule catches up on none.
SkipReason = Literal["running", "unchanged_data", "missed_tick"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Trigger(_Strict):
    """What started the request: a Cloud Storage marker, a Pub/Sub message, or an operator."""

    kind: Literal["gcs", "pubsub", "cli", "schedule", "alert"]
    bucket: str | None = None
    object: str | None = None
    generation: str | None = None
    message_id: str | None = None
    topic: str | None = None
    rule: str | None = Field(None, description="schedule, alert: the trigger rule (its gs:// prefix) that ran.")
    scheduled_time: datetime | None = Field(
        None, description="schedule: the tick's scheduled time, from which the request id derives."
    )
    incident: str | None = Field(
        None, description="alert: the Cloud Monitoring incident id (or the Vertex model-monitoring alert) that asked."
    )
    policy: str | None = Field(None, description="alert: the alerting policy's name, as the incident gives it.")


class JobRef(_Strict):
    name: str = Field(description="projects/{p}/locations/{l}/customJobs/{id}")
    console_url: str


class Artifacts(_Strict):
    model_dir: str
    metrics_uri: str
    checkpoint_dir: str
    tensorboard_dir: str


class CostEstimate(_Strict):
    """Approximate list price of the job (catalog prices taken on `prices_as_of`)."""

    hourly_usd: float
    max_usd: float = Field(description="hourly_usd × the scheduling timeout: the most this run can cost.")
    gpus: int
    nodes: int
    reducers: int = 0
    prices_as_of: str
    reserved: bool = Field(
        False,
        description="The nodes consume a specific Compute Engine reservation, billed whether used or not: "
        "hourly_usd counts only what the run adds (its reducers).",
    )


def approximate_prices(cost: CostEstimate) -> str:
    """How every estimate is qualified where it is shown: the catalog's prices are approximate (catalog.PRICE_BASIS)."""
    return f"approximate prices taken {cost.prices_as_of}"


def cost_summary(cost: CostEstimate) -> str:
    """What a run costs, in the words events and the command line use: the price per hour, and the most it can
    cost, which is the price of its whole timeout (a run that ends sooner costs less)."""
    return (
        f"about ${cost.hourly_usd:,.2f}/h{RESERVED_WORDS if cost.reserved else ''}, at most ${cost.max_usd:,.2f} if it "
        f"runs its whole timeout ({approximate_prices(cost)})"
    )


# What a reserved rung's price says (its GPUs are billed with the reservation, used or not).
RESERVED_WORDS = " (its GPUs are on a reservation, already paid)"


class Timestamps(_Strict):
    created: datetime | None = None
    started: datetime | None = None
    ended: datetime | None = None


class FirstStep(_Strict):
    """Accepted → the trainer's first optimizer step (issue 43), in seconds, split into phases that sum to
    `total_seconds`. The first step is the built-in trainer's own record (rank 0's wall clock), and only of the
    attempt that ended the request: one before that attempt's job started or after it ended is ignored, and then
    there is no split."""

    total_seconds: float = Field(description="Accepted → the first step of the last attempt.")
    queue_seconds: float = Field(description="In trainctl's quota queue, every stay summed (queued → left).")
    provisioning_seconds: float = Field(
        description="The last attempt's job waiting in Vertex (PENDING, QUEUED): its create time → its start time."
    )
    startup_seconds: float = Field(
        description="The last attempt's job start → its first step: the image pulled, the processes launched, the "
        "data loaded."
    )
    other_seconds: float = Field(
        description="The rest: admission and submission, and every earlier attempt (its run, its retry's wait)."
    )


class Goodput(_Strict):
    """How much of a request's time and work counted (issue 43)."""

    scheduling: float | None = Field(
        None,
        description="Running ÷ total: every attempt's jobs' running time (start → end, summed) over accepted → "
        "the request's end; 0 when no job ran.",
    )
    runtime: float | None = Field(
        None,
        description="Steps kept ÷ steps run, every attempt and restart included (a resumed run runs again the "
        "steps after its last checkpoint); from the built-in trainer's record of the last attempt, which counts "
        "those of every earlier one. None without such a record.",
    )
    running_seconds: float = Field(0.0, description="Every attempt's running time, summed.")
    steps_run: int | None = Field(None, description="Optimizer steps run by every attempt and restart.")
    steps_kept: int | None = Field(None, description="The steps the final weights hold (the last step reached).")


class Spend(_Strict):
    """What every attempt of a request ran (a preempted, failed or moved-down one too), each from its job's start to its
    end, at its own rung's GPUs and approximate list price."""

    gpu_hours: float
    estimated_cost_usd: float


class RungOutcome(_Strict):
    """What became of one rung of a request's capacity ladder (scheduling and `fallbacks`)."""

    rung: int = Field(description="0 is the request's own resources, 1 the first fallback, …")
    resources: str = Field(description="The rung in words: nodes × machine with GPUs, strategy, region.")
    attempts: int = Field(0, description="Attempts made on this rung (0: skipped).")
    outcome: str = Field(description="Why the ladder left this rung (or skipped it), in words.")


class _Event(_Strict):
    request_id: str
    request_key: str = Field(description="The idempotency key: gcs:<bucket>/<object>#<generation> or request:<id>.")
    attempt: int = Field(1, ge=1, description="Submission attempt; resubmissions after capacity/preemption add one.")
    time: datetime
    message: str = Field(description="What happened, in a sentence.")
    trigger: Trigger | None = None
    delivery: str | None = Field(
        None,
        description="For events about one delivery of a request (duplicate, rejected): that delivery's id, which "
        "Pub/Sub (the message id) or Eventarc (the Cloud Storage event's id) assigned, never the document.",
    )
    job: JobRef | None = None
    timestamps: Timestamps | None = None
    team: str | None = Field(
        None,
        description="With teams: the team of the request (its topic's, or its marker template's). Also the message's "
        "`team` attribute, which each team's own events subscription filters on (issue 40, point 5).",
    )
    sequence: int | None = Field(
        None,
        ge=1,
        description="This event's place among its request's lifecycle events (1 is `accepted`), given once when "
        "the event is recorded, so consumers can order them and drop copies (copies keep it, and their ce-id). "
        "Absent on events about one delivery (duplicate, rejected at intake), which change no state.",
    )

    @property
    def ce_type(self) -> str:
        return EVENT_TYPE_PREFIX + self.state  # type: ignore[attr-defined]

    @property
    def ce_id(self) -> str:
        return event_id(self.request_key, self.state, self.attempt, self.delivery)  # type: ignore[attr-defined]


class Budget(_Strict):
    """A team's monthly budget against what its requests may spend (issue 32, point 4): all in US dollars at the
    catalog's approximate list prices."""

    team: str
    month: str = Field(
        description="The calendar month (UTC), YYYY-MM, a request counts in: the one it was accepted in."
    )
    budget_usd: float
    spent_usd: float = Field(
        description="What the team's requests accepted that month cost once they ended (their run times)."
    )
    active_usd: float = Field(
        description="The worst case of the team's other active requests accepted that month (each its whole timeout)."
    )
    request_usd: float = Field(
        description="This request's worst case: its costliest rung × max_attempts (at a resubmission: what its ended "
        "attempts ran, and its costliest rung for each attempt left)."
    )


CODE_DIGEST_DESCRIPTION = (
    "trainer.python_package: sha256:<hex> of the package archive as `trainctl submit --source` uploaded it "
    "(content-addressed; up to 8 comma-separated in install order; with more packages, sha256-list:<hex>, the sha256 "
    "of that comma-separated list), each checked against the object's bytes at intake. Absent for other trainers and "
    "when any URI is not content-addressed (then unverified)."
)


class CodeObject(_Strict):
    """A content-addressed package as the controller read it at intake, its sha256 equal to its name's (issue 38):
    exactly which object of that name was verified."""

    uri: str
    generation: str = Field(description="The object's generation when it was read (Cloud Storage's int64, as text).")
    crc32c: str | None = Field(None, description="Its CRC32C as Cloud Storage states it (base64, big-endian).")
    size: int = Field(description="Its size in bytes.")


class Accepted(_Event):
    state: Literal["accepted"] = "accepted"
    cost: CostEstimate
    code_digest: str | None = Field(None, description=CODE_DIGEST_DESCRIPTION)
    code_objects: list[CodeObject] | None = Field(
        None,
        description="trainer.python_package: each content-addressed package read and verified at intake (its sha256 "
        "equals its name's), with the generation and CRC32C read. A URI that is not content-addressed is not read.",
    )
    skipped_rungs: list[RungOutcome] | None = Field(
        None, description="Rungs of the ladder that can never fit the project's GPU quota, skipped at admission."
    )
    labels: dict[str, str] | None = Field(
        None, description="The request's labels (e.g. team), so history can be grouped by one of them."
    )
    new_columns: list[str] | None = Field(
        None,
        description="Columns of the dataset's header that the model's champion was not trained with: allowed, and "
        "named (the data check at admission passed; issue 27).",
    )


class Duplicate(_Event):
    state: Literal["duplicate"] = "duplicate"
    existing_state: str = Field(description="Where the first copy of this request stands.")


class Rejected(_Event):
    state: Literal["rejected"] = "rejected"
    reason: FailureReason
    errors: list[str] = Field(default_factory=list, description="One `field.path: rule` line per problem.")
    cost: CostEstimate | None = Field(
        None,
        description="Reason `data`: the run's own estimate, which the check at admission saved (nothing was claimed, "
        "no GPU started).",
    )
    saved_gpu_hours: float | None = Field(
        None, description="Reason `data`: the GPU-hours the run could have held at most (its GPUs × its timeout)."
    )
    budget: Budget | None = Field(None, description="Reason `budget`: the team's budget and what its requests spend.")
    rejected_delivery: RejectedDelivery | None = Field(
        None,
        description="Set when only this delivery (`delivery`) is rejected and nothing was claimed: `unclaimed` "
        "(refused before any claim) or `conflicting_delivery` (its id or key belongs to a request it does not match). "
        "Its request_id is what the delivery's document named: the request holding that id, if any, is untouched "
        "and this is not its end. Absent: the request itself ended rejected (Vertex refused its job).",
    )


class Queued(_Event):
    state: Literal["queued"] = "queued"
    reason: Literal["quota"] = "quota"
    quota_metric: str = Field(description="The Vertex GPU quota the request waits for.")
    region: str
    gpus: int = Field(description="GPUs the request needs on this quota.")
    limit: int = Field(description="The project's limit (Cloud Quotas).")
    held: int = Field(description="GPUs trainctl's active jobs hold on it now.")
    ahead: int = Field(description="Requests queued before this one for the same quota.")
    rung: int = 0
    held_by: Literal["team_share", "project_quota"] | None = Field(
        None,
        description="What holds it: its team's share (its cap, or another team's fair turn first) or the project's "
        "quota (full, and this request next in line).",
    )


class Submitted(_Event):
    state: Literal["submitted"] = "submitted"
    cost: CostEstimate
    artifacts: Artifacts
    reduction_server_replicas: int = 0
    code_digest: str | None = Field(None, description=CODE_DIGEST_DESCRIPTION)


class Running(_Event):
    state: Literal["running"] = "running"


class Retrying(_Event):
    state: Literal["retrying"] = "retrying"
    reason: FailureReason
    max_attempts: int
    rung: int | None = Field(None, description="With fallbacks: the ladder rung the next attempt runs on.")
    rung_resources: str | None = Field(None, description="That rung in words.")
    left_rung: RungOutcome | None = Field(None, description="The rung the ladder moved down from, and why.")
    quota_metric: str | None = Field(
        None,
        description="The Vertex quota that is short, when Vertex names it "
        "(aiplatform.googleapis.com/custom_model_training_…); ask for more of it, or change GPU type or region.",
    )


class Stuck(_Event):
    state: Literal["stuck"] = "stuck"
    reason: Literal["quota", "capacity", "hang"] = Field(
        description="quota: Vertex held the job in QUEUED, which it does until GPU quota frees up; "
        "capacity: the job waited in PENDING for machines to be provisioned; "
        "hang: the job was RUNNING but its trainer's progress stood still longer than max_silence."
    )
    job_state: str = Field(description="The Vertex state the job was in (QUEUED, PENDING, or RUNNING for a hang).")
    pending_seconds: int | None = Field(None, description="How long it waited to start (quota, capacity).")
    max_pending_seconds: int | None = None
    silent_seconds: int | None = Field(None, description="How long its progress stood still (hang).")
    max_silence_seconds: int | None = None


class Succeeded(_Event):
    state: Literal["succeeded"] = "succeeded"
    artifacts: Artifacts
    metrics: dict[str, Any] = Field(default_factory=dict, description="From the model dir's metrics.json.")
    duration_seconds: float | None = None
    cost: CostEstimate | None = None
    spent: Spend | None = Field(None, description="What every attempt ran: GPU-hours and estimated cost.")
    first_step: FirstStep | None = Field(None, description="Accepted → the first step, by phase (issue 43).")
    goodput: Goodput | None = Field(None, description="Scheduling and runtime goodput (issue 43).")


class Failed(_Event):
    state: Literal["failed"] = "failed"
    reason: FailureReason
    quota_metric: str | None = Field(
        None,
        description="The Vertex quota that is short, when Vertex names it "
        "(aiplatform.googleapis.com/custom_model_training_…); ask for more of it, or change GPU type or region.",
    )
    artifacts: Artifacts | None = None
    duration_seconds: float | None = None
    rungs: list[RungOutcome] | None = Field(None, description="With fallbacks: what became of every rung.")
    spent: Spend | None = Field(None, description="What every attempt ran: GPU-hours and estimated cost.")
    first_step: FirstStep | None = Field(None, description="Accepted → the first step, by phase (issue 43).")
    goodput: Goodput | None = Field(None, description="Scheduling and runtime goodput (issue 43).")


class Cancelled(_Event):
    state: Literal["cancelled"] = "cancelled"
    reason: Literal["quota", "capacity", "superseded"] | None = Field(
        None,
        description="Set when trainctl cancelled the job: for waiting longer than max_pending (why it waited), or "
        "`superseded` by a newer run of its model (model.concurrency: replace).",
    )
    duration_seconds: float | None = None
    spent: Spend | None = Field(None, description="What every attempt ran: GPU-hours and estimated cost.")
    first_step: FirstStep | None = Field(None, description="Accepted → the first step, by phase (issue 43).")
    goodput: Goodput | None = Field(None, description="Scheduling and runtime goodput (issue 43).")


class Lineage(_Strict):
    """Where a model version came from, in full (its labels hold the same, shortened to label rules)."""

    request_id: str
    dataset_uri: str
    marker: str | None = Field(None, description="gs://bucket/object#generation of the marker that started it.")
    job: str | None = Field(None, description="The CustomJob that trained it.")
    image: str = Field(
        description="The container image that trained it (the built-in trainer's also serves it; your own code's "
        "versions are served by model.serving, or not at all)."
    )
    code_digest: str | None = Field(None, description=CODE_DIGEST_DESCRIPTION)
    champion_passed: str | None = Field(
        None, description="The version the trainer was given to score on the same rows (--champion-model-dir)."
    )
    dataset_fingerprint: str | None = Field(
        None,
        description="sha256 of the dataset's listing as the trainer reads it (object names, generations, CRC32C): a "
        "trigger whose fingerprint equals the champion's is `skipped` under model.skip_unchanged (issue 42).",
    )
    trigger: Trigger | None = Field(
        None, description="What started the run: a marker, a message, a schedule tick or an incident (issue 42)."
    )


class Decision(_Strict):
    """Why a version was promoted or held: the figures compared and the rule applied (the model's own, issue 38)."""

    metric: str
    goal: Literal["maximize", "minimize"]
    challenger: float | None = Field(
        None, description="The new version's figure on the model's reference set (None: metrics.json has none)."
    )
    champion: float | None = Field(
        None, description="The champion's figure on the same reference rows (None: no champion, or none measured)."
    )
    champion_version: str | None = Field(None, description="The version under the alias at promotion time.")
    same_rows: bool = Field(
        description="Both figures were measured on the same rows, the model's reference set, in this run."
    )
    min_improvement: float = Field(description="The margin the challenger had to beat the champion by.")
    interval: list[float] | None = Field(
        None,
        description="[low, high]: the paired bootstrap interval of the improvement on the reference set (positive: "
        "the challenger is better); promoted only when low exceeds min_improvement.",
    )
    confidence: float | None = Field(None, description="The interval's level (the model's rule).")
    reference_rows: int | None = Field(None, description="The rows of the reference set both were scored on.")
    run_challenger: float | None = Field(
        None, description="Reported beside, not decided on: the new version's figure on its own run's validation rows."
    )
    run_champion: float | None = Field(None, description="The champion's figure on those rows.")
    reason: str = Field(description="The decision in words.")


class _ModelEvent(_Event):
    model: str = Field(description="The Model Registry model id (the model block's name).")
    model_resource: str = Field(
        description="projects/{project id}/locations/{l}/models/{model}: spelled with the project id in every event "
        "(Vertex's own answers spell it with the project number; both name the same model)."
    )
    version: str | None = Field(None, description="The model version id this event is about.")


class Registered(_ModelEvent):
    state: Literal["registered"] = "registered"
    artifact_uri: str = Field(description="The run's model folder, the version's artifacts.")
    lineage: Lineage
    servable: bool | None = Field(
        None,
        description="Whether the version can be deployed: the built-in trainer's, or your own code's with a "
        "model.serving container. False: registered without one (label trainctl_servable=false); `message` says so. "
        "Absent in events from before trainctl recorded it.",
    )


class Promoted(_ModelEvent):
    state: Literal["promoted"] = "promoted"
    alias: str = Field(description="The alias moved to the version (`default` moves with it).")
    previous_version: str | None = Field(None, description="The version the alias left (None: the model's first).")
    decision: Decision | None = Field(None, description="Absent when a person moved the alias (trigger `cli`).")


class Held(_ModelEvent):
    state: Literal["held"] = "held"
    alias: str
    decision: Decision | None = Field(
        None, description="Absent when no decision could be made (the registry refused a step; `message` says why)."
    )


class RuleChanged(_ModelEvent):
    """A model's charter changed (issue 38): adopted, its rule or reference set changed, or its owner — by the
    operator, through `trainctl models` (trigger `cli`), or by the controller (the first version's rows)."""

    state: Literal["rule_changed"] = "rule_changed"
    action: Literal["adopted", "rule", "reference", "owner", "deploy"]
    owner: str = Field(description="The team that owns the model after the change.")
    rule: str = Field(description="The model's rule after the change, in words.")
    reference: str | None = Field(None, description="Where the model's reference set came from, after the change.")
    changes: list[str] = Field(default_factory=list, description="One `field: before -> after` line per change.")


class ServingFigures(_Strict):
    """A deployed version's own answers over a window, from Cloud Monitoring's endpoint metrics (never from the
    version itself): prediction/online/response_count, error_count and prediction_latencies (total)."""

    requests: int = Field(ge=0, description="Answered requests (response_count).")
    errors: int = Field(ge=0, description="Failed requests (error_count).")
    error_rate: float | None = Field(None, description="errors / requests; None without requests.")
    p99_ms: float | None = Field(None, description="The 99th percentile of total latency, in ms; None without data.")
    since: datetime
    until: datetime


class _RolloutEvent(_ModelEvent):
    """A step of rolling a promoted version out to the model's endpoint (issue 41): each once per request, in order
    deploying → canary → deployed or rolled_back (rolled_back may also follow deploying)."""

    alias: str = Field(description="The alias the version was promoted to.")
    endpoint: str = Field(description="projects/{project id}/locations/{l}/endpoints/{endpoint id}.")
    endpoint_name: str = Field(description="The model's deploy.endpoint: the endpoint's display name.")
    deployed_model_id: str | None = Field(None, description="The new version's DeployedModel id on the endpoint.")
    previous_version: str | None = Field(None, description="The version that served before (None: the first).")
    traffic_split: dict[str, int] = Field(
        default_factory=dict, description="The endpoint's traffic split after this step: deployed model id → percent."
    )


class Deploying(_RolloutEvent):
    state: Literal["deploying"] = "deploying"


class Canary(_RolloutEvent):
    state: Literal["canary"] = "canary"
    bake_until: datetime = Field(description="When the bake ends and the version is judged.")


class Deployed(_RolloutEvent):
    state: Literal["deployed"] = "deployed"
    figures: ServingFigures | None = Field(None, description="Its answers over the bake (None: the first version).")


class RolledBack(_RolloutEvent):
    state: Literal["rolled_back"] = "rolled_back"
    reason: Literal["errors", "latency", "too_few_requests", "deploy_failed", "no_figures"] = Field(
        description="errors or latency over the limits, too few requests to judge, the deployment itself failed, or "
        "Cloud Monitoring refused to give the figures (a permission missing): never promoted unjudged."
    )
    figures: ServingFigures | None = None
    alias_version: str | None = Field(
        None, description="The version under the alias after the rollback (the one it held before, when it moved)."
    )


class _ScoringEvent(_Event):
    """A batch scoring (issue 41, point 3): a `_SCORE` marker's folder of CSV files scored by a Vertex
    BatchPredictionJob with its rule's model's champion, each event once per marker generation."""

    model: str = Field(description="The Model Registry model id (the rule's model.name).")
    version: str = Field(description="The champion's version id when the job was made: the version that scores.")
    job_name: str = Field(
        description="projects/{p}/locations/{l}/batchPredictionJobs/{id}; empty when Vertex refused to make it."
    )


class Scoring(_ScoringEvent):
    state: Literal["scoring"] = "scoring"
    input_uris: list[str] = Field(description="What the job reads: the folder's CSV files (a wildcard).")
    output_prefix: str = Field(description="Where the job writes its prediction-<model>-<time>/ folder.")


class Scored(_ScoringEvent):
    state: Literal["scored"] = "scored"
    rows: int = Field(ge=0, description="Rows predicted (the job's completionStats.successfulCount).")
    failed_rows: int = Field(0, ge=0, description="Rows that failed (completionStats.failedCount).")
    output_uri: str = Field(description="The job's outputInfo.gcsOutputDirectory: its predictions_*.csv files.")


class ScoringFailed(_ScoringEvent):
    state: Literal["scoring_failed"] = "scoring_failed"
    job_state: str = Field(
        description="JOB_STATE_FAILED or JOB_STATE_CANCELLED; JOB_STATE_UNSPECIFIED when Vertex refused to make it."
    )
    error_code: int = Field(0, description="The job's google.rpc.Code.")
    error: str = Field("", description="The job's error message.")


class Skipped(_Event):
    """A trigger policy started nothing for this request (issue 42): decided once, at its claim."""

    state: Literal["skipped"] = "skipped"
    reason: SkipReason
    blocking_request: str | None = Field(
        None, description="reason `running`: the request id of the model's run that was active."
    )
    fingerprint: str | None = Field(None, description="reason `unchanged_data`: the dataset's fingerprint.")
    champion_version: str | None = Field(
        None, description="reason `unchanged_data`: the champion version trained on the same data."
    )
    saved_gpu_hours: float | None = Field(
        None, description="The GPU-hours the run could have held at most (its GPUs × its timeout), not spent."
    )


class Coalesced(_Event):
    """The markers a rule's quiet window folded into this one request (issue 42), newest last."""

    state: Literal["coalesced"] = "coalesced"
    rule: str = Field(description="The trigger rule (its gs:// prefix) whose quiet window closed.")
    markers: list[str] = Field(description="gs://bucket/object#generation of each marker folded in, oldest first.")
    dataset_uri: str = Field(description="What the one request trains on: the newest marker's folder, or the union.")
    saved_gpu_hours: float | None = Field(
        None, description="The GPU-hours the runs not started would have held at most (one per marker folded in)."
    )


class Superseded(_Event):
    """This request's run was cancelled because a newer trigger of its model arrived (model.concurrency: replace)."""

    state: Literal["superseded"] = "superseded"
    successor: str = Field(description="The request id of the run that replaces it.")
    model: str = Field(description="The model both runs feed.")


class _PoolEvent(_Event):
    """A warm pool a team keeps (issue 43): a Vertex persistent resource trainctl created for the team's jobs of one
    shape and deletes after `keep_alive` idle. `request_id` is the pool's life (`<pool id>-<n>`, n counting its
    creations), `request_key` `pool:<resource name>#<n>`: each event once per life."""

    pool: str = Field(description="projects/{p}/locations/{l}/persistentResources/{id}.")
    machine_type: str
    accelerator_type: str | None = None
    accelerator_count: int | None = None
    replicas: int = Field(ge=1, description="Nodes the pool holds.")
    keep_alive_seconds: int = Field(ge=0)


class PoolCreated(_PoolEvent):
    state: Literal["pool_created"] = "pool_created"
    demand: str = Field(description="The request id whose arrival asked for the pool.")


class PoolDeleted(_PoolEvent):
    state: Literal["pool_deleted"] = "pool_deleted"
    reason: Literal["idle", "failed"] = Field(
        description="idle: no job ran on it for keep_alive; failed: Vertex could not provision it (its error)."
    )
    lived_seconds: float = Field(ge=0, description="From creation to deletion.")
    idle_seconds: float = Field(ge=0, description="Of those, the time no job used any of its nodes.")
    idle_usd: float = Field(ge=0, description="What the idle time cost at on-demand prices: charged to the team.")
    error: str | None = Field(None, description="reason failed: Vertex's error.")


JobEvent = Annotated[
    Accepted
    | Duplicate
    | Rejected
    | Queued
    | Submitted
    | Running
    | Retrying
    | Stuck
    | Succeeded
    | Failed
    | Cancelled
    | Registered
    | Promoted
    | Held
    | RuleChanged
    | Deploying
    | Canary
    | Deployed
    | RolledBack
    | Scoring
    | Scored
    | ScoringFailed
    | Skipped
    | Coalesced
    | Superseded
    | PoolCreated
    | PoolDeleted,
    Field(discriminator="state"),
]
EVENT_ADAPTER: TypeAdapter[JobEvent] = TypeAdapter(JobEvent)


def event_id(request_key: str, state: str, attempt: int, delivery: str | None = None) -> str:
    """Deterministic: the same state change of the same request always gets the same id."""
    parts = [request_key, state, str(attempt)] + ([delivery] if delivery else [])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PubsubMessage:
    data: bytes
    attributes: dict[str, str]
    # Pub/Sub delivers messages of one key in publish order to subscriptions with message ordering on.
    ordering_key: str


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_pubsub_message(event: JobEvent, source: str) -> PubsubMessage:
    """The event as Pub/Sub sends it: JSON data, CloudEvents binary-mode attributes, filter attributes."""
    attributes = {
        "ce-specversion": SPEC_VERSION,
        "ce-type": event.ce_type,
        "ce-source": source,
        "ce-id": event.ce_id,
        "ce-time": _rfc3339(event.time),
        "content-type": "application/json",
        "request_id": event.request_id,
        "state": event.state,
    }
    if event.delivery is not None:
        attributes["delivery"] = event.delivery
    # Each team's events subscription keeps its own with `attributes.team = "<team>"` (terraform/watchers.tf).
    if event.team is not None:
        attributes["team"] = event.team
    # A filter keeps a request's own events with `NOT attributes:rejected_delivery` (`:` tests that the attribute
    # is present: cloud.google.com/pubsub/docs/filtering).
    if isinstance(event, Rejected) and event.rejected_delivery is not None:
        attributes["rejected_delivery"] = event.rejected_delivery
    return PubsubMessage(
        data=event.model_dump_json(exclude_none=True).encode(),
        attributes=attributes,
        ordering_key=event.request_id,
    )


def parse_event(data: bytes | str) -> JobEvent:
    """A published event's data back into its model (the state in the data picks the model)."""
    return EVENT_ADAPTER.validate_json(data)
