"""A model's trigger policies at a new request's claim (issue 42): one run per model at a time (model.concurrency skip |
replace) and skip unchanged data (model.skip_unchanged), each decided once, before the request's record exists, so
that a skipped request's record is created final (`skipped`) and its redelivery reads a duplicate.

One run per model: the model's run slot (functions/ledger/run_slots.py) names its newest run, changed only by
compare-and-swap. A new request reads it: when it names another request that is still active, `skip` ends this one
`skipped` (reason running) and `replace` takes the slot naming the run it replaces; otherwise the request takes the
slot. Of two triggers at the same instant one write wins; the other reads the winner (whose record may not exist yet:
it counts as active for a lease) and decides again. After its record is created a request reads the slot once more:
one that lost it meanwhile ends at once, superseded (or skipped, under `skip`). The run replaced is marked
`superseded_by` (with its `superseded` event) by the newer request's submission before the newer one's job is created,
whichever delivery or reconcile visit gets there: its job is cancelled by the observers (reconcile's next tick: the
intake functions never cancel jobs, issue 40 point 6), it ends `cancelled` (reason superseded)
and registers no version (functions/models/promotion.py).

Skip unchanged data: the dataset's fingerprint (functions/data/fingerprint.py, computed at preparation) against the
one the controller recorded when it decided on the champion (functions/ledger/model_records.py), never a registry
label a person could edit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions import logs
from functions.capacity.quota_queue import QuotaQueue
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.intake.acceptance import skipped_record
from functions.intake.preparation import Prepared
from functions.ledger.keys import key_hash
from functions.ledger.model_records import ModelLedger
from functions.ledger.outbox import Outbox, whole_outbox
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from functions.ledger.run_slots import RunSlot, RunSlots
from functions.settings import Settings
from schemas.events import Cancelled, JobEvent, Skipped, SkipReason, Superseded
from schemas.request import ModelBlock, TrainingJobRequest

# The key of an active entry's metadata that says which version of the sweep's notes it holds
# (functions/lifecycle/sweep.py Seen): emptied, the sweep looks at the request at its next tick.
FORGET_SEEN = "seen"


@dataclass(frozen=True)
class Skip:
    """The request starts nothing: its record is created `skipped`, with this event's figures."""

    reason: SkipReason
    message: str
    saved_gpu_hours: float
    blocking_request: str | None = None
    fingerprint: str | None = None
    champion_version: str | None = None

    def event(self, record: Record, now: datetime) -> Skipped:
        return Skipped(
            **record.envelope(now),
            message=self.message,
            reason=self.reason,
            blocking_request=self.blocking_request,
            fingerprint=self.fingerprint,
            champion_version=self.champion_version,
            saved_gpu_hours=self.saved_gpu_hours,
        )


@dataclass(frozen=True)
class Go:
    """The request runs; `supersedes`: the key hash of the model's active run it replaces."""

    supersedes: str | None = None


def block_of(record: Record) -> ModelBlock | None:
    """The model block of a record's request; None without one."""
    model = record.request.get("model")
    return ModelBlock.model_validate(model) if model else None


