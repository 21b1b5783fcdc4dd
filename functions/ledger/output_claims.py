"""Output folders outside the control bucket, each held by one request while it is active: two requests writing into
overlapping folders (one inside the other) would each read the other's metrics, progress and failure note as its
own, so a request whose output_dir overlaps an active request's is refused before it is claimed.

  outputs/<bucket>/<path><key hash>   one per request whose output_dir gs://<bucket>/<path> is in an operator's
                                      output bucket: {"request_id", "output_dir", "claimed"}; written just before
                                      the request's claim, deleted when its record is retired (outbox.py)

<path> ends in "/" and a key hash has none, so each name splits back into its folder and its owner. The control
bucket needs no entries: there a request may write only its own folder (functions/jobs/admission.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.ports import Storage
from functions.ledger.keys import key_hash
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from schemas.rules import split_gs_uri

OUTPUTS_PREFIX = "outputs/"
# Cloud Storage object names are at most 1024 bytes of UTF-8 (https://cloud.google.com/storage/docs/objects#naming).
MAX_OBJECT_NAME_BYTES = 1024
_KEY_HASH_LENGTH = len(key_hash(""))
_MAX_ENTRY_BYTES = 4096


def max_output_path_bytes(bucket: str) -> int:
    """The longest folder path in `bucket` whose entry's name still fits Cloud Storage's limit."""
    return MAX_OBJECT_NAME_BYTES - len(f"{OUTPUTS_PREFIX}{bucket}/".encode()) - _KEY_HASH_LENGTH


def overlap(one: str, other: str) -> bool:
    """Whether two folders (each ending in "/") overlap: one is the other or inside it. Comparing whole names at
    their "/" boundaries, runs/a/ and runs/a-b/ do not."""
    return one.startswith(other) or other.startswith(one)


def output_dir_of(record: Record) -> str:
    """The output_dir a record's job writes to (its artifacts are named below it)."""
    return record.artifacts.model_dir.removesuffix("model/")


@dataclass(frozen=True)
class Holder:
    """An active request writing into a folder that overlaps the one asked for."""

    request_id: str
    output_dir: str


class OutputClaims:
    def __init__(
        self,
        gcs: Storage,
        ledger: Ledger,
        clock: Callable[[], datetime],
        claim_window: timedelta,
        abandoned_after: timedelta,
    ):
        """`claim_window`: how long an entry whose request has no ledger record yet still counts (its claim may be
        in progress: the longest a handler lives). `abandoned_after`: when such an entry can no longer be taken
        up by a redelivery of its request (max_event_age drops it), and reconcile deletes it."""
        self._gcs = gcs
        self._ledger = ledger
        self.bucket = ledger.bucket
        self._clock = clock
        self._claim_window = claim_window
        self._abandoned_after = abandoned_after

    def claim(self, output_dir: str, khash: str, request_id: str) -> Holder | None:
        """Hold `output_dir` for the request keyed `khash`, or the active request already holding an overlapping
        folder (then nothing is held). Its own entry is written first and the bucket's entries are listed after:
        of two overlapping requests arriving together, the second to write sees the first's entry (object listing
        is strongly consistent, https://cloud.google.com/storage/docs/consistency), so both may be refused but
        never both admitted. An entry left by an earlier delivery of the same request is its own, and refreshed."""
        bucket, path = split_gs_uri(output_dir)
        if bucket == self.bucket:
            return None
        mine = _entry_name(bucket, path, khash)
        entry = {"request_id": request_id, "output_dir": output_dir, "claimed": self._clock().isoformat()}
        self._write(mine, json.dumps(entry))
        for name in self._gcs.names(self.bucket, f"{OUTPUTS_PREFIX}{bucket}/"):
            _, other_path, owner = _parse(name)
            if owner != khash and overlap(path, other_path) and (holder := self._holder(name)) is not None:
                self._gcs.delete(self.bucket, mine)
                return holder
        return None

    def release(self, output_dir: str, khash: str) -> None:
        """The request keyed `khash` writes no more: its folder is free for others."""
        bucket, path = split_gs_uri(output_dir)
        if bucket != self.bucket:
            self._gcs.delete(self.bucket, _entry_name(bucket, path, khash))

    def forget_ended(self) -> int:
        """Delete the entries of requests that have ended (a handler that died between ending a request and
        releasing its folder) or were abandoned before their claim; how many were deleted. Entries of requests in
        the active index are left alone without reading their records: they are released when retired."""
        names = self._gcs.names(self.bucket, OUTPUTS_PREFIX)
        active = set(self._ledger.active()) if names else set()
        dropped = 0
        for name in names:
            if _parse(name)[2] not in active and self._holder(name, self._abandoned_after) is None:
                self._gcs.delete(self.bucket, name)
                dropped += 1
        return dropped

    def _holder(self, name: str, no_record_for: timedelta | None = None) -> Holder | None:
        """The request an entry names while it may still write there: its record is not final (and still names this
        folder), or it has no record yet and the entry is younger than `no_record_for` (the claim window unless
        given). None for an entry left behind."""
        bucket, path, owner = _parse(name)
        found = self._ledger.read(owner)
        if found is not None:
            record = found[0]
            here = output_dir_of(record) == f"gs://{bucket}/{path}"
            return None if record.final or not here else Holder(record.request_id, output_dir_of(record))
        read = self._gcs.read(self.bucket, name, max_bytes=_MAX_ENTRY_BYTES)
        if read is None:
            return None
        try:
            entry = json.loads(read[0])
            young = self._clock() - datetime.fromisoformat(entry["claimed"]) < (no_record_for or self._claim_window)
            holder = Holder(str(entry["request_id"]), str(entry["output_dir"]))
        except (ValueError, KeyError, TypeError):
            return None  # not written by trainctl: only the functions may write the control bucket's outputs/
        return holder if young else None

    def _write(self, name: str, body: str) -> None:
        """Create the entry, or rewrite the one an earlier delivery of the same request left (a fresh claim time:
        its claim is in progress again)."""
        generation = 0
        for _ in range(5):
            try:
                self._gcs.write(self.bucket, name, body, generation)
                return
            except Conflict:
                found = self._gcs.read(self.bucket, name, max_bytes=_MAX_ENTRY_BYTES)
                generation = found[1] if found else 0
        raise Transient(f"the output folder entry {name} kept changing")


def _entry_name(bucket: str, path: str, khash: str) -> str:
    return f"{OUTPUTS_PREFIX}{bucket}/{path}{khash}"


def _parse(name: str) -> tuple[str, str, str]:
    """(bucket, folder path, owner's key hash) of an entry's name."""
    bucket, _, rest = name.removeprefix(OUTPUTS_PREFIX).partition("/")
    path, slash, owner = rest.rpartition("/")
    return bucket, path + slash, owner
