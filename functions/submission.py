"""Submission: admit → plan → claim → submit, exactly once from at-least-once deliveries (DESIGN.md §4).

The steps, in the order a new request takes them (each labelled below):
  0. admit: guardrails and the dataset preflight, before anything is written;
  1. claim: create the ledger record with if_generation_match=0 (CLAIMED, a lease), queue `accepted`;
  2. a record that exists: duplicate, conflict, wait for a live claim, or take over an expired one;
  3. find-or-create the job labelled with the key and attempt (functions/vertex.py, the one place), once the rung's
     GPUs fit the project's quota (else it waits: functions/quota_queue.py); a refusal: functions/refusals.py;
  4. record SUBMITTED and the job name (compare-and-swap), publish `submitted`.
A crash at any point leaves a live lease (the redelivery waits) or a labelled job (adopted). Never two jobs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import deadline, logs, triggers
from functions.admission import admission_problems, dataset_problem
from functions.budgets import request_worst_case_usd, worst_case_usd
from functions.data_admission import DataCheck, check_dataset
from functions.errors import Transient
from functions.failures import QUOTA_ADVICE
from functions.gcs import Conflict, StorageError
from functions.history import outcome_of
from functions.job_snapshot import job_ref
from functions.keys import key_hash
from functions.ladder import ladder_of, skipped_outcomes
from functions.ledger import IdTaken, Ledger
from functions.model_intake import ModelAdmission, ModelIntake, ModelRefused, evidence_of
from functions.monitoring_fields import published_fields, rejection_rule
from functions.outbox import Outbox, whole_outbox
from functions.output_claims import OutputClaims
from functions.package_check import check_packages
from functions.planning import Plan, plan_custom_job
from functions.ports import Events, Quotas, Storage
from functions.quota_queue import QuotaQueue
from functions.record import LadderRung, Record
from functions.refusals import Refusals
from functions.registry_types import ModelVersion
from functions.repeats import decide_on_existing
from functions.settings import Settings
from functions.teams import NO_TEAMS, label_problem
from functions.vertex import CallRejected, LazyJobs
from schemas.errors import FieldError
from schemas.events import (
    Accepted,
    Artifacts,
    Budget,
    CodeObject,
    CostEstimate,
    Duplicate,
    Rejected,
    RejectedDelivery,
    Submitted,
    Trigger,
    cost_summary,
)
from schemas.request import TrainingJobRequest, code_digest, rung_prefix
from schemas.rules import split_gs_uri

# Fields added after requests were first hashed, left out while at their defaults: a request redelivered across
# the deploy that added them keeps its hash (a new hash under an explicit request_id would read as a conflict).
_LATER_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("fallbacks",): [],
    ("scheduling", "max_preemptions"): 1,
    ("model",): None,
    ("model", "max_drift"): None,
    ("model", "moves_default"): True,
    ("model", "confidence"): 0.95,
    ("model", "min_champion_skill"): -0.1,
    ("model", "max_target_drift"): 1.0,
    ("model", "reference"): None,
    ("model", "serving"): None,
    ("trainer", "python_package"): None,
}


def spec_hash(request: TrainingJobRequest) -> str:
    spec = request.model_dump(mode="json")
    for path, default in _LATER_DEFAULTS.items():
        *parents, name = path
        holder: Any = spec
        for key in parents:
            holder = holder.get(key) if holder else None  # a parent left out at its default holds nothing
        if holder and name in holder and holder[name] == default:
            del holder[name]
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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


@dataclass(frozen=True)
class Delivery:
    """One arrival of a request: what triggered it, the arrival's id and time (for per-delivery events)."""

    trigger: Trigger
    event_id: str
    time: datetime
    # Where it arrived decides its team (its topic, its marker template's `team`): None, the default team.
    team: str | None = None


