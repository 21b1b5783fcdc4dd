"""Submission: admit → plan → claim → submit, exactly once from at-least-once deliveries (DESIGN.md §4).

The steps, in the order a new request takes them (each labelled below):
  0. admit: guardrails and the dataset preflight, before anything is written;
  1. claim: create the ledger record with if_generation_match=0 (CLAIMED, a lease), queue `accepted`;
  2. a record that exists: duplicate, conflict, wait for a live claim, or take over an expired one;
  3. find-or-create the job labelled with the key and attempt (functions/cloud/vertex.py, the one place), once the
  rung's
     GPUs fit the project's quota (else it waits: functions/capacity/quota_queue.py); a refusal:
     functions/intake/refusals.py;
  4. record SUBMITTED and the job name (compare-and-swap), publish `submitted`.
A crash at any point leaves a live lease (the redelivery waits) or a labelled job (adopted). Never two jobs.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions import logs
from functions.capacity.quota_queue import QuotaQueue
from functions.capacity.warm_pools import WarmPools
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.job_snapshot import job_ref
from functions.cloud.ports import Events
from functions.cloud.vertex import CallRejected, LazyJobs
from functions.intake import triggers
from functions.intake.acceptance import accepted_record, skipped_record
from functions.intake.delivery import Delivery, spec_hash, team_of
from functions.intake.preparation import Preparation, Prepared, Refusal
from functions.intake.refusals import Refusals
from functions.intake.rejections import Rejections
from functions.intake.repeats import decide_on_existing
from functions.intake.run_policy import RunPolicy, Skip
from functions.jobs import secret_env
from functions.jobs.admission import admission_problems
from functions.jobs.planning import Plan, plan_custom_job
from functions.ledger.keys import key_hash
from functions.ledger.outbox import Outbox, whole_outbox
from functions.ledger.output_claims import OutputClaims
from functions.ledger.record import Record
from functions.ledger.requests import IdTaken, Ledger
from functions.models.intake import evidence_of
from functions.settings import Settings
from functions.teams import label_problem
from schemas.events import (
    Duplicate,
    Submitted,
)
from schemas.request import TrainingJobRequest, code_digest


@dataclass
class Submission:
    settings: Settings
    ledger: Ledger
    publisher: Events
    jobs: LazyJobs
    outbox: Outbox
    clock: Callable[[], datetime]
    owner: str
    queue: QuotaQueue  # trainctl's quota queue: what a rung holds of the quota, and who waits for it
    refusals: Refusals  # what Vertex refusing the submission does to the request
    outputs: OutputClaims  # the output folders active requests hold outside the control bucket
    preparation: Preparation  # what a new request needs before its claim (dataset, packages, ladder, budget, model)
    rejections: Rejections  # what is published (and filed) for a delivery that is refused before any claim
    policy: RunPolicy  # a model's trigger policies at the claim: one run at a time, skip unchanged data (issue 42)
    warm_pools: WarmPools  # the team's warm pools: a job of a pool's shape runs on it (issue 43)

    def handle_request(self, request: TrainingJobRequest, key: str, explicit_id: bool, delivery: Delivery) -> str:
        """Admit, plan and submit one request exactly once; returns what happened in a word. `explicit_id`: the
        requester chose the request id (Pub/Sub, or a marker naming one), rather than its marker deriving it."""
        if explicit_id and (reserved := triggers.explicit_id_problem(request.request_id)):
            errors = [f"request_id: {reserved}"]
            return self.rejections.reject(
                request.request_id, key, delivery, errors, "the request_id is reserved for markers"
            )
        team = team_of(delivery, self.settings.teams)
        plan = plan_custom_job(request, self.settings, key, team=team)
        # Step 0: admit.
        problems = admission_problems(request, self.settings, plan.output_dir, key, team, today=self.clock().date())
        if problems:
            return self.rejections.reject(
                request.request_id, key, delivery, [str(p) for p in problems], "the request breaks a guardrail"
            )
        if self.settings.teams and (forged := label_problem(request.labels, team)):
            return self.rejections.reject(
                request.request_id, key, delivery, [forged], "labels.team is not where it arrived"
            )
        digest = spec_hash(request)
        found = self.ledger.read(key_hash(key))
        if found is None:
            prepared = self.preparation.prepare(request, key, team)
            if isinstance(prepared, Refusal):
                return self.rejections.refuse(request.request_id, key, delivery, prepared)
            claimed = self._claim(request, key, explicit_id, delivery, prepared, digest, team)
            if isinstance(claimed, str):
                return claimed
            found = claimed  # another delivery created the record meanwhile
        # Step 2: the record exists.
        return self._handle_existing(found, digest, delivery)

    def _claim(
        self,
        request: TrainingJobRequest,
        key: str,
        explicit_id: bool,
        delivery: Delivery,
        prepared: Prepared,
        digest: str,
        team: str,
    ) -> str | tuple[Record, int]:
        """Step 1: claim the output folder, then create the record; what happened in a word, or the record another
        delivery created meanwhile (for step 2)."""
        plan = prepared.plan
        teamed = team if self.settings.teams or delivery.team else None
        policy = self.policy.before_claim(request, key, prepared)
        if isinstance(policy, Skip):
            # A trigger policy starts nothing (issue 42): the record is created final, `skipped`, so that a redelivery
            # reads a duplicate; it holds no output folder, and its budget's reservation is settled at nothing when
            # its event is published.
            now = self.clock()
            record = accepted_record(
                request, key, explicit_id, delivery, prepared, digest, teamed, self.owner, now, now
            )
            record = skipped_record(record, policy.event(record, now))
        else:
            self.jobs.prepare()
            holder = self.outputs.claim(plan.output_dir, key_hash(key), request.request_id)
            if holder is not None:
                error = (
                    f"output_dir: guardrail output_isolation: {plan.output_dir} overlaps {holder.output_dir}, where "
                    f"active request {holder.request_id} writes (two jobs in one folder would read each other's "
                    f"metrics and progress); choose a folder neither inside nor around it, or send this request again "
                    f"once {holder.request_id} has ended"
                )
                self.preparation.let_go(key, team, prepared.budget_month)
                return self.rejections.reject(
                    request.request_id, key, delivery, [error], "the output_dir overlaps an active request's"
                )
            now = self.clock()
            lease_until = now + timedelta(seconds=self.settings.lease)
            record = accepted_record(
                request, key, explicit_id, delivery, prepared, digest, teamed, self.owner, lease_until, now
            )
            record.supersedes = policy.supersedes
        try:
            generation = self.ledger.create(record)
        except IdTaken as taken:
            if not record.final:
                self.outputs.release(plan.output_dir, key_hash(key))  # this request will not write there
            self.preparation.let_go(key, team, prepared.budget_month)
            return self._id_taken(request, key, explicit_id, delivery, taken)
        except Conflict:
            found = self.ledger.read(key_hash(key))
            if found is None:
                raise Transient("the ledger record vanished between create and read") from None
            return found
        logs.info("claimed" if not record.final else "skipped at its claim", request_key=key, owner=self.owner)
        self.ledger.mark_active(record.key_hash)  # a skipped one too, until its event is out (reconcile after a crash)
        if not record.final:
            record, generation = self.policy.confirm(
                record, generation, lambda holder: self.policy.running(request, prepared, holder)
            )
        if record.final:  # skipped, or another trigger of its model took the model's run slot meanwhile
            record, generation = self.outbox.flush(record, generation, whole_outbox(record))
            self.outbox.retire_when_done(record)
            return record.state
        record, generation = self.outbox.flush(record, generation, whole_outbox(record))
        return self.submit(record, generation, plan, new_attempt=True)

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
        return self.rejections.reject(
            request.request_id, key, delivery, [error], message, rejected_delivery="conflicting_delivery"
        )

    def _handle_existing(self, found: tuple[Record, int], digest: str, delivery: Delivery) -> str:
        wait_until = self.clock() + timedelta(seconds=min(self.settings.claim_wait, self.settings.lease))
        while True:
            record, generation = found
            decision = decide_on_existing(record, digest, self.clock())
            if decision == "conflict":
                return self.rejections.reject(
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
                team=record.team,
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
        if record.superseded_by is not None and new_attempt:  # no job of this attempt can exist: none is made
            return self.policy.end_superseded(record, generation, [])[0].state
        if record.supersedes is not None and record.job_name is None:
            self.policy.supersede_older(record)  # before this run's job: the model's older run makes way
        request = TrainingJobRequest.model_validate(record.job_request())
        if plan is None:
            evidence = evidence_of(record.model_steps)
            plan = plan_custom_job(
                request, self.settings, record.key, record.attempt, record.rung, evidence, record.team
            )
        # Before step 3: a new attempt's worst case must still fit its team's budget, else the request ends (issue 40);
        # the GPU quota this rung draws on must have room for it, else it waits in trainctl's queue.
        if record.attempt > 1 and (budget := self.preparation.recheck_budget(record)) is not None:
            return self.refusals.over_budget(record, generation, budget)
        if not self.queue.hold_or_queue(record, generation):
            return "queued"
        self.warm_pools.route(record, request.at_rung(record.rung), plan)
        # Step 3: find or create the job.
        try:
            self._stage_launcher(plan)
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
        record.leave_queue(now)
        record.owner = record.lease_until = record.not_before = None
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
            current, current_generation = self.outbox.read(record.key_hash)
            if current.superseded_by is not None and current.job_name is None:
                # A newer run of its model replaced it meanwhile: the claim is let go at once, so that the redelivery
                # (or reconcile) adopts this job, and the observers cancel it (the intake functions never cancel).
                self._release(current, current_generation)
            if current.job_name != job.name:
                raise Transient(f"lost the claim on {record.key} while submitting") from None
            return "submitted"  # whoever took over adopted the same job and reports it
        self.outbox.flush(record, generation, whole_outbox(record))
        logs.info("submitted", job=job.name, attempt=record.attempt)
        return "submitted"

    def _stage_launcher(self, plan: Plan) -> None:
        """A package job with secret_env installs trainctl's secret launcher from the control bucket (issue 40, point
        7; functions/jobs/secret_env.py): written once, named by its content, where only the controller writes."""
        if not secret_env.needs_launcher_package(plan.custom_job, self.settings.control_bucket):
            return
        bucket, name = secret_env.launcher_object(self.settings.control_bucket)
        with contextlib.suppress(Conflict):  # already there: the same bytes, since its name is their digest
            self.preparation.gcs.write(bucket, name, secret_env.launcher_package(), if_generation_match=0)

    def leave_queue(self, record: Record, generation: int) -> str:
        """reconcile's visit to a request waiting in trainctl's quota queue: the queue decides whether it leaves
        (functions/capacity/quota_queue.py); what leaves it for a job is submitted here."""
        left = self.queue.leave(record, generation)
        record, generation = left.record, left.generation
        if left.way == "admitted":
            return self.submit(record, self.claim(record, generation))
        if left.way == "next_rung":
            return self.submit(record, generation, new_attempt=True)
        return record.state  # still `queued`, or the state it ended in