@dataclass
class RunPolicy:
    settings: Settings
    ledger: Ledger
    slots: RunSlots
    models: ModelLedger
    outbox: Outbox
    queue: QuotaQueue  # an older run ended while it waited for quota lets go of its place
    clock: Callable[[], datetime]

    def before_claim(self, request: TrainingJobRequest, key: str, prepared: Prepared) -> Skip | Go:
        """What the model's policies make of a new request, before its record is created."""
        block = request.model
        if block is None:
            return Go()
        if block.skip_unchanged and (unchanged := self._unchanged(block, prepared, _saved(request, prepared))):
            return unchanged
        if block.concurrency == "allow":
            return Go()
        return self._take_slot(request, prepared, block, key_hash(key))

    def running(self, request: TrainingJobRequest, prepared: Prepared, holder: str) -> Skip:
        """Skipped under `skip`: the model's run `holder` is active."""
        assert request.model is not None
        saved = _saved(request, prepared)
        return Skip(
            "running",
            f"skipped: model {request.model.name}'s run {holder} is active (model.concurrency skip); no GPU started, "
            f"saving up to {saved:,.1f} GPU-hours",
            saved,
            blocking_request=holder,
        )

    def _unchanged(self, block: ModelBlock, prepared: Prepared, saved: float) -> Skip | None:
        """Skipped when the dataset's fingerprint is the one the controller recorded for the champion's data."""
        fingerprint = prepared.fingerprint
        if fingerprint is None or prepared.model is None:
            return None
        models, _ = self.models.read(block.name, prepared.model.charter.rule.alias)
        champion = models.champion
        if champion is None or models.fingerprint_of(champion) != fingerprint:
            return None
        return Skip(
            "unchanged_data",
            f"skipped: the dataset is unchanged since version {champion} of model {block.name} was trained on it "
            f"(fingerprint {fingerprint[:19]}…, model.skip_unchanged); no GPU started, saving up to {saved:,.1f} "
            "GPU-hours",
            saved,
            fingerprint=fingerprint,
            champion_version=champion,
        )

    def _take_slot(self, request: TrainingJobRequest, prepared: Prepared, block: ModelBlock, khash: str) -> Skip | Go:
        for _ in range(10):
            slot, generation = self.slots.read(block.name)
            if slot is not None and slot.key_hash == khash:
                return Go(slot.supersedes)  # a redelivery of the request that took it
            active = slot is not None and self._active(slot)
            if slot is not None and active and block.concurrency == "skip":
                return self.running(request, prepared, slot.request_id)
            supersedes = slot.key_hash if slot is not None and active else None
            mine = RunSlot(
                model_id=block.name,
                key_hash=khash,
                request_id=request.request_id,
                since=self.clock(),
                supersedes=supersedes,
            )
            try:
                self.slots.write(mine, generation)
            except Conflict:
                continue  # another trigger of the model took it first: decide again against it
            return Go(supersedes)
        raise Transient(f"the run slot of model {block.name} kept changing")

    def _active(self, slot: RunSlot) -> bool:
        """Whether the slot's holder is still active: its record is not final, or it has none yet and took the slot
        less than a lease ago (its claim creates it right after)."""
        found = self.ledger.read(slot.key_hash)
        if found is not None:
            return not found[0].final
        return self.clock() < slot.since + timedelta(seconds=self.settings.lease)

    def confirm(self, record: Record, generation: int, skip: Callable[[str], Skip]) -> tuple[Record, int]:
        """Right after the new record is created (before its `accepted` is published): it still holds its model's
        slot, or another trigger took it meanwhile — then it ends now, superseded by that one (or, under `skip`, when
        that one did not replace it: skipped). `skip(blocking request id)` says how."""
        block = block_of(record)
        if block is None or block.concurrency == "allow":
            return record, generation
        slot, _ = self.slots.read(block.name)
        if slot is None or slot.key_hash == record.key_hash:
            return record, generation
        logs.info("another trigger took the model's run slot meanwhile", model=block.name, holder=slot.request_id)
        for _ in range(5):
            try:
                if block.concurrency == "replace" or slot.supersedes == record.key_hash:
                    record.superseded_by = record.superseded_by or slot.request_id
                    superseded = self._superseded(record, block, record.superseded_by)
                    return self.end_superseded(record, generation, [superseded])
                # Its `accepted` was never published: it is skipped instead.
                record = skipped_record(record, skip(slot.request_id).event(record, self.clock()))
                return self._save_final(record, generation, [])
            except Conflict:  # the newer one marked it superseded meanwhile: end it as that says
                record, generation = self.outbox.read(record.key_hash)
                if record.final:
                    return record, generation
        raise Transient(f"the record of {record.request_id} kept changing while it ended")

    def supersede_older(self, record: Record) -> None:
        """The newer `record` replaces the run its slot named: mark that one superseded (its `superseded` event), and
        end it at once when it waits in trainctl's queue (no job). Its job is cancelled by the observers — the intake
        functions may create jobs, never cancel them (issue 40, point 6) — at reconcile's next tick, which is made to
        look at it (what the sweep last saw of it is forgotten), or the job's next state change. A claimed one with
        no job yet is ended by its own next submission (Submission.submit), which may be creating its job now."""
        block = block_of(record)
        if record.supersedes is None or block is None:
            return
        for _ in range(5):
            found = self.ledger.read(record.supersedes)
            if found is None or found[0].final or found[0].superseded_by is not None:
                return  # it never made its record (its own confirm sees the slot), ended, or is marked already
            older, generation = found
            older.superseded_by = record.request_id
            superseded = self._superseded(older, block, record.request_id)
            try:
                if older.state == "queued":
                    self.end_superseded(older, generation, [superseded])
                    return
                mine = older.add_events([superseded])
                generation = self.outbox.save(older, generation)
            except Conflict:
                continue
            logs.info("superseded the model's older run", superseded=older.request_id, model=block.name)
            with contextlib.suppress(Exception):  # else it is looked at when its job's state changes, or is due
                self.ledger.note_on_active(older.key_hash, {FORGET_SEEN: ""})
            self.outbox.flush(older, generation, mine)
            return
        raise Transient(f"the record of the run {record.request_id} replaces kept changing")

    def end_superseded(self, record: Record, generation: int, events: list[JobEvent]) -> tuple[Record, int]:
        """End a superseded request that has no job: `cancelled`, reason superseded."""
        record.state, record.owner, record.lease_until, record.message = "cancelled", None, None, "superseded"
        cancelled = Cancelled(
            **record.envelope(self.clock()),
            message=f"cancelled before any job: superseded by {record.superseded_by}, a newer run of its model",
            reason="superseded",
        )
        return self._save_final(record, generation, [*events, cancelled])

    def _save_final(self, record: Record, generation: int, events: list[JobEvent]) -> tuple[Record, int]:
        record.add_events(events)
        generation = self.outbox.save(record, generation)
        self.queue.release(record)  # once the ended state is saved
        # No live handler holds a request ended here (its own claim, or one waiting in the queue): its whole outbox
        # goes out in order, an `accepted` not yet published first.
        record, generation = self.outbox.flush(record, generation, whole_outbox(record))
        self.outbox.retire_when_done(record)
        return record, generation

    def _superseded(self, record: Record, block: ModelBlock, successor: str) -> Superseded:
        return Superseded(
            **record.envelope(self.clock()),
            message=f"superseded by {successor}, a newer run of model {block.name} (model.concurrency replace): its "
            "job is cancelled and it registers no version",
            successor=successor,
            model=block.name,
        )


def _saved(request: TrainingJobRequest, prepared: Prepared) -> float:
    """The GPU-hours a run not started could have held at most: its plan's GPUs for its whole timeout."""
    return round(prepared.plan.cost.gpus * request.at_rung(prepared.start).scheduling.timeout / 3600, 4)
