"""Observation: bring a request's record up to date with its job — from a log line (`on_job_state`) or from
the sweep over every active request (`reconcile`, the source of truth) — publishing each change once.

The decisions are lifecycle.observe's (pure); this module reads the job, loads what a decision asks for
(metrics.json, the heartbeat, the cause of a user failure — each untrusted, read through
functions/untrusted/job_outputs.py), saves the record, releases the quota of a request that has ended, cancels or
resubmits. The sweep lists the deployment's waiting and running jobs once a tick and looks only at the requests whose
job changed, ended or has a decision due (functions/lifecycle/sweep.py decides which).
"""

from __future__ import annotations

import contextlib
import contextvars
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import logs
from functions.capacity.quota_queue import QuotaQueue
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict, StorageError, TooLarge
from functions.cloud.job_labels import deployment_label, key_hash_of
from functions.cloud.job_snapshot import JobSnapshot, job_ref
from functions.cloud.ports import Jobs, Storage
from functions.intake.submission import Submission
from functions.ledger.budget_records import BudgetRecords
from functions.ledger.first_step import trainer_figures
from functions.ledger.outbox import Outbox
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from functions.lifecycle.sweep import NOTHING_SEEN, Listing, Seen, Window, listings, seen_after, unchanged
from functions.lifecycle.transitions import VERTEX_ENDED, observe, runs_builtin
from functions.models.promotion import Promotion
from functions.settings import Settings
from functions.untrusted.job_outputs import (
    MAX_OUTPUT_BYTES,
    Metrics,
    Unreadable,
    parse_failure_note,
    parse_metrics,
    parse_progress,
)
from schemas.events import FINAL_REQUEST_STATES, Timestamps
from schemas.request import TrainingJobRequest
from schemas.rules import split_gs_uri

# A reconcile tick starts observing a record only with at least this much of its deadline left; the records it
# does not reach are the next tick's (every record is visited in a fresh order, so none is always last).
MIN_OBSERVE_SECONDS = 10.0
# What the trainer leaves in its model folder when it fails (trainer/outputs/model_folder.py), and the heartbeat it
# keeps in its checkpoint folder (trainer/outputs/progress.py); the trainer is configured only by its command line, so
# the names are agreed here rather than imported.
FAILURE_NOTE = "failure.json"
PROGRESS_FILE = "progress.json"


