"""The ledger in Cloud Storage: one JSON record per request, changed only by compare-and-swap on the object's
generation, plus an index of active requests so `reconcile` never reads finished history.

Layout under the control bucket:
  ledger/<key hash>.json   the Record (never deleted: it is the audit trail and the duplicate detector)
  active/<key hash>        exists while the request is not final
  ids/<request id>         the key hash of the request that first used this id (for `trainctl status ID`)
"""

from __future__ import annotations

from functions.gcs import Conflict
from functions.lifecycle import Record
from functions.ports import Storage

LEDGER_PREFIX = "ledger/"
ACTIVE_PREFIX = "active/"
IDS_PREFIX = "ids/"


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
        """Write a new record; raises Conflict when one already exists."""
        generation = self._gcs.write(self.bucket, self._name(record), record.model_dump_json(exclude_none=True), 0)
        try:
            self._gcs.write(self.bucket, f"{IDS_PREFIX}{record.request_id}", record.key_hash, 0)
        except Conflict:
            pass  # the id names an earlier request (a marker override may reuse one); status shows that one
        return generation

    def replace(self, record: Record, generation: int) -> int:
        """Compare-and-swap: raises Conflict unless the stored record is still at `generation`."""
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

    def find_by_request_id(self, request_id: str) -> tuple[Record, int] | None:
        found = self._gcs.read(self.bucket, f"{IDS_PREFIX}{request_id}")
        return self.read(found[0].decode()) if found else None

    def active_records(self) -> list[Record]:
        return [found[0] for khash in self.active() if (found := self.read(khash))]

    def all_records(self) -> list[Record]:
        names = self._gcs.names(self.bucket, LEDGER_PREFIX)
        return [found[0] for name in names if (found := self.read(name.removeprefix(LEDGER_PREFIX)[: -len(".json")]))]

    @staticmethod
    def _name(record: Record) -> str:
        return f"{LEDGER_PREFIX}{record.key_hash}.json"
