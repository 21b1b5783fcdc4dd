"""Cloud Storage in this process, for what needs no server: `trainctl replay --dry-run`'s ledger, the unit tests'
controller, and bench/reconcile_sweep.py's ledger of tens of thousands of objects (which fake-gcs-server scans one
by one on every lookup). It keeps what the controller relies on of Cloud Storage: generations and preconditions,
custom metadata, and listings sorted by name; a compare-and-swap is atomic across threads."""

from __future__ import annotations

import base64
import bisect
import hashlib
import itertools
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from functions.cloud.gcs import Conflict, ListedObject, ObjectDigest, TooLarge
from functions.jobs.secret_launcher import crc32c


@dataclass
class MemoryGcs:
    """The adapter's interface (functions.cloud.ports.Storage) over a dict: (bucket, name) → (content, generation), the
    object's custom metadata beside it. Only the newest generation of an object is kept."""

    objects: dict[tuple[str, str], tuple[bytes, int]] = field(default_factory=dict)
    metadata: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    generation: int = 1000  # the last generation given out
    updated: dict[tuple[str, str], str] = field(default_factory=dict)  # when each object's generation was written
    _names: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list), repr=False)  # sorted, per bucket
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def read(
        self, bucket: str, name: str, generation: int | None = None, max_bytes: int | None = None
    ) -> tuple[bytes, int] | None:
        found = self.objects.get((bucket, name))
        if not found or generation not in (None, found[1]):
            return None
        if max_bytes is not None and len(found[0]) > max_bytes:
            raise TooLarge(f"gs://{bucket}/{name}", max_bytes, len(found[0]))
        return found

    def digest(self, bucket: str, name: str, max_bytes: int) -> ObjectDigest | None:
        found = self.read(bucket, name, max_bytes=max_bytes)
        if found is None:
            return None
        return ObjectDigest(hashlib.sha256(found[0]).hexdigest(), len(found[0]), found[1], None, None)

    def read_range(self, bucket: str, name: str, start: int, length: int) -> bytes | None:
        found = self.read(bucket, name)
        return found[0][start : start + length] if found else None

    def write(
        self,
        bucket: str,
        name: str,
        data: bytes | str,
        if_generation_match: int,
        custom_metadata: dict[str, str] | None = None,
    ) -> int:
        """As the adapter's: Conflict unless the object is at `if_generation_match` (0: does not exist)."""
        with self._lock:
            current = self.objects.get((bucket, name))
            if (current[1] if current else 0) != if_generation_match:
                raise Conflict(f"gs://{bucket}/{name} is not at generation {if_generation_match}")
            return self._put(bucket, name, data.encode() if isinstance(data, str) else data, custom_metadata or {})

    def copy(self, bucket: str, name: str, to_bucket: str, to_name: str) -> int | None:
        with self._lock:
            found = self.objects.get((bucket, name))
            if found is None:
                return None
            return self._put(to_bucket, to_name, found[0], self.metadata.get((bucket, name), {}))

    def delete(self, bucket: str, name: str) -> None:
        with self._lock:
            if self.objects.pop((bucket, name), None) is not None:
                self.metadata.pop((bucket, name), None)
                self._names[bucket].remove(name)

    def set_metadata(self, bucket: str, name: str, custom_metadata: dict[str, str]) -> bool:
        """Merged into the object's (as objects.patch does); False when the object does not exist."""
        with self._lock:
            if (bucket, name) not in self.objects:
                return False
            self.metadata[(bucket, name)] = self.metadata.get((bucket, name), {}) | custom_metadata
            return True

    def names(self, bucket: str, prefix: str) -> list[str]:
        return self._listing(bucket, prefix)

    def objects_under(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        for name in self.names(bucket, prefix):
            found = self.objects.get((bucket, name))
            if found is not None:
                yield name, len(found[0])

    def listing(self, bucket: str, prefix: str) -> Iterator[ListedObject]:
        for name in self.names(bucket, prefix):
            found = self.objects.get((bucket, name))
            if found is not None:
                data, generation = found
                checksum = base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()
                yield ListedObject(name, len(data), generation, checksum, self.updated.get((bucket, name), ""))

    def any_under(self, bucket: str, prefix: str) -> bool:
        return bool(self.names(bucket, prefix))

    def metadata_under(self, bucket: str, prefix: str, start_offset: str = "") -> Iterator[tuple[str, dict[str, str]]]:
        for name in self._listing(bucket, prefix, start_offset):
            if (bucket, name) in self.objects:
                yield name, dict(self.metadata.get((bucket, name), {}))

    def _put(self, bucket: str, name: str, data: bytes, metadata: dict[str, str]) -> int:
        """Store a new generation of the object (the caller holds the lock)."""
        if (bucket, name) not in self.objects:
            bisect.insort(self._names[bucket], name)
        self.generation += 1
        self.objects[(bucket, name)] = (data, self.generation)
        self.updated[(bucket, name)] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self.metadata[(bucket, name)] = dict(metadata)
        return self.generation

    def _listing(self, bucket: str, prefix: str, start_offset: str = "") -> list[str]:
        """The names under `prefix` from `start_offset` on, in Cloud Storage's order (lexicographic)."""
        with self._lock:
            names = self._names[bucket]
            chosen = names[bisect.bisect_left(names, max(prefix, start_offset)) :]
            return list(itertools.takewhile(lambda name: name.startswith(prefix), chosen))
