"""What each finished request came to, kept small enough to travel in a listing.

When a request reaches a final state (or is rejected at intake, which writes no ledger record) the controller
writes an object `history/<day>/<id>` whose custom metadata holds its Outcome. `trainctl report` then
lists only the days it asks about, and each page of the listing brings 1,000 outcomes with no object read:
at 100,000 finished requests that is 100 listing calls instead of 100,000 reads (bench/report_listing.py).

Custom metadata is small (the limits below): an outcome whose labels do not fit keeps them out of its metadata
and says so, and the report reads those few objects, whose content is always the whole outcome. Should any other
field a request fills not fit either (code_digest is bounded: schemas/request.py), it moves into the content the
same way (issue 40, point 2): an outcome's filing never fails for its size, so no run goes uncounted.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from functions.cloud.gcs import metadata_problems
from functions.ledger.record import Record
from schemas.events import Coalesced, FirstStep, Goodput, JobEvent, Rejected, Skipped, Spend
from schemas.request import code_digest

FINAL_EVENT_STATES = frozenset({"succeeded", "failed", "cancelled", "rejected", "skipped"})
METADATA_KEY = "outcome"
# The controller's model decisions after a success (functions/models/promotion.py) are filed beside the outcomes, under
# their own key, so that the report counts them per model without counting them as requests.
MODEL_DECISION_STATES = frozenset({"promoted", "held"})
# How each promoted version's rollout ended (issue 41), filed the same way under the same key.
ROLLOUT_END_STATES = frozenset({"deployed", "rolled_back"})
MODEL_DECISION_KEY = "model_decision"
# A rule's quiet window folding markers into one request (issue 42, `coalesced`) is filed the same way under its own
# key, so that the report counts the markers folded in and the GPU-hours saved without counting them as requests:
# Outbox.flush files a `coalesced` event it publishes; whoever publishes one elsewhere files outcome_of(event, None)
# with Ledger.record_outcome(…, TRIGGER_POLICY_KEY).
TRIGGER_POLICY_KEY = "trigger_policy"
# Set to LABELS_IN_CONTENT when the outcome in METADATA_KEY was stored without its labels (and, should they not fit
# either, the other fields a request fills: SHORTENED): the content holds it whole.
LABELS_KEY = "labels"
LABELS_IN_CONTENT = "in-content"
# An outcome's content: its JSON with at most 64 labels of 63-character keys and values is under 10 KiB.
MAX_OUTCOME_BYTES = 64 * 1024


class Outcome(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    request_id: str
    state: str = Field(
        description="succeeded, failed, cancelled, rejected or skipped; a model decision: promoted or held; a trigger "
        "policy's: coalesced."
    )
    model: str | None = Field(None, description="A model decision's model (the request's model block).")
    reason: str | None = None
    time: datetime = Field(description="When the final event happened (its `time`).")
    accepted: datetime | None = Field(None, description="When the request was accepted (its record was created).")
    started: datetime | None = Field(None, description="When the last attempt's job started running (Vertex).")
    ended: datetime | None = Field(None, description="When it ended (Vertex).")
    gpus: int = Field(0, description="The last attempt's GPUs.")
    hourly_usd: float = Field(0.0, description="… and its rung's estimated price an hour.")
    spent: Spend | None = Field(None, description="What every attempt ran (the final event's; None before it was).")
    attempt: int = 1
    labels: dict[str, str] = Field(default_factory=dict)
    team: str | None = Field(None, description="The team it arrived as (issue 32), for budgets and the report.")
    code_digest: str | None = Field(None, description="A package's sha256, as in the events' code_digest.")
    saved_gpu_hours: float | None = Field(
        None, description="A rejection by the data check: the GPU-hours the run could have held at most."
    )
    saved_usd: float | None = Field(None, description="… and the most it could have cost (its max_usd).")
    markers: int | None = Field(None, description="A `coalesced` event: how many markers it folded into one request.")
    first_step: FirstStep | None = Field(None, description="Accepted → the first step, by phase (issue 43).")
    goodput: Goodput | None = Field(None, description="Scheduling and runtime goodput (issue 43).")

    @property
    def run_seconds(self) -> float | None:
        return (self.ended - self.started).total_seconds() if self.started and self.ended else None

    @property
    def gpu_hours(self) -> float:
        """What every attempt of the request ran, in GPU-hours; an outcome from before: its last attempt's."""
        return self.spent.gpu_hours if self.spent else self.gpus * (self.run_seconds or 0) / 3600

    @property
    def cost_usd(self) -> float:
        """The estimated cost of every attempt, each at its rung's price; an outcome from before: its last attempt's."""
        return self.spent.estimated_cost_usd if self.spent else self.hourly_usd * (self.run_seconds or 0) / 3600

    @property
    def total_seconds(self) -> float | None:
        """Accepted → the end (the last job's, else the final event's): scheduling goodput's denominator."""
        end = self.ended or self.time
        return (end - self.accepted).total_seconds() if self.accepted else None

    @property
    def start_seconds(self) -> float | None:
        return (self.started - self.accepted).total_seconds() if self.started and self.accepted else None