@dataclass
class Submission:
    settings: Settings
    ledger: Ledger
    gcs: Storage
    publisher: Events
    jobs: LazyJobs
    outbox: Outbox
    clock: Callable[[], datetime]
    owner: str
    quotas: Quotas | None  # the project's GPU limits (a rung that can never fit them is skipped); None: no gating
    queue: QuotaQueue  # trainctl's quota queue: what a rung holds of the quota, and who waits for it
    refusals: Refusals  # what Vertex refusing the submission does to the request
    outputs: OutputClaims  # the output folders active requests hold outside the control bucket
    models: ModelIntake  # whether the request may add a version to its model, and what its run is judged by

    def reject(
        self,
        request_id: str,
        key: str,
        delivery: Delivery,
        errors: list[str],
        message: str,
        reason: str = "invalid",
        cost: CostEstimate | None = None,
        saved_gpu_hours: float | None = None,
        budget: Budget | None = None,
        rejected_delivery: RejectedDelivery = "unclaimed",
    ) -> str:
        """Publish `rejected` for input that will never become valid; nothing is written to the ledger. `cost` and
        `saved_gpu_hours`: what the run would have cost at most, for a rejection that saved it (the data check).
        The event is about this delivery alone, marked `rejected_delivery` (issue 38, point 6): its request_id is
        whatever the document named, so it must never read as the end of the request that holds that id."""
        logs.warning(message, errors=errors, request_key=key)
        event = Rejected(
            rejected_delivery=rejected_delivery,
            request_id=request_id,
            request_key=key,
            time=delivery.time,
            message=message,
            trigger=delivery.trigger,
            delivery=delivery.event_id,
            reason=reason,
            errors=errors,
            cost=cost,
            saved_gpu_hours=saved_gpu_hours,
            budget=budget,
            team=self.team_of(delivery) if self.settings.teams else delivery.team,
        )
        self.publisher.publish(event)
        logs.info("published rejected", **published_fields(event), rule=rejection_rule(errors))
        # Nothing else of it is in the ledger: its outcome is filed for `trainctl report` (functions/history.py).
        self.ledger.record_outcome(outcome_of(event, None), f"rejected-{event.ce_id}")
        return "rejected"

    def handle_request(self, request: TrainingJobRequest, key: str, explicit_id: bool, delivery: Delivery) -> str:
        """Admit, plan and submit one request exactly once; returns what happened in a word. `explicit_id`: the
        requester chose the request id (Pub/Sub, or a marker naming one), rather than its marker deriving it."""
        if explicit_id and (reserved := triggers.explicit_id_problem(request.request_id)):
            errors = [f"request_id: {reserved}"]
            return self.reject(request.request_id, key, delivery, errors, "the request_id is reserved for markers")
        team = self.team_of(delivery)
        plan = plan_custom_job(request, self.settings, key, team=team)
        # Step 0: admit.
        problems = admission_problems(request, self.settings, plan.output_dir, key, team)
        if problems:
            return self.reject(
                request.request_id, key, delivery, [str(p) for p in problems], "the request breaks a guardrail"
            )
        if self.settings.teams and (forged := label_problem(request.labels, team)):
            return self.reject(request.request_id, key, delivery, [forged], "labels.team is not where it arrived")
        digest = spec_hash(request)
        found = self.ledger.read(key_hash(key))
        if found is None:
            if (problem := self._dataset_problem(request)) is not None:
                return self.reject(request.request_id, key, delivery, [str(problem)], "the dataset holds no data")
            if (packages := check_packages(self.gcs, request)).errors:
                message = "a package is not what its name says"
                return self.reject(request.request_id, key, delivery, packages.errors, message)
            rungs = self._ladder(request, team)
            start = next((index for index, rung in enumerate(rungs) if rung.skipped is None), None)
            if start is None:
                return self.reject(
                    request.request_id,
                    key,
                    delivery,
                    [f"{rung_prefix(index)}resources: {rung.skipped}" for index, rung in enumerate(rungs)],
                    "no rung of the request can ever fit the project's GPU quota"
                    + (f" or team {team}'s share of it" if self.settings.teams else ""),
                    reason="quota",
                )
            if (budget := self._over_budget(request, team)) is not None:
                return self._reject_budget(request, key, delivery, budget)
            try:
                model = self.models.admit(request, team)
            except ModelRefused as refused:
                return self.reject(request.request_id, key, delivery, refused.errors, refused.message)
            champion = model.champion if model else None
            if start != 0 or model is not None:
                evidence = model.evidence() if model else None
                plan = plan_custom_job(request, self.settings, key, 1, start, evidence, team)
            data = self._data_check(request, champion)
            if data.errors:
                return self._reject_data(request, key, delivery, data, plan.cost, start)
            self.jobs.prepare()
            # Step 1: claim, its output folder first (held from here until the record is retired).
            holder = self.outputs.claim(plan.output_dir, key_hash(key), request.request_id)
            if holder is not None:
                return self.reject(
                    request.request_id,
                    key,
                    delivery,
                    [
                        f"output_dir: guardrail output_isolation: {plan.output_dir} overlaps {holder.output_dir}, "
                        f"where active request {holder.request_id} writes (two jobs in one folder would read each "
                        "other's metrics and progress); choose a folder neither inside nor around it, or send this "
                        f"request again once {holder.request_id} has ended"
                    ],
                    "the output_dir overlaps an active request's",
                )
            teamed = team if self.settings.teams or delivery.team else None
            record = self._new_record(
                request, key, explicit_id, delivery, plan, digest, rungs, start, model, data, teamed,
                packages.objects or None,
            )  # fmt: skip
            try:
                generation = self.ledger.create(record)
            except IdTaken as taken:
                self.outputs.release(plan.output_dir, key_hash(key))  # this request will not write there
                return self._id_taken(request, key, explicit_id, delivery, taken)
            except Conflict:
                found = self.ledger.read(key_hash(key))
                if found is None:
                    raise Transient("the ledger record vanished between create and read") from None
            else:
                logs.info("claimed", request_key=key, owner=self.owner)
                self.ledger.mark_active(record.key_hash)
                record, generation = self.outbox.flush(record, generation, whole_outbox(record))
                return self.submit(record, generation, plan, new_attempt=True)
        # Step 2: the record exists.
        return self._handle_existing(found, digest, delivery)

    def _id_taken(
        self, request: TrainingJobRequest, key: str, explicit_id: bool, delivery: Delivery, taken: IdTaken
    ) -> str:
        """Two keys map to one request id: the later request is refused and the holder goes on untouched."""
        found = self.ledger.read(taken.holder)
        holder = found[0].key if found else f"the request with key hash {taken.holder}"
        advice = (
            "choose another request_id"
            if explicit_id
            else "the id is derived from the marker's folder and generation, and another marker's maps to the same id "
            "(folder names that differ only in case or punctuation, or share a long ending): upload the dataset to "
            "a folder with a distinct name"
        )
        error = f"request_id: {request.request_id!r} already belongs to another request ({holder}); {advice}"
        message = "request_id already belongs to another request"
        return self.reject(
            request.request_id, key, delivery, [error], message, rejected_delivery="conflicting_delivery"
        )

    def _dataset_problem(self, request: TrainingJobRequest) -> FieldError | None:
        """Preflight of a new request's dataset (issue 12 point 17): it exists, holds data and can be read."""
        uri = request.dataset.uri
        if not uri.startswith("gs://"):
            return None  # file:// in local mode: the nodes read it where the controller runs
        bucket, prefix = split_gs_uri(uri)
        try:
            return dataset_problem(uri, self.gcs.objects_under(bucket, prefix), self.settings.marker_names)
        except StorageError as exc:
            return FieldError(
                "dataset.uri",
                f"{uri} cannot be read by trainctl's controller (Cloud Storage answered {exc.status}); "
                f"its service account needs storage.objects.list on gs://{bucket}",
            )

    def _data_check(self, request: TrainingJobRequest, champion: ModelVersion | None) -> DataCheck:
        """The new dataset's header against the champion's recorded schema (issue 27, point 2); an empty check
        without a champion."""
        if champion is None or not champion.artifact_uri:
            return DataCheck()
        bucket = self.settings.control_bucket
        return check_dataset(self.gcs, bucket, request, champion.artifact_uri, champion.version_id)

    def _reject_data(
        self,
        request: TrainingJobRequest,
        key: str,
        delivery: Delivery,
        data: DataCheck,
        cost: CostEstimate,
        rung: int,
    ) -> str:
        """`rejected` with reason `data`, carrying the run's own estimate: the GPU time the check saved at most
        (its GPUs for its whole timeout), for `trainctl report`."""
        assert request.model is not None
        hours = cost.gpus * request.at_rung(rung).scheduling.timeout / 3600
        return self.reject(
            request.request_id,
            key,
            delivery,
            data.errors,
            f"the dataset does not match the schema of model {request.model.name}'s champion "
            f"({data.summary}); nothing was claimed and no GPU started, saving up to {hours:,.1f} GPU-hours "
            f"({cost_summary(cost)})",
            reason="data",
            cost=cost,
            saved_gpu_hours=round(hours, 4),
        )

    def _ladder(self, request: TrainingJobRequest, team: str) -> list[LadderRung]:
        """The request's rungs, each marked skipped when it can never fit the project's GPU quota (more GPUs than
        the limit; an unknown limit skips nothing), or its team's share of it (nominal + what it may borrow)."""
        rungs = ladder_of(request, self.settings.region)
        if self.quotas is None:
            return rungs
        marked = []
        for rung in rungs:
            limit = self.quotas.limit(rung.quota_metric, rung.region)
            cap = self.queue.shares(rung.quota_metric)(team).cap(limit) if limit is not None else None
            if limit is not None and rung.gpus > limit:
                rung = rung.model_copy(
                    update={
                        "skipped": f"needs {rung.gpus} GPUs of {rung.quota_metric} in {rung.region}; "
                        f"the project's limit is {limit}. {QUOTA_ADVICE}"
                    }
                )
            elif cap is not None and rung.gpus > cap:
                share = self.queue.shares(rung.quota_metric)(team)
                rung = rung.model_copy(
                    update={
                        "skipped": f"needs {rung.gpus} GPUs of {rung.quota_metric}; team {team} may hold {cap} "
                        f"of it ({share.nominal} its own, borrowing up to {share.borrow_limit}): ask the operator "
                        "for a larger share (the teams setting), or choose another GPU type"
                    }
                )
            marked.append(rung)
        return marked

    def team_of(self, delivery: Delivery) -> str:
        """The team a delivery arrived as: its topic's or its template's; the default team (or the only one)."""
        teams = self.settings.teams
        return delivery.team or (teams.default_team if teams else NO_TEAMS)

    def _over_budget(self, request: TrainingJobRequest, team: str) -> Budget | None:
        """The team's budget figures when this request's worst case does not fit what is left of it this month:
        what its requests that ended this month cost (history), plus the worst case of its active ones."""
        teams = self.settings.teams
        budget = teams.teams[team].monthly_budget_usd if teams and team in teams.teams else None
        if budget is None:
            return None
        now = self.clock()
        month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        spent = sum(o.cost_usd for o in self.ledger.outcomes(month_start) if o.team == team)
        active = sum(worst_case_usd(r) for r in self.ledger.active_records() if r.team == team and not r.final)
        needed = request_worst_case_usd(request)
        if spent + active + needed <= budget:
            return None
        return Budget(
            team=team,
            month=f"{month_start:%Y-%m}",
            budget_usd=round(budget, 2),
            spent_usd=round(spent, 2),
            active_usd=round(active, 2),
            request_usd=round(needed, 2),
        )

    def _reject_budget(self, request: TrainingJobRequest, key: str, delivery: Delivery, budget: Budget) -> str:
        total = budget.spent_usd + budget.active_usd + budget.request_usd
        error = (
            f"budget: team {budget.team}'s budget for {budget.month} is ${budget.budget_usd:,.2f}; its requests spent "
            f"${budget.spent_usd:,.2f}, its active ones may spend up to ${budget.active_usd:,.2f} more, and this one "
            f"up to ${budget.request_usd:,.2f} (its costliest rung × max_attempts): ${total:,.2f} in all. Wait for "
            "active requests to end, lower this one's GPUs, timeout or max_attempts, or ask the operator for a larger "
            "monthly_budget_usd"
        )
        message = f"team {budget.team}'s monthly budget would be exceeded"
        return self.reject(request.request_id, key, delivery, [error], message, reason="budget", budget=budget)

    def _new_record(
        self,
        request: TrainingJobRequest,
        key: str,
        explicit_id: bool,
        delivery: Delivery,
        plan: Plan,
        digest: str,
        rungs: list[LadderRung],
        start: int,
        model: ModelAdmission | None,
        data: DataCheck,
        team: str | None,
        code_objects: list[CodeObject] | None = None,
    ) -> Record:
        now = self.clock()
        record = Record(
            team=team,
            key=key,
            key_hash=key_hash(key),
            request_id=request.request_id,
            spec_hash=digest,
            explicit_id=explicit_id,
            request=request.model_dump(mode="json"),
            trigger=delivery.trigger,
            max_attempts=request.scheduling.max_attempts,
            max_pending=rungs[start].max_pending,
            max_silence=request.scheduling.max_silence,
            lease_until=now + timedelta(seconds=self.settings.lease),
            owner=self.owner,
            cost=plan.cost,
            artifacts=artifacts(plan.output_dir),
            created=now,
            updated=now,
            ladder=rungs,
            rung=start,
            rung_history=skipped_outcomes(rungs),
            model_steps=model.steps() if model else None,
            code_objects=code_objects,
        )
        resources = request.at_rung(start).resources
        accepted = Accepted(
            request_id=request.request_id,
            request_key=key,
            time=now,
            message=f"accepted: {resources.total_gpus} GPUs on {resources.replica_count} "
            + ("node" if resources.replica_count == 1 else "nodes")
            + (f" (rung {start} of the ladder; earlier rungs never fit the GPU quota)" if start else "")
            + f", {cost_summary(plan.cost)}; {plan.reduction_server.reason}"
            + (
                f"; the dataset's header matches the champion's schema{_naming(data.new_columns)}"
                if data.checked
                else ""
            ),
            trigger=delivery.trigger,
            cost=plan.cost,
            skipped_rungs=skipped_outcomes(rungs) or None,
            labels=request.labels or None,
            team=team,
            new_columns=data.new_columns or None,
            code_digest=code_digest(record.request),
            code_objects=code_objects,
        )
        record.add_events([accepted])
        return record

    def _handle_existing(self, found: tuple[Record, int], digest: str, delivery: Delivery) -> str:
        wait_until = self.clock() + timedelta(seconds=min(self.settings.claim_wait, self.settings.lease))
        while True:
            record, generation = found
            decision = decide_on_existing(record, digest, self.clock())
            if decision == "conflict":
                return self.reject(
                    record.request_id,
                    record.key,
                    delivery,
                    [f"request_id: {record.request_id!r} was already used for a different request"],
                    "request_id reused with a different spec; change the request_id to submit a new job",
                    rejected_delivery="conflicting_delivery",
                )
            if decision == "duplicate":
                return self._duplicate(record, generation, delivery)
            if decision == "take_over":
                try:
                    generation = self.claim(record, generation)
                except Conflict:
                    found = self.outbox.read(record.key_hash)
                    continue
                logs.info("took over an expired claim", request_key=record.key, owner=self.owner)
                return self.submit(record, generation)
            if self.clock() >= wait_until or not deadline.allows(1.0):
                raise Transient(f"another delivery holds the claim on {record.key} until {record.lease_until}")
            time.sleep(random.uniform(0.1, 0.4))
            found = self.outbox.read(record.key_hash)

    def _duplicate(self, record: Record, generation: int, delivery: Delivery) -> str:
        logs.info("duplicate delivery; starts nothing", request_key=record.key, existing_state=record.state)
        self.outbox.flush_stale(record, generation)
        self.publisher.publish(
            Duplicate(
                request_id=record.request_id,
                request_key=record.key,
                attempt=record.attempt,
                time=delivery.time,
                message=f"already {record.state}; this delivery starts nothing",
                trigger=delivery.trigger,
                delivery=delivery.event_id,
                job=job_ref(record.job_name, self.settings.region, self.settings.project) if record.job_name else None,
                existing_state=record.state,
            )
        )
        return "duplicate"

    def claim(self, record: Record, generation: int) -> int:
        """Take the record's claim (compare-and-swap from `generation`); the new generation."""
        record.owner = self.owner
        record.lease_until = self.clock() + timedelta(seconds=self.settings.lease)
        return self.outbox.save(record, generation)

    def _release(self, record: Record, generation: int) -> None:
        """Give up the claim, so that the redelivery (or reconcile) takes over at once instead of waiting for
        the lease to run out. Whoever does looks the job up by its labels first, so a create that took effect
        after all is adopted, never made twice."""
        record.owner = record.lease_until = None
        with deadline.wrap_up(), contextlib.suppress(Exception):  # the lease runs out by itself if this fails
            self.outbox.save(record, generation)

    def submit(self, record: Record, generation: int, plan: Plan | None = None, new_attempt: bool = False) -> str:
        """Steps 3-4 for the claim this controller holds; `plan` when the caller has just made it. `new_attempt`:
        the caller has just made this attempt (a new record, a resubmission) in its own compare-and-swap, so no
        earlier holder of its claim, of this version of trainctl or an earlier one, can have created its job."""
        if plan is None:
            request = TrainingJobRequest.model_validate(record.request)
            evidence = evidence_of(record.model_steps)
            plan = plan_custom_job(
                request, self.settings, record.key, record.attempt, record.rung, evidence, record.team
            )
        # Before step 3: the GPU quota this rung draws on must have room for it, else it waits in trainctl's queue.
        if not self.queue.hold_or_queue(record, generation):
            return "queued"
        # Step 3: find or create the job.
        try:
            job, adopted = self.jobs.find_or_create(plan.custom_job, plan.region, legacy=not new_attempt)
        except CallRejected as exc:
            account = str(plan.custom_job["job_spec"].get("service_account", ""))
            return self.refusals.handle(record, generation, exc, account)
        except Transient:
            self._release(record, generation)
            raise
        if adopted:
            logs.info("adopted the job an earlier delivery created", job=job.name)
        # Step 4: record SUBMITTED, publish `submitted`.
        now = self.clock()
        record.state, record.job_name, record.job_state = "submitted", job.name, job.state
        record.owner = record.lease_until = record.not_before = record.queued_since = None
        record.permission_denied_since = None
        record.rung_attempts += 1
        record.add_events(
            [
                Submitted(
                    **record.envelope(now),
                    message=f"submitted {job.job_id} (attempt {record.attempt})",
                    job=job_ref(job.name, self.settings.region, self.settings.project),
                    cost=plan.cost,
                    artifacts=record.artifacts,
                    reduction_server_replicas=plan.reduction_server.replicas,
                    code_digest=code_digest(record.request),
                )
            ]
        )
        try:
            generation = self.outbox.save(record, generation)
        except Conflict:
            current, _ = self.outbox.read(record.key_hash)
            if current.job_name != job.name:
                raise Transient(f"lost the claim on {record.key} while submitting") from None
            return "submitted"  # whoever took over adopted the same job and reports it
        self.outbox.flush(record, generation, whole_outbox(record))
        logs.info("submitted", job=job.name, attempt=record.attempt)
        return "submitted"

    def leave_queue(self, record: Record, generation: int) -> str:
        """reconcile's visit to a request waiting in trainctl's quota queue: the queue decides whether it leaves
        (functions/quota_queue.py); what leaves it for a job is submitted here."""
        left = self.queue.leave(record, generation)
        record, generation = left.record, left.generation
        if left.way == "admitted":
            return self.submit(record, self.claim(record, generation))
        if left.way == "next_rung":
            return self.submit(record, generation, new_attempt=True)
        return record.state  # still `queued`, or the state it ended in
