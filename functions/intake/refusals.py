"""What a refused submission does to the request: Vertex answered ListCustomJobs or CreateCustomJob with an error
that trying the call again at once will not fix (functions/cloud/vertex.py's CallRejected). PERMISSION_DENIED is waited
out for a while (IAM grants take minutes to reach Vertex), then fails with what to fix; a quota refusal is tried
again later while attempts remain; anything else rejects the request with Vertex's words. A refused call created
nothing, so the request id is not spent on a job that never ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions import logs
from functions.capacity.attempts import backoff
from functions.capacity.budgets import budget_error
from functions.capacity.quota_queue import QuotaQueue
from functions.cloud.failures import PERMISSION_DENIED, QUOTA_ADVICE, permission_advice, quota_metric
from functions.cloud.vertex import CallRejected
from functions.ledger.outbox import Outbox, whole_outbox
from functions.ledger.record import Record
from functions.settings import Settings
from schemas.events import Budget, Failed, JobEvent, Rejected, Retrying
from schemas.rules import format_duration


@dataclass
class Refusals:
    settings: Settings
    outbox: Outbox
    clock: Callable[[], datetime]
    queue: QuotaQueue  # a request the refusal ends lets go of its GPU quota

    def handle(self, record: Record, generation: int, exc: CallRejected, account: str) -> str:
        """Save what the refusal means for the request (its claim let go, or its end) and publish it; what happened
        in a word. `account`: the service account the job was to run as, for the permission advice."""
        if exc.code == PERMISSION_DENIED:
            return self._permission_denied(record, generation, exc, account)
        return self._refused(record, generation, exc)

    def over_budget(self, record: Record, generation: int, budget: Budget) -> str:
        """A resubmission whose worst case from here on no longer fits its team's month (its budget was lowered, or
        its attempts ran past their estimate): the request fails with reason `budget` and the figures, before any
        job of the new attempt is made (issue 40, point 1)."""
        now = self.clock()
        error = budget_error(budget, resubmission=True)
        record.state, record.failure_reason, record.message = "failed", "budget", error
        record.owner = record.lease_until = None
        record.add_events(
            [
                Failed(
                    **record.envelope(now),
                    message=f"attempt {record.attempt} was not submitted: team {budget.team}'s monthly budget would "
                    f"be exceeded. {error}",
                    reason="budget",
                    artifacts=record.artifacts,
                )
            ]
        )
        generation = self.outbox.save(record, generation)
        self.queue.release(record)  # once the ended state is saved, before anything else can fail
        record, generation = self.outbox.flush(record, generation, whole_outbox(record))
        self.outbox.retire_when_done(record)
        return "failed"

    def _permission_denied(self, record: Record, generation: int, exc: CallRejected, account: str) -> str:
        """Vertex refused ListCustomJobs or CreateCustomJob with PERMISSION_DENIED. Fresh IAM grants reach Vertex
        minutes after they are made ("typically within 2 minutes … in some cases 7 minutes or more",
        cloud.google.com/iam/docs/access-change-propagation), and so does an API just enabled, so the refusal is
        not taken as final: the claim is let go and reconcile tries again, for `permission_wait` after the first
        refusal; then the request fails with reason `permission`, saying what to fix. A refused call created
        nothing, so the request id (or the marker's generation) is not spent on a job that never ran."""
        now = self.clock()
        since = record.permission_denied_since or now
        waited = int((now - since).total_seconds())
        advice = permission_advice(exc.message, account)
        if waited < self.settings.permission_wait:
            record.permission_denied_since = since
            record.message = f"Vertex AI refused the submission (PERMISSION_DENIED), trying again: {exc.message}"
            record.owner = record.lease_until = None
            record.not_before = now + timedelta(seconds=min(60, max(1, self.settings.permission_wait // 5)))
            self.outbox.save(record, generation)
            logs.warning(
                f"Vertex AI refused the submission for lack of permission; trying again until "
                f"{format_duration(self.settings.permission_wait)} after the first refusal. {advice}",
                vertex_error=exc.message,
                waited_s=waited,
            )
            return "waiting"
        record.state, record.failure_reason = "failed", "permission"
        record.message = f"{exc.message} {advice}"
        record.add_events(
            [
                Failed(
                    **record.envelope(now),
                    message=f"Vertex AI refused the submission for {format_duration(waited)} (PERMISSION_DENIED): "
                    f"{exc.message} {advice}",
                    reason="permission",
                )
            ]
        )
        generation = self.outbox.save(record, generation)
        self.queue.release(record)  # once the ended state is saved, before anything else can fail
        record, generation = self.outbox.flush(record, generation, whole_outbox(record))
        self.outbox.retire_when_done(record)
        return "failed"

    def _refused(self, record: Record, generation: int, exc: CallRejected) -> str:
        """Any other refusal: a quota refusal is tried again after a backoff while attempts remain, else the
        request fails (quota); anything else is `rejected` with Vertex's words."""
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
        generation = self.outbox.save(record, generation)
        self.queue.release(record)  # once the ended state is saved, before anything else can fail
        record, generation = self.outbox.flush(record, generation, whole_outbox(record))
        self.outbox.retire_when_done(record)
        return events[0].state