def outcome_of(event: JobEvent, record: Record | None) -> Outcome:
    """The outcome a final event records; `record` is None for a rejection at intake (nothing was accepted)."""
    stamps = event.timestamps
    saved = event if isinstance(event, Rejected) and event.saved_gpu_hours is not None else None  # the data check
    policy = event if isinstance(event, Skipped | Coalesced) else None  # a trigger policy (issue 42)
    saved_gpu_hours = saved.saved_gpu_hours if saved else policy.saved_gpu_hours if policy else None
    saved_usd = saved.cost.max_usd if saved and saved.cost else None
    if isinstance(event, Skipped) and record is not None:
        saved_usd = record.cost.max_usd
    return Outcome(
        request_id=event.request_id,
        state=event.state,
        reason=getattr(event, "reason", None),
        time=event.time,
        accepted=record.created if record else None,
        started=stamps.started if stamps else None,
        ended=stamps.ended if stamps else None,
        gpus=record.attempt_price[0] if record else 0,
        hourly_usd=record.attempt_price[1] if record else 0.0,
        spent=getattr(event, "spent", None),
        attempt=event.attempt,
        labels=(record.request.get("labels") or {}) if record else {},
        team=record.team if record else getattr(event, "team", None),
        code_digest=code_digest(record.request) if record else None,
        model=getattr(event, "model", None),
        saved_gpu_hours=saved_gpu_hours,
        saved_usd=saved_usd,
        markers=len(event.markers) if isinstance(event, Coalesced) else None,
        first_step=getattr(event, "first_step", None),
        goodput=getattr(event, "goodput", None),
    )


# What an outcome's metadata leaves out when it does not fit, in turn: its labels, then every other field a request
# can fill with text (request_id, team and the figures are bounded by the schema and stay: the report counts them).
SHORTENED: tuple[dict[str, object], ...] = ({"labels": {}}, {"labels": {}, "code_digest": None, "model": None})


def history_entry(outcome: Outcome, key: str = METADATA_KEY) -> tuple[bytes, dict[str, str]]:
    """The content and the custom metadata of an outcome's history object: the whole outcome as content; in the
    metadata, the outcome with its labels when they fit Cloud Storage's limits (gcs.metadata_problems), else
    without them (then without the other text a request fills, SHORTENED) and a note that the content holds it
    whole. Without them an outcome is under 1 KiB."""
    whole = outcome.model_dump_json(exclude_none=True)
    metadata = {key: whole}
    for left_out in SHORTENED:
        if not metadata_problems(metadata):
            break
        shortened = outcome.model_copy(update=left_out).model_dump_json(exclude_none=True)
        metadata = {key: shortened, LABELS_KEY: LABELS_IN_CONTENT}
    return whole.encode(), metadata


def labels_in_content(metadata: dict[str, str]) -> bool:
    """Whether the outcome in this metadata was stored shortened, without its labels (the content holds it whole)."""
    return metadata.get(LABELS_KEY) == LABELS_IN_CONTENT