@dataclass
class Observation:
    settings: Settings
    ledger: Ledger
    gcs: Storage
    jobs: Jobs
    outbox: Outbox
    submission: Submission  # a claimed record whose lease ran out, or a failure worth another attempt
    queue: QuotaQueue  # a request that has ended lets go of its GPU quota; those waiting leave in arrival order
    clock: Callable[[], datetime]
    owner: str
    promotion: Promotion  # a success with a model block: register, decide, promote
    budgets: BudgetRecords | None = None  # each team's month: reservations a dead handler left are settled or dropped

    def observe_job(self, job_id: str) -> str:
        """A job's service log line arrived: bring its record up to date."""
        job = self._job_by_id(job_id)
        khash = key_hash_of(job.labels) if job else None
        if khash is None:
            logs.info("not a trainctl job; ignored", job_id=job_id)
            return "ignored"
        return self.observe_record(khash)

    def _job_by_id(self, job_id: str) -> JobSnapshot | None:
        """The job a log line names: the log entry names no location, so the deployment's region is asked first,
        then the regions a ladder may run in."""
        project = self.jobs.parent.split("/")[1]
        for region in dict.fromkeys((self.settings.region, *self.settings.allowed_regions)):
            job = self.jobs.get(f"projects/{project}/locations/{region}/customJobs/{job_id}")
            if job is not None:
                return job
        return None

    def observe_record(self, khash: str) -> str:
        return self._look(khash, Listing())[0]

    def _look(self, khash: str, listing: Listing) -> tuple[str, Seen | None]:
        """Bring the record up to date, its job read from `listing` where it can be; (the outcome, what to remember
        of it when it is settled)."""
        # on_job_state and reconcile observe the same jobs: when another one changed the record after we read
        # it, our compare-and-swap fails before anything was published or done; look again at the new record.
        for _ in range(5):
            try:
                return self._observe_record_once(khash, listing)
            except Conflict:
                logs.info("the ledger record changed while observing it; reading it again", key_hash=khash)
        raise Transient(f"the ledger record {khash} kept changing while it was observed")

    def _observe_record_once(self, khash: str, listing: Listing) -> tuple[str, Seen | None]:
        found = self.ledger.read(khash)
        if found is None:
            self.ledger.mark_inactive(khash)
            return "missing", None
        record, generation = found
        with logs.request_context(record.request_id), _tagged(record.request_id):
            # First: whatever fails below (a publish, the history index), an ended request holds no GPU quota.
            self.queue.release(record)
            record, generation = self.outbox.flush_stale(record, generation)
            now = self.clock()
            if record.final:
                record, generation = self.promotion.settle(record, generation)
                self.outbox.retire_when_done(record)
                return record.state, None
            if record.state == "queued":
                return self.submission.leave_queue(record, generation), None
            if record.state == "claimed":
                if record.lease_live(now) or (record.not_before and record.not_before > now):
                    return "claimed", None
                generation = self.submission.claim(record, generation)
                return self.submission.submit(record, generation), None
            return self._observe_submitted(record, generation, now, listing)

    def _observe_submitted(
        self, record: Record, generation: int, now: datetime, listing: Listing
    ) -> tuple[str, Seen | None]:
        assert record.job_name is not None
        job = listing.job_of(record) or self.jobs.get(record.job_name)
        ref = job_ref(record.job_name, self.settings.region, self.settings.project)
        if job is None:
            job = JobSnapshot(record.job_name, "JOB_STATE_FAILED", 13, "the job no longer exists in Vertex AI")
        max_pending, max_silence = _limits(record)
        progress: dict[str, Any] | None = None
        before = record.model_dump()
        if job.state in VERTEX_ENDED and job.state != record.job_state and runs_builtin(record.request):
            self._note_trainer(record, job, now)
        transition = observe(record, job, ref, now, max_pending, None, max_silence=max_silence)
        if transition.action == "load_metrics":
            metrics = self._metrics(record)
            transition = observe(
                record, job, ref, now, max_pending, metrics.values, max_silence=max_silence, metrics_note=metrics.note
            )
        elif transition.action == "diagnose":
            diagnosis, data = self._diagnose(record)
            transition = observe(
                record, job, ref, now, max_pending, None, diagnosis, max_silence=max_silence, data_failure=data
            )
        elif transition.action == "load_progress":
            progress = self._progress(record)
            transition = observe(record, job, ref, now, max_pending, None, max_silence=max_silence, progress=progress)
        if record.model_dump() == before:
            if transition.action == "cancel":
                self.jobs.cancel(job.name)
            return record.state, seen_after(record, job, now, max_pending, max_silence, progress)
        mine = record.add_events(transition.events)
        if transition.action == "resubmit":
            record.owner = self.owner
            record.lease_until = now + timedelta(seconds=self.settings.lease)
        generation = self.outbox.save(record, generation)
        self.queue.release(record)  # once the ended state is saved, before anything else can fail
        if transition.action == "cancel":
            self.jobs.cancel(job.name)
        record, generation = self.outbox.flush(record, generation, mine)
        record, generation = self.promotion.settle(record, generation)
        self.outbox.retire_when_done(record)
        if transition.action == "resubmit":
            return self.submission.submit(record, generation, new_attempt=True), None
        return record.state, seen_after(record, job, now, max_pending, max_silence, progress)

    def _metrics(self, record: Record) -> Metrics:
        """metrics.json as far as it can be used; what cannot, said in words for the `succeeded` event. A job
        that writes none (a custom image may not) has no metrics and nothing to say."""
        uri = record.artifacts.metrics_uri
        try:
            raw = self._job_output(uri)
            return parse_metrics(raw) if raw is not None else Metrics({})
        except Unreadable as exc:
            logs.warning(f"{uri} cannot be read; reported without metrics: {exc}", uri=uri)
            return Metrics({}, f"its metrics.json could not be read, so no metrics are reported: {exc}")

    def _progress(self, record: Record) -> dict[str, Any]:
        """The built-in trainer's heartbeat (trainer/outputs/progress.py); {} when there is none, or none that can be
        read (its progress is then not judged)."""
        uri = record.artifacts.checkpoint_dir + PROGRESS_FILE
        try:
            raw = self._job_output(uri)
            return parse_progress(raw).model_dump(exclude_none=True) if raw is not None else {}
        except Unreadable as exc:
            logs.warning(f"{uri} cannot be read; its progress is not judged: {exc}", uri=uri)
            return {}

    def _note_trainer(self, record: Record, job: JobSnapshot, now: datetime) -> None:
        """The built-in trainer's first step and step counts for the job that just ended (issue 43), checked against
        the job's own times; a record that cannot be read or believed only leaves them out: it never stops a sweep."""
        try:
            progress = self._progress(record)
        except Exception as exc:  # a transient read error, say: the figures are left out, the sweep goes on
            logs.warning(f"the trainer's progress record cannot be read; no time to first step: {exc}")
            return
        step, steps_run, first = progress.get("step"), progress.get("steps_run"), progress.get("first_step")
        stamps = Timestamps(created=job.create_time, started=job.start_time, ended=job.end_time)
        record.note_trainer(trainer_figures(first, steps_run, step, stamps, now))

    def _job_output(self, uri: str) -> bytes | None:
        """The bytes of an object the job wrote, None when there is none; Unreadable when it is larger than any
        the trainer writes (never downloaded whole) or the controller may not read it."""
        bucket, name = split_gs_uri(uri)
        try:
            found = self.gcs.read(bucket, name, max_bytes=MAX_OUTPUT_BYTES)
        except TooLarge as exc:
            size = f"{exc.size} bytes" if exc.size is not None else "larger than that"
            raise Unreadable(f"it is {size}; the limit is {exc.limit} bytes") from None
        except StorageError as exc:  # 403: an output bucket the functions may not read; a 5xx is Transient instead
            raise Unreadable(f"Cloud Storage refused the read ({exc.status})") from None
        return found[0] if found is not None else None

    def _diagnose(self, record: Record) -> tuple[str, bool]:
        """Why a job failed by the user's hand, in words that name the path: the trainer's own note when it
        could write one (or that it could not be read), else what is missing (the dataset, or any output); and
        whether the built-in trainer said it refused the data (reason `data`; a custom image's note is not taken
        for that: it may write anything)."""
        note = record.artifacts.model_dir + FAILURE_NOTE
        try:
            raw = self._job_output(note)
            if raw is not None:
                failure = parse_failure_note(raw)
                return f"The trainer reported: {failure.text}", failure.data and runs_builtin(record.request)
        except Unreadable as exc:
            return f"The trainer's failure note {note} could not be read: {exc}.", False
        dataset = record.request["dataset"]["uri"]
        bucket, prefix = split_gs_uri(dataset)
        if not self.gcs.any_under(bucket, prefix):
            return f"The dataset {dataset} has no objects.", False
        output = record.artifacts.model_dir.removesuffix("model/")
        bucket, prefix = split_gs_uri(output)
        if not self.gcs.any_under(bucket, prefix):
            return f"Nothing was written under {output}: can the job's service account write there?", False
        return "", False

    def reconcile(self) -> dict[str, int]:
        """The sweep that never misses: every active request whose job changed, ended or has a decision due, or has
        no job yet (functions/lifecycle/sweep.py), `settings.reconcile_concurrency` at a time; the others are counted as
        unchanged (and in the state last seen). Whatever goes wrong with one record (a dependency down, a permission
        missing, a corrupt record) is logged and counted, and the sweep goes on; records it has no time left for are
        counted as deferred, for the next tick."""
        now = self.clock()
        seen = {khash: Seen.from_metadata(metadata) for khash, metadata in self.ledger.active_entries()}
        listing = self._list_jobs(listings(self.settings.region, list(seen.values())), now)
        summary = {"active": 0, "errors": 0}
        keys = []
        for khash, last in seen.items():
            if last is not None and unchanged(last, listing, now):
                for count in ("active", "unchanged", last.state):
                    summary[count] = summary.get(count, 0) + 1
            else:
                keys.append(khash)
        random.shuffle(keys)  # so that no record is always last
        with ThreadPoolExecutor(self.settings.reconcile_concurrency, thread_name_prefix="reconcile") as pool:
            # Each record is observed in its own copy of this thread's context (copied here, not in the worker):
            # the deadline and the log fields go along.
            contexts = [contextvars.copy_context() for _ in keys]
            outcomes = list(
                pool.map(
                    lambda context, khash: context.run(self._sweep_one, khash, listing, seen[khash]), contexts, keys
                )
            )
        still_queued = {khash for khash, outcome in zip(keys, outcomes, strict=True) if outcome == "queued"}
        released = self._release_queues_in_order(still_queued)
        for khash, outcome in zip(keys, outcomes, strict=True):
            outcome = released.get(khash, outcome)
            if outcome != "deferred":
                summary["active"] += 1
            summary[outcome] = summary.get(outcome, 0) + 1
        if deferred := summary.get("deferred"):
            logs.warning(f"reconcile ran out of time; {deferred} records wait for the next tick")
        self._forget_quota_of_ended_requests()
        self._forget_output_folders_of_ended_requests()
        self._tidy_budgets()
        return summary

    def _list_jobs(self, windows: dict[str, list[Window]], now: datetime) -> Listing:
        """The deployment's waiting and running jobs in each region, as of `now`, every create-time window of it
        listed side by side. A region any window of which fails is left out: its requests' jobs are read one by
        one this tick, as before listings."""
        deployment = deployment_label(self.settings.control_bucket)
        parts = [(region, window) for region, region_windows in windows.items() for window in region_windows]

        def list_part(region: str, window: Window) -> dict[str, JobSnapshot] | None:
            try:
                return self.jobs.active_jobs(region, deployment, *window)
            except Exception as exc:  # the sweep goes on without it
                logs.error(
                    f"reconcile could not list the jobs in {region}; it reads each one instead this tick: "
                    f"{type(exc).__name__}: {exc}",
                    region=region,
                    transient=isinstance(exc, Transient),
                )
                return None

        with ThreadPoolExecutor(min(16, len(parts)), thread_name_prefix="reconcile-list") as pool:
            contexts = [contextvars.copy_context() for _ in parts]
            found = list(pool.map(lambda context, part: context.run(list_part, *part), contexts, parts))
        jobs: dict[str, JobSnapshot] = {}
        failed = {region for (region, _), part in zip(parts, found, strict=True) if part is None}
        for part in found:
            jobs.update(part or {})
        return Listing(jobs, frozenset(windows) - failed, now)

    def _release_queues_in_order(self, queued: set[str]) -> dict[str, str]:
        """After the sweep has seen jobs end, the requests waiting for quota are looked at again in each pool's
        arrival order, until one still does not fit: in the sweep's own (random) order only the first in line
        could leave each tick. The outcomes of those looked at again."""
        outcomes: dict[str, str] = {}
        if not queued:
            return outcomes
        for line in self.queue.lines():
            for khash in line:
                if khash not in queued or not deadline.allows(MIN_OBSERVE_SECONDS):
                    continue
                outcomes[khash] = self._sweep_one(khash, Listing(), None)
                if outcomes[khash] == "queued":
                    break  # the first in line still does not fit; those behind it wait too
        return outcomes

    def _forget_quota_of_ended_requests(self) -> None:
        """A handler that died between ending a request and releasing its quota left it counted: drop it."""
        try:
            dropped = self.queue.forget_inactive(lambda: set(self.ledger.active()))
        except Exception as exc:  # the next tick tries again; the sweep's own work is done
            logs.error(f"reconcile could not tidy the GPU quota pools: {type(exc).__name__}: {exc}")
            return
        if dropped:
            logs.warning(f"dropped {dropped} ended requests from the GPU quota pools")

    def _tidy_budgets(self) -> None:
        """A handler that died after reserving a request's budget, before its claim or before settling its end, left
        the reservation: settle or drop it (functions/ledger/budget_records.py)."""
        if self.budgets is None or not self.settings.teams:
            return
        try:
            changed = self.budgets.tidy(lambda: set(self.ledger.active()), self._record_of, self.clock())
        except Exception as exc:  # the next tick tries again; the sweep's own work is done
            logs.error(f"reconcile could not tidy the teams' budget records: {type(exc).__name__}: {exc}")
            return
        if changed:
            logs.warning(f"settled or dropped {changed} budget reservations of ended or never claimed requests")

    def _record_of(self, khash: str) -> Record | None:
        found = self.ledger.read(khash)
        return found[0] if found else None

    def _forget_output_folders_of_ended_requests(self) -> None:
        """A handler that died between ending a request and releasing its output folder left it held: free it."""
        try:
            dropped = self.submission.outputs.forget_ended()
        except Exception as exc:  # the next tick tries again; the sweep's own work is done
            logs.error(f"reconcile could not tidy the output folder index: {type(exc).__name__}: {exc}")
            return
        if dropped:
            logs.warning(f"freed the output folders of {dropped} ended requests")

    def _sweep_one(self, khash: str, listing: Listing, last: Seen | None) -> str:
        """One record's outcome in the sweep: its state, "errors", or "deferred" when no time is left. What it was
        seen at is kept on its active entry when that changed."""
        if not deadline.allows(MIN_OBSERVE_SECONDS):
            return "deferred"
        try:
            outcome, seen = self._look(khash, listing)
        except Exception as exc:  # one record must never stop the sweep
            logs.error(
                f"reconcile could not bring {khash} up to date: {type(exc).__name__}: {exc}",
                request_id=getattr(exc, "trainctl_request_id", None),
                key_hash=khash,
                transient=isinstance(exc, Transient),
            )
            return "errors"
        if seen != last and not (seen is None and outcome in FINAL_REQUEST_STATES):  # a final one's entry is gone
            try:
                self.ledger.note_on_active(khash, seen.metadata() if seen else NOTHING_SEEN)
            except Exception as exc:  # it is looked at again next tick, as if never seen
                logs.warning(f"reconcile could not note what it saw of {khash}: {type(exc).__name__}: {exc}")
        return outcome


def _limits(record: Record) -> tuple[int, int]:
    """(max_pending, max_silence), kept on the record; records written before they were have only the request."""
    if record.max_pending is not None and record.max_silence is not None:
        return record.max_pending, record.max_silence
    scheduling = TrainingJobRequest.model_validate(record.request).scheduling
    return scheduling.max_pending, scheduling.max_silence


@contextlib.contextmanager
def _tagged(request_id: str) -> Iterator[None]:
    """Exceptions leaving the block carry the request id, for the log line of whoever catches them."""
    try:
        yield
    except Exception as exc:
        exc.trainctl_request_id = request_id  # type: ignore[attr-defined]
        raise
