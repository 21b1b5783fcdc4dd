"""The ledger in Cloud Storage: one JSON record per request, changed only by compare-and-swap on the object's
generation, plus an index of active requests so `reconcile` never reads finished history.

Layout under the control bucket:
  ledger/<key hash>.json   the Record (never deleted: it is the audit trail and the duplicate detector)
  active/<key hash>        exists while the request is not final; its custom metadata is what the reconcile sweep
                           last saw of the request (functions/lifecycle/sweep.py)
  ids/<request id>         the key hash of the one request that holds this id (for `trainctl status ID`);
  ids/<team>/<request id>  the same in a team's namespace (every team but the default team: functions/ledger/keys.py)
  history/<day>/<id>       one per finished request, its Outcome in the object's metadata (functions/ledger/history.py)
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from functions import logs
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict, StorageError, TooLarge
from functions.cloud.ports import Storage
from functions.ledger.history import MAX_OUTCOME_BYTES, METADATA_KEY, Outcome, history_entry, labels_in_content
from functions.ledger.keys import id_claim, key_hash, request_key
from functions.ledger.record import Record

LEDGER_PREFIX = "ledger/"
ACTIVE_PREFIX = "active/"
IDS_PREFIX = "ids/"
HISTORY_PREFIX = "history/"


class IdTaken(Exception):
    """A request id already belongs to another request (another key): one id, one request, one output folder."""

    def __init__(self, request_id: str, holder: str):
        super().__init__(f"request id {request_id!r} belongs to the request with key hash {holder}")
        self.request_id, self.holder = request_id, holder


class Ledger:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    def read(self, key_hash: str) -> tuple[Record, int] | None:
        found = self._gcs.read(self.bucket, f"{LEDGER_PREFIX}{key_hash}.json")
        if found is None:
            return None
        data, generation = found
        return Record.model_validate_json(data), generation

    def create(self, record: Record) -> int:
        """Claim the record's request id for its key, then write the new record. Raises IdTaken when the id
        belongs to another key, Conflict when the record already exists."""
        self._claim_id(record)
        return self._gcs.write(self.bucket, self._name(record), record.model_dump_json(exclude_none=True), 0)

    def _claim_id(self, record: Record) -> None:
        """`ids/<request id>` (in a team's namespace `ids/<team>/<request id>`) names one key hash, written once.
        Finding our own is a redelivery after a crash between the two writes of `create`, which goes on; finding
        another's means two keys map to one id (a derived id's slug loses case and characters), and the later one is
        refused (issue 24, point 7)."""
        name = f"{IDS_PREFIX}{id_claim(record.request_id, record.key)}"
        try:
            self._gcs.write(self.bucket, name, record.key_hash, 0)
            return
        except Conflict:
            found = self._gcs.read(self.bucket, name)
        if found is None:
            raise Transient(f"gs://{self.bucket}/{name} vanished between create and read")  # ids are never deleted
        holder = found[0].decode()
        if holder != record.key_hash:
            raise IdTaken(record.request_id, holder)

    def replace(self, record: Record, generation: int) -> int:
        """Compare-and-swap: raises Conflict unless the stored record is still at `generation`. A request that has
        ended needs no job planned again: its sealed values go (issue 40, point 7)."""
        if record.final:
            record.sealed_env = None
        return self._gcs.write(self.bucket, self._name(record), record.model_dump_json(exclude_none=True), generation)

    def mark_active(self, key_hash: str) -> None:
        try:
            self._gcs.write(self.bucket, f"{ACTIVE_PREFIX}{key_hash}", b"", 0)
        except Conflict:
            pass  # already marked

    def mark_inactive(self, key_hash: str) -> None:
        self._gcs.delete(self.bucket, f"{ACTIVE_PREFIX}{key_hash}")

    def active(self) -> list[str]:
        return [name.removeprefix(ACTIVE_PREFIX) for name in self._gcs.names(self.bucket, ACTIVE_PREFIX)]

    def active_entries(self) -> list[tuple[str, dict[str, str]]]:
        """(key hash, the entry's custom metadata) of every active request, from the listing alone."""
        listing = self._gcs.metadata_under(self.bucket, ACTIVE_PREFIX)
        return [(name.removeprefix(ACTIVE_PREFIX), metadata) for name, metadata in listing]

    def note_on_active(self, key_hash: str, metadata: dict[str, str]) -> None:
        """Keep `metadata` on the request's active entry; an entry retired meanwhile is left retired."""
        self._gcs.set_metadata(self.bucket, f"{ACTIVE_PREFIX}{key_hash}", metadata)

    def find_by_request_id(self, request_id: str, namespace: str | None = None) -> tuple[Record, int] | None:
        """The request that holds `request_id` in a team's namespace (keys.id_namespace; None: the default team's).
        A team's request from before ids had namespaces holds `ids/<request id>`, and is found there when the
        record says it is that team's."""
        found = self._gcs.read(self.bucket, f"{IDS_PREFIX}{id_claim(request_id, request_key(request_id, namespace))}")
        if found is not None:
            return self.read(found[0].decode())
        if namespace is None:
            return None
        legacy = self._gcs.read(self.bucket, f"{IDS_PREFIX}{request_id}")
        record = self.read(legacy[0].decode()) if legacy else None
        return record if record is not None and record[0].team == namespace else None

    def key_for(self, request_id: str, namespace: str | None) -> str:
        """The key of `request_id` in a team's namespace: keys.request_key's, except for a request the team sent
        before ids had namespaces (issue 38), whose record is under `request:<id>` and names the team: its
        redelivery keeps that key, so it is found (a duplicate, a conflict, an expired claim taken over) and never
        submitted twice. Nothing new is ever created under the old key for a team but the default team, so once
        the new key has no record, the old one's answer cannot change."""
        key = request_key(request_id, namespace)
        if namespace is None or self.read(key_hash(key)) is not None:
            return key
        legacy = request_key(request_id)
        found = self.read(key_hash(legacy))
        return legacy if found is not None and found[0].team == namespace else key

    def active_records(self) -> list[Record]:
        return [found[0] for khash in self.active() if (found := self.read(khash))]

    def all_records(self) -> list[Record]:
        names = self._gcs.names(self.bucket, LEDGER_PREFIX)
        return [found[0] for name in names if (found := self.read(name.removeprefix(LEDGER_PREFIX)[: -len(".json")]))]

    def record_outcome(self, outcome: Outcome, name: str, key: str = METADATA_KEY) -> None:
        """File a finished request under the day it finished; `name` is unique to it (its key hash, or the
        rejected delivery's event id). Writing it again (a redelivery) keeps the first. A model decision is filed
        the same way under its own metadata `key` (history.MODEL_DECISION_KEY).

        Never raises: the index serves `trainctl report`, and a write it refuses must not keep a final event in
        the outbox (republished every tick) nor its record active. A refusal is logged with the outcome; an
        outage of Cloud Storage also fails the outbox's own compare-and-swap that follows, so the event, and this
        write, are tried again by the next handler."""
        day = f"{outcome.time.astimezone(UTC):%Y-%m-%d}"
        content, metadata = history_entry(outcome, key)
        try:
            self._gcs.write(self.bucket, f"{HISTORY_PREFIX}{day}/{name}", content, 0, metadata)
        except Conflict:
            pass
        except (StorageError, Transient) as exc:
            logs.error(
                f"could not file the outcome of {outcome.request_id} in the history index; `trainctl report` will "
                f"miss it (the events table has it): {type(exc).__name__}: {exc}",
                outcome=outcome.model_dump(mode="json"),
            )

    def outcomes(self, since: datetime, key: str = METADATA_KEY) -> list[Outcome]:
        """Every request that finished at or after `since` (with history.MODEL_DECISION_KEY: every model decision),
        from the listing alone (no object is read), but for the few whose labels did not fit their metadata."""
        return self.outcomes_by_key(since, (key,))[key]

    def outcomes_by_key(
        self, since: datetime, keys: tuple[str, ...], day: date | None = None
    ) -> dict[str, list[Outcome]]:
        """`outcomes` for several metadata keys (requests, model decisions, trigger policies) from one listing; with
        `day`, only what was filed under that day (a reader may list the days of a window side by side)."""
        first_day = f"{HISTORY_PREFIX}{since.astimezone(UTC):%Y-%m-%d}"
        prefix, start = (f"{HISTORY_PREFIX}{day:%Y-%m-%d}/", "") if day else (HISTORY_PREFIX, first_day)
        found: dict[str, list[Outcome]] = {key: [] for key in keys}
        for name, meta in self._gcs.metadata_under(self.bucket, prefix, start):
            for key in keys:
                if key in meta and (outcome := self._outcome(name, meta, key)).time >= since:
                    found[key].append(outcome)
        return found

    def _outcome(self, name: str, metadata: dict[str, str], key: str) -> Outcome:
        """The outcome a listing shows, with its labels read from the content when they did not fit."""
        outcome = Outcome.model_validate_json(metadata[key])
        if not labels_in_content(metadata):
            return outcome
        try:
            whole = self._gcs.read(self.bucket, name, max_bytes=MAX_OUTCOME_BYTES)
            return Outcome.model_validate_json(whole[0]) if whole else outcome
        except (TooLarge, ValueError) as exc:  # not what record_outcome writes: report it without labels
            logs.warning(f"the history object {name} holds no readable outcome; its labels are left out: {exc}")
            return outcome

    @staticmethod
    def _name(record: Record) -> str:
        return f"{LEDGER_PREFIX}{record.key_hash}.json"
