"""The ledger record a new request's claim creates (DESIGN.md §4 step 1): everything later steps read of it — its
request, ladder, plan, model steps — and its `accepted` event, queued in its outbox with it."""

from __future__ import annotations

from datetime import datetime

from functions.capacity.ladder import skipped_outcomes
from functions.data.admission import id_named_features
from functions.intake.delivery import Delivery, Folded
from functions.intake.preparation import Prepared
from functions.ledger.keys import key_hash
from functions.ledger.record import Record
from schemas.events import Accepted, Artifacts, Coalesced, JobEvent, cost_summary
from schemas.request import TrainingJobRequest, code_digest
from schemas.secrets import redacted_request, sealed_env


def _naming(columns: list[str]) -> str:
    """The new columns a passed data check found, in words for the `accepted` message."""
    if not columns:
        return ""
    shown = ", ".join(repr(name) for name in columns[:5])
    more = f" and {len(columns) - 5} more" if len(columns) > 5 else ""
    return f" (new columns, allowed: {shown}{more})"


def artifacts(output_dir: str) -> Artifacts:
    return Artifacts(
        model_dir=f"{output_dir}model/",
        metrics_uri=f"{output_dir}model/metrics.json",
        checkpoint_dir=f"{output_dir}checkpoints/",
        tensorboard_dir=f"{output_dir}logs/",
    )


def accepted_record(
    request: TrainingJobRequest,
    key: str,
    explicit_id: bool,
    delivery: Delivery,
    prepared: Prepared,
    digest: str,
    team: str | None,
    owner: str,
    lease_until: datetime,
    now: datetime,
) -> Record:
    """The new request's record, claimed by `owner` until `lease_until`, with `accepted` in its outbox."""
    plan, rungs, start = prepared.plan, prepared.rungs, prepared.start
    record = Record(
        team=team,
        key=key,
        key_hash=key_hash(key),
        request_id=request.request_id,
        spec_hash=digest,
        explicit_id=explicit_id,
        # Secret-looking trainer.env values are kept apart, out of everything that copies the request (issue 40).
        request=redacted_request(request.model_dump(mode="json")),
        sealed_env=sealed_env(request.model_dump(mode="json")) or None,
        trigger=delivery.trigger,
        max_attempts=request.scheduling.max_attempts,
        max_pending=rungs[start].max_pending,
        max_silence=request.scheduling.max_silence,
        lease_until=lease_until,
        owner=owner,
        cost=plan.cost,
        artifacts=artifacts(plan.output_dir),
        created=now,
        updated=now,
        ladder=rungs,
        rung=start,
        rung_history=skipped_outcomes(rungs),
        model_steps=prepared.model.steps() if prepared.model else None,
        code_objects=prepared.code_objects or None,
        budget_month=prepared.budget_month,
        dataset_fingerprint=prepared.fingerprint,
    )
    events: list[JobEvent] = [_accepted(request, key, delivery, prepared, record, team, now)]
    if delivery.folded is not None:  # a quiet window's request: the markers it stands for, in the same outbox
        events.append(_coalesced(request, key, delivery, delivery.folded, prepared, team, now))
    record.add_events(events)
    return record


def skipped_record(record: Record, skipped: JobEvent) -> Record:
    """The new request's record made final at its claim by a trigger policy (issue 42): `skipped`, with that event in
    its outbox instead of `accepted` (what else its claim queued, such as `coalesced`, stays, numbered again), and
    no claim held."""
    record.state, record.owner, record.lease_until = "skipped", None, None
    kept = [event for event in record.outbox_events() if event.state != "accepted"]
    record.outbox, record.sequence = [], 0
    record.add_events([*kept, skipped])
    return record


def _coalesced(
    request: TrainingJobRequest,
    key: str,
    delivery: Delivery,
    folded: Folded,
    prepared: Prepared,
    team: str | None,
    now: datetime,
) -> Coalesced:
    """What a quiet window folded into this request; the runs not started could each have held this one's GPUs for
    its timeout at most."""
    others = len(folded.markers) - 1
    saved = round(others * prepared.plan.cost.gpus * request.scheduling.timeout / 3600, 3)
    return Coalesced(
        request_id=request.request_id,
        request_key=key,
        time=now,
        message=f"{len(folded.markers)} markers under {folded.rule} folded into one run on {folded.dataset_uri}; "
        f"{others} runs not started",
        trigger=delivery.trigger,
        team=team,
        rule=folded.rule,
        markers=list(folded.markers),
        dataset_uri=folded.dataset_uri,
        saved_gpu_hours=saved,
    )


def _accepted(
    request: TrainingJobRequest,
    key: str,
    delivery: Delivery,
    prepared: Prepared,
    record: Record,
    team: str | None,
    now: datetime,
) -> Accepted:
    plan, data, start = prepared.plan, prepared.data, prepared.start
    resources = request.at_rung(start).resources
    nodes = "node" if resources.replica_count == 1 else "nodes"
    message = (
        f"accepted: {resources.total_gpus} GPUs on {resources.replica_count} {nodes}"
        + (f" (rung {start} of the ladder; earlier rungs never fit the GPU quota)" if start else "")
        + f", {cost_summary(plan.cost)}; {plan.reduction_server.reason}"
        + (f"; the dataset's header matches the champion's schema{_naming(data.new_columns)}" if data.checked else "")
        + _id_warning(request)
    )
    return Accepted(
        request_id=request.request_id,
        request_key=key,
        time=now,
        message=message,
        trigger=delivery.trigger,
        cost=plan.cost,
        skipped_rungs=skipped_outcomes(prepared.rungs) or None,
        labels=request.labels or None,
        team=team,
        new_columns=data.new_columns or None,
        code_digest=code_digest(record.request),
        code_objects=prepared.code_objects or None,
    )


def _id_warning(request: TrainingJobRequest) -> str:
    """Features named like an ID are accepted and said (an ID column was once a feature unnoticed: issue 44); the
    trainer, which reads the values, names the ID-like and constant features it trained on in data_warnings."""
    named = id_named_features(request)
    if not named:
        return ""
    listed = ", ".join(repr(name) for name in named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
    return f"; warning: dataset.features {listed} named like an ID: an ID is no feature, leave it out if it is one"
