"""The outbox: events are written into the ledger record in the same compare-and-swap that changes its state,
then published, then marked published. A handler that dies between the two leaves them for whoever reads the
record next, so no state change is lost, and none is published twice under two ids (record.Record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions import logs
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.ports import Events
from functions.ledger.budget_records import BudgetRecords
from functions.ledger.history import (
    FINAL_EVENT_STATES,
    MODEL_DECISION_KEY,
    MODEL_DECISION_STATES,
    ROLLOUT_END_STATES,
    TRIGGER_POLICY_KEY,
    outcome_of,
)
from functions.ledger.monitoring_fields import published_fields
from functions.ledger.output_claims import OutputClaims, output_dir_of
from functions.ledger.record import Record
from functions.ledger.requests import Ledger


def whole_outbox(record: Record) -> set[str]:
    """The claim's holder owns the record's whole outbox: its own events and whatever a dead holder left."""
    return {e.ce_id for e in record.outbox_events()}


@dataclass
class Outbox:
    ledger: Ledger
    publisher: Events
    clock: Callable[[], datetime]
    # An outbox entry older than this was left by a handler that died (or lost Pub/Sub) after its state change:
    # whoever reads the record next publishes it. Shorter than Pub/Sub's 10 s minimum redelivery backoff, so
    # the redelivery of the failed event already does it; far longer than a publish takes (settings.outbox_grace).
    grace: timedelta
    outputs: OutputClaims  # the output folders active requests hold outside the control bucket
    budgets: BudgetRecords | None = None  # each team's month, where an ended request's spend replaces its worst case

    def read(self, khash: str) -> tuple[Record, int]:
        found = self.ledger.read(khash)
        if found is None:
            raise Transient(f"ledger record {khash} disappeared")
        return found

    def save(self, record: Record, generation: int) -> int:
        """Compare-and-swap the record (Conflict when it changed since `generation`); its new generation."""
        record.updated = self.clock()
        return self.ledger.replace(record, generation)

    def flush(self, record: Record, generation: int, mine: set[str]) -> tuple[Record, int]:
        """Publish, in order, the outbox events this handler queued (`mine`) and any left by a handler that
        died before publishing (older than the grace); then record them as published (compare-and-swap).
        Events another live handler just queued are left to it, so none is published twice."""
        stale_before = self.clock() - self.grace
        events = [e for e in record.outbox_events() if e.ce_id in mine or e.time < stale_before]
        if not events:
            return record, generation
        for event in events:
            self.publisher.publish(event)
            logs.info(f"published {event.state}", **published_fields(event))
            if event.state in FINAL_EVENT_STATES:
                # Before the outbox is cleared: a crash here republishes (same ce-id) and files it then. The budget
                # first, and raising when it cannot be written: the event stays in the outbox until its spend counts
                # (the history's write never raises: the report's index is not worth a republication every tick).
                outcome = outcome_of(event, record)
                if self.budgets is not None:
                    self.budgets.settle(record, outcome.cost_usd, self.clock())
                self.ledger.record_outcome(outcome, record.key_hash)
            elif event.state in MODEL_DECISION_STATES:
                self.ledger.record_outcome(outcome_of(event, record), f"{record.key_hash}-model", MODEL_DECISION_KEY)
            elif event.state in ROLLOUT_END_STATES:
                self.ledger.record_outcome(outcome_of(event, record), f"{record.key_hash}-rollout", MODEL_DECISION_KEY)
            elif event.state == "coalesced":
                self.ledger.record_outcome(
                    outcome_of(event, record), f"{record.key_hash}-coalesced", TRIGGER_POLICY_KEY
                )
        done = {e.ce_id for e in events}
        for _ in range(5):
            record.mark_published(done)
            try:
                return record, self.save(record, generation)
            except Conflict:
                record, generation = self.read(record.key_hash)
        raise Transient(f"could not record the published events of {record.key}")

    def flush_stale(self, record: Record, generation: int) -> tuple[Record, int]:
        return self.flush(record, generation, set())

    def retire_when_done(self, record: Record) -> None:
        """A final record leaves the active index once its outbox is empty. Until then reconcile keeps visiting
        it, so that a terminal event queued by a handler that died before publishing still goes out (once it
        is older than the grace) even when the job was observed again meanwhile, and until the steps after a success
        (functions/models/promotion.py) are done. Its output folder is free then."""
        if record.final and not record.outbox and not record.model_steps_pending:
            # Its folder first: a record still active is retired again, so a failed release is tried again.
            self.outputs.release(output_dir_of(record), record.key_hash)
            self.ledger.mark_inactive(record.key_hash)
