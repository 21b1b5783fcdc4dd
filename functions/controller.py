"""The controller: admit → plan → claim → submit exactly once, and observe jobs until they end.

It holds the adapters (ledger, event publisher, Vertex) and runs the algorithm of DESIGN.md §4 on top of the
pure decisions in `lifecycle`. Entry points call `handle_request`, `reject`, `observe_job` and `reconcile`;
anything worth retrying surfaces as `Transient`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions import deadline, logs
from functions.admission import admission_problems, dataset_problem
from functions.errors import Transient
from functions.failures import QUOTA_ADVICE, quota_metric
from functions.gcs import Conflict, Gcs, StorageError
from functions.history import FINAL_EVENT_STATES, outcome_of
from functions.ledger import Ledger
from functions.lifecycle import JobSnapshot, Record, backoff, decide_on_existing, job_ref, observe
from functions.monitoring_fields import published_fields, rejection_rule
from functions.planning import Plan, key_hash, plan_custom_job
from functions.publisher import EventPublisher
from functions.settings import Settings
from functions.vertex import CallRejected, VertexJobs
from schemas.errors import FieldError
from schemas.events import (
    Accepted,
    Artifacts,
    Duplicate,
    Failed,
    JobEvent,
    Rejected,
    Retrying,
    Submitted,
    Trigger,
    cost_summary,
)
from schemas.request import TrainingJobRequest
from schemas.rules import split_gs_uri

# An outbox entry older than this was left by a handler that died (or lost Pub/Sub) after its state change:
# whoever reads the record next publishes it. Shorter than Pub/Sub's 10 s minimum redelivery backoff, so
# the redelivery of the failed event already does it; far longer than a publish takes.
OUTBOX_GRACE = timedelta(seconds=8)
# How long a delivery waits for another delivery's live claim to finish before asking for redelivery.
CLAIM_WAIT = timedelta(seconds=20)
MAX_METRICS_BYTES = 1024 * 1024
# A reconcile tick starts observing a record only with at least this much of its deadline left; the records it
# does not reach are the next tick's (every record is visited in a fresh order, so none is always last).
MIN_OBSERVE_SECONDS = 10.0
# What the trainer leaves in its model folder when it fails (trainer/outputs.py; the trainer is configured
# only by its command line, so the name is agreed here rather than imported).
FAILURE_NOTE = "failure.json"


def _all(record: Record) -> set[str]:
    """The claim's holder owns the record's whole outbox: its own events and whatever a dead holder left."""
    return {e.ce_id for e in record.outbox_events()}


def utcnow() -> datetime:
    return datetime.now(UTC)


def spec_hash(request: TrainingJobRequest) -> str:
    canonical = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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


@dataclass
class Controller:
    settings: Settings
    ledger: Ledger
    gcs: Gcs
    publisher: EventPublisher
    vertex_factory: Callable[[], VertexJobs]
    clock: Callable[[], datetime] = utcnow
    owner: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    _vertex: VertexJobs | None = None
    _vertex_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def vertex(self) -> VertexJobs:
        # Built on first use: data shards, duplicates and rejections never import the Vertex client.
        with self._vertex_lock:
            if self._vertex is None:
                self._vertex = self.vertex_factory()
            return self._vertex

    def _prepare_vertex(self) -> None:
        """A new request is about to be claimed and submitted: build the Vertex client in the background
        meanwhile. Its import is most of a cold submission, and the ledger writes and the `accepted` event
        before it mostly wait on the network; a failure here surfaces when the client is used."""
        if self._vertex is None:
            threading.Thread(target=self._build_vertex_quietly, name="vertex-client", daemon=True).start()

    def _build_vertex_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self.vertex  # noqa: B018 (the property builds the client)

    # ---- intake ----------------------------------------------------------------------------------------

    def reject(
        self, request_id: str, key: str, delivery: Delivery, errors: list[str], message: str, reason: str = "invalid"
    ) -> str:
        """Publish `rejected` for input that will never become valid; nothing is written to the ledger."""
        logs.warning(message, errors=errors, request_key=key)
        event = Rejected(
            request_id=request_id,
            request_key=key,
            time=delivery.time,
            message=message,
            trigger=delivery.trigger,
            delivery=delivery.event_id,
            reason=reason,
            errors=errors,
        )
        self.publisher.publish(event)
        logs.info("published rejected", **published_fields(event), rule=rejection_rule(errors))
        self.ledger.record_outcome(outcome_of(event, None), f"rejected-{event.ce_id}")
        return "rejected"

    def handle_request(self, request: TrainingJobRequest, key: str, explicit_id: bool, delivery: Delivery) -> str:
        """Admit, plan and submit one request exactly once; returns what happened in a word."""
        plan = plan_custom_job(request, self.settings, key)
        problems = admission_problems(request, self.settings, plan.cost, plan.output_dir)
        if problems:
            return self.reject(
                request.request_id, key, delivery, [str(p) for p in problems], "the request breaks a guardrail"
            )
        digest = spec_hash(request)
        found = self.ledger.read(key_hash(key))
        if found is None:
            if (problem := self._dataset_problem(request)) is not None:
                return self.reject(request.request_id, key, delivery, [str(problem)], "the dataset holds no data")
            self._prepare_vertex()
            record = self._new_record(request, key, explicit_id, delivery, plan, digest)
            try:
                generation = self.ledger.create(record)
            except Conflict:
                found = self.ledger.read(key_hash(key))
                if found is None:
                    raise Transient("the ledger record vanished between create and read") from None
            else:
                logs.info("claimed", request_key=key, owner=self.owner)
                self.ledger.mark_active(record.key_hash)
                record, generation = self._flush(record, generation, _all(record))
                return self._submit(record, generation)
        return self._handle_existing(found, digest, delivery)

    def _new_record(
        self, request: TrainingJobRequest, key: str, explicit_id: bool, delivery: Delivery, plan: Plan, digest: str
    ) -> Record:
        now = self.clock()
        record = Record(
            key=key,
            key_hash=key_hash(key),
            request_id=request.request_id,
            spec_hash=digest,
            explicit_id=explicit_id,
            request=request.model_dump(mode="json"),
            trigger=delivery.trigger,
            max_attempts=request.scheduling.max_attempts,
            lease_until=now + timedelta(seconds=self.settings.lease),
            owner=self.owner,
            cost=plan.cost,
            artifacts=artifacts(plan.output_dir),
            created=now,
            updated=now,
        )
        accepted = Accepted(
            request_id=request.request_id,
            request_key=key,
            time=now,
            message=f"accepted: {request.resources.total_gpus} GPUs on {request.resources.replica_count} node(s), "
            f"{cost_summary(plan.cost)}; {plan.reduction_server.reason}",
            trigger=delivery.trigger,
            cost=plan.cost,
            labels=request.labels or None,
        )
        record.add_events([accepted])
        return record

    def _handle_existing(self, found: tuple[Record, int], digest: str, delivery: Delivery) -> str:
        wait_until = self.clock() + min(CLAIM_WAIT, timedelta(seconds=self.settings.lease))
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
                )
            if decision == "duplicate":
                return self._duplicate(record, generation, delivery)
            if decision == "take_over":
                try:
                    generation = self._claim(record, generation)
                except Conflict:
                    found = self._read(record.key_hash)
                    continue
                logs.info("took over an expired claim", request_key=record.key, owner=self.owner)
                return self._submit(record, generation)
            if self.clock() >= wait_until or not deadline.allows(1.0):
                raise Transient(f"another delivery holds the claim on {record.key} until {record.lease_until}")
            time.sleep(random.uniform(0.1, 0.4))
            found = self._read(record.key_hash)

    def _duplicate(self, record: Record, generation: int, delivery: Delivery) -> str:
        logs.info("duplicate delivery; starts nothing", request_key=record.key, existing_state=record.state)
        self._flush_stale(record, generation)
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

    def _read(self, khash: str) -> tuple[Record, int]:
        found = self.ledger.read(khash)
        if found is None:
            raise Transient(f"ledger record {khash} disappeared")
        return found

    def _claim(self, record: Record, generation: int) -> int:
        record.owner = self.owner
        record.lease_until = self.clock() + timedelta(seconds=self.settings.lease)
        return self._save(record, generation)

    def _release(self, record: Record, generation: int) -> None:
        """Give up the claim, so that the redelivery (or reconcile) takes over at once instead of waiting for
        the lease to run out. Whoever does looks the job up by its labels first, so a create that took effect
        after all is adopted, never made twice."""
        record.owner = record.lease_until = None
        with deadline.wrap_up(), contextlib.suppress(Exception):  # the lease runs out by itself if this fails
            self._save(record, generation)

    def _save(self, record: Record, generation: int) -> int:
        record.updated = self.clock()
        return self.ledger.replace(record, generation)

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

    # ---- submission ------------------------------------------------------------------------------------

    def _submit(self, record: Record, generation: int) -> str:
        """DESIGN.md §4 steps 3-4, for the claim this controller holds."""
        request = TrainingJobRequest.model_validate(record.request)
        plan = plan_custom_job(request, self.settings, record.key, record.attempt)
        try:
            job = self.vertex.find(record.key_hash, record.attempt)
            if job is not None:
                logs.info("adopted the job an earlier delivery created", job=job.name)
            else:
                job = self.vertex.create(plan.custom_job, record.key_hash, record.attempt)
        except CallRejected as exc:
            return self._refused_by_vertex(record, generation, exc)
        except Transient:
            self._release(record, generation)
            raise
        now = self.clock()
        ref = job_ref(job.name, self.settings.region, self.settings.project)
        record.state, record.job_name, record.job_state = "submitted", job.name, job.state
        record.owner = record.lease_until = record.not_before = None
        record.add_events(
            [
                Submitted(
                    request_id=record.request_id,
                    request_key=record.key,
                    attempt=record.attempt,
                    time=now,
                    message=f"submitted {job.job_id} (attempt {record.attempt})",
                    trigger=record.trigger,
                    job=ref,
                    cost=plan.cost,
                    artifacts=record.artifacts,
                    reduction_server_replicas=plan.reduction_server.replicas,
                )
            ]
        )
        try:
            generation = self._save(record, generation)
        except Conflict:
            current, _ = self._read(record.key_hash)
            if current.job_name != job.name:
                raise Transient(f"lost the claim on {record.key} while submitting") from None
            return "submitted"  # whoever took over adopted the same job and reports it
        self._flush(record, generation, _all(record))
        logs.info("submitted", job=job.name, attempt=record.attempt)
        return "submitted"

    def _refused_by_vertex(self, record: Record, generation: int, exc: CallRejected) -> str:
        now = self.clock()
        common = dict(request_id=record.request_id, request_key=record.key, attempt=record.attempt, time=now)
        events: list[JobEvent]
        if exc.reason == "quota" and record.attempt < record.max_attempts:
            wait = backoff(record.attempt)
            events = [
                Retrying(
                    **common,
                    message=f"Vertex AI quota exceeded; trying again in {int(wait.total_seconds())} s: {exc.message}",
                    trigger=record.trigger,
                    reason="quota",
                    max_attempts=record.max_attempts,
                    quota_metric=quota_metric(exc.message),
                )
            ]
            record.attempt += 1
            record.owner, record.lease_until, record.not_before = None, None, now + wait
        elif exc.reason == "quota":
            record.state = "failed"
            events = [
                Failed(
                    **common,
                    message=f"Vertex AI quota exceeded: {exc.message} {QUOTA_ADVICE}",
                    reason="quota",
                    quota_metric=quota_metric(exc.message),
                )
            ]
        else:
            record.state = "rejected"
            events = [
                Rejected(
                    **common,
                    message="Vertex AI refused the job",
                    trigger=record.trigger,
                    reason=exc.reason,
                    errors=[f"vertex: {exc.message}"],
                )
            ]
        record.failure_reason, record.message = exc.reason, exc.message
        record.add_events(events)
        record, generation = self._flush(record, self._save(record, generation), _all(record))
        self._retire_when_done(record)
        return events[0].state

    # ---- the outbox ------------------------------------------------------------------------------------

    def _flush(self, record: Record, generation: int, mine: set[str]) -> tuple[Record, int]:
        """Publish, in order, the outbox events this handler queued (`mine`) and any left by a handler that
        died before publishing (older than OUTBOX_GRACE); then record them as published (compare-and-swap).
        Events another live handler just queued are left to it, so none is published twice."""
        stale_before = self.clock() - OUTBOX_GRACE
        events = [e for e in record.outbox_events() if e.ce_id in mine or e.time < stale_before]
        if not events:
            return record, generation
        for event in events:
            self.publisher.publish(event)
            logs.info(f"published {event.state}", **published_fields(event))
            if event.state in FINAL_EVENT_STATES:
                # Before the outbox is cleared: a crash here republishes (same ce-id) and files it then.
                self.ledger.record_outcome(outcome_of(event, record), record.key_hash)
        done = {e.ce_id for e in events}
        for _ in range(5):
            record.mark_published(done)
            try:
                return record, self._save(record, generation)
            except Conflict:
                record, generation = self._read(record.key_hash)
        raise Transient(f"could not record the published events of {record.key}")

    def _flush_stale(self, record: Record, generation: int) -> tuple[Record, int]:
        return self._flush(record, generation, set())

    def _retire_when_done(self, record: Record) -> None:
        """A final record leaves the active index once its outbox is empty. Until then reconcile keeps visiting
        it, so that a terminal event queued by a handler that died before publishing still goes out (once it
        is older than OUTBOX_GRACE) even when the job was observed again meanwhile."""
        if record.final and not record.outbox:
            self.ledger.mark_inactive(record.key_hash)

    # ---- observation -----------------------------------------------------------------------------------

    def observe_job(self, job_id: str) -> str:
        """A job changed state (the log sink says so): bring its record up to date."""
        job = self.vertex.get(f"{self.vertex.parent}/customJobs/{job_id}")
        khash = (job.labels or {}).get("trainctl-key") if job else None
        if khash is None:
            logs.info("not a trainctl job; ignored", job_id=job_id)
            return "ignored"
        return self.observe_record(khash)

    def observe_record(self, khash: str) -> str:
        # on_job_state and reconcile observe the same jobs: when another one changed the record after we read
        # it, our compare-and-swap fails before anything was published or done; look again at the new record.
        for _ in range(5):
            try:
                return self._observe_record_once(khash)
            except Conflict:
                logs.info("the ledger record changed while observing it; reading it again", key_hash=khash)
        raise Transient(f"the ledger record {khash} kept changing while it was observed")

    def _observe_record_once(self, khash: str) -> str:
        found = self.ledger.read(khash)
        if found is None:
            self.ledger.mark_inactive(khash)
            return "missing"
        record, generation = found
        with logs.request_context(record.request_id), _tagged(record.request_id):
            record, generation = self._flush_stale(record, generation)
            now = self.clock()
            if record.final:
                self._retire_when_done(record)
                return record.state
            if record.state == "claimed":
                if record.lease_live(now) or (record.not_before and record.not_before > now):
                    return "claimed"
                generation = self._claim(record, generation)
                return self._submit(record, generation)
            return self._observe_submitted(record, generation, now)

    def _observe_submitted(self, record: Record, generation: int, now: datetime) -> str:
        assert record.job_name is not None
        job = self.vertex.get(record.job_name)
        ref = job_ref(record.job_name, self.settings.region, self.settings.project)
        if job is None:
            job = JobSnapshot(record.job_name, "JOB_STATE_FAILED", 13, "the job no longer exists in Vertex AI")
        request = TrainingJobRequest.model_validate(record.request)
        before = record.model_dump()
        transition = observe(record, job, ref, now, request.scheduling.max_pending, metrics=None)
        if transition.action == "load_metrics":
            transition = observe(record, job, ref, now, request.scheduling.max_pending, self._metrics(record))
        elif transition.action == "diagnose":
            diagnosis = self._diagnose(record, request)
            transition = observe(record, job, ref, now, request.scheduling.max_pending, None, diagnosis)
        if record.model_dump() == before:
            if transition.action == "cancel":
                self.vertex.cancel(job.name)
            return record.state
        mine = record.add_events(transition.events)
        if transition.action == "resubmit":
            record.owner = self.owner
            record.lease_until = now + timedelta(seconds=self.settings.lease)
        generation = self._save(record, generation)
        if transition.action == "cancel":
            self.vertex.cancel(job.name)
        record, generation = self._flush(record, generation, mine)
        self._retire_when_done(record)
        if transition.action == "resubmit":
            return self._submit(record, generation)
        return record.state

    def _metrics(self, record: Record) -> dict[str, Any]:
        bucket, name = split_gs_uri(record.artifacts.metrics_uri)
        found = self.gcs.read(bucket, name)
        if found is None:
            return {}
        try:
            metrics = json.loads(found[0][:MAX_METRICS_BYTES])
        except ValueError:
            logs.warning("metrics.json is not JSON; reported without metrics", uri=record.artifacts.metrics_uri)
            return {}
        return metrics if isinstance(metrics, dict) else {}

    def _diagnose(self, record: Record, request: TrainingJobRequest) -> str:
        """Why a job failed by the user's hand, in words that name the path: the trainer's own note when it
        could write one, else what is missing (the dataset, or any output at all)."""
        bucket, name = split_gs_uri(record.artifacts.model_dir + FAILURE_NOTE)
        found = self.gcs.read(bucket, name)
        if found is not None:
            try:
                return f"The trainer reported: {json.loads(found[0])['error']}"
            except (ValueError, KeyError, TypeError):
                pass
        bucket, prefix = split_gs_uri(request.dataset.uri)
        if not self.gcs.any_under(bucket, prefix):
            return f"The dataset {request.dataset.uri} has no objects."
        output = record.artifacts.model_dir.removesuffix("model/")
        bucket, prefix = split_gs_uri(output)
        if not self.gcs.any_under(bucket, prefix):
            return f"Nothing was written under {output}: can the job's service account write there?"
        return ""

    def reconcile(self) -> dict[str, int]:
        """The sweep that never misses: every active request, one at a time. Whatever goes wrong with one record
        (a dependency down, a permission missing, a corrupt record) is logged and counted, and the sweep goes on;
        records it has no time left for are counted as deferred, for the next tick."""
        summary = {"active": 0, "errors": 0}
        keys = self.ledger.active()
        random.shuffle(keys)
        for index, khash in enumerate(keys):
            if not deadline.allows(MIN_OBSERVE_SECONDS):
                summary["deferred"] = len(keys) - index
                logs.warning(f"reconcile ran out of time; {len(keys) - index} records wait for the next tick")
                break
            summary["active"] += 1
            try:
                state = self.observe_record(khash)
            except Exception as exc:  # one record must never stop the sweep
                summary["errors"] += 1
                logs.error(
                    f"reconcile could not bring {khash} up to date: {type(exc).__name__}: {exc}",
                    request_id=getattr(exc, "trainctl_request_id", None),
                    key_hash=khash,
                    transient=isinstance(exc, Transient),
                )
                continue
            summary[state] = summary.get(state, 0) + 1
        return summary


@contextlib.contextmanager
def _tagged(request_id: str) -> Iterator[None]:
    """Exceptions leaving the block carry the request id, for the log line of whoever catches them."""
    try:
        yield
    except Exception as exc:
        exc.trainctl_request_id = request_id  # type: ignore[attr-defined]
        raise
