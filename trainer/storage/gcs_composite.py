"""Writing one large Cloud Storage object over several streams at once: a parallel composite upload. The bytes
written are cut into parts; each full part is uploaded as a temporary object by a pool of threads while writing
goes on; at the end the parts are composed into the final object and deleted. Google's description: "a file is
divided into up to 32 chunks, the chunks are uploaded in parallel to temporary objects, the final object is
recreated using the temporary objects, and the temporary objects are deleted"
(https://cloud.google.com/storage/docs/parallel-composite-uploads). One compose request takes at most 32
sources and a source may itself be composite (https://cloud.google.com/storage/docs/composite-objects), so
more parts are composed in rounds.

The final object appears only when every part arrived; a failure deletes the parts and leaves no object.
Memory stays bounded: at most `streams` parts wait for upload, writing blocks until one is done. The object is
a composite one with a CRC32C and no MD5 hash, which the Python client checks when downloading.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor

COMPOSE_LIMIT = 32  # sources per compose request
PART_BYTES = 64 * 1024 * 1024
STREAMS = 8


class CompositeWriter:
    def __init__(self, bucket, key: str, part_bytes: int = PART_BYTES, streams: int = STREAMS):
        self.bucket, self.key, self.part_bytes = bucket, key, part_bytes
        self._pool = ThreadPoolExecutor(max_workers=streams, thread_name_prefix="gcs-part")
        self._room = threading.BoundedSemaphore(streams)  # parts held in memory until uploaded
        self._pending = bytearray()
        self._uploads: list[Future] = []
        self._made: list[str] = []  # temporary objects that exist (or may), to delete at the end

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        while len(self._pending) + len(view) >= self.part_bytes:
            take = self.part_bytes - len(self._pending)
            self._pending += view[:take]
            view = view[take:]
            self._send_part()
        self._pending += view
        return len(memoryview(data).cast("B"))

    def flush(self) -> None:
        """Nothing to do: a part leaves when it is full, the rest at `commit`."""

    def _send_part(self) -> None:
        name = f"{self.key}.part-{len(self._uploads):05d}"
        data, self._pending = bytes(self._pending), bytearray()
        self._room.acquire()
        for earlier in self._uploads:  # stop writing at the first failed part rather than at the end
            if earlier.done() and earlier.exception() is not None:
                raise earlier.exception()  # type: ignore[misc]
        self._made.append(name)
        future = self._pool.submit(self.bucket.blob(name).upload_from_string, data)
        future.add_done_callback(lambda _: self._room.release())
        self._uploads.append(future)

    def commit(self) -> None:
        """Upload what is left, compose the parts into the object, delete the parts."""
        try:
            if not self._uploads:  # smaller than one part: a plain upload
                self.bucket.blob(self.key).upload_from_string(bytes(self._pending))
                return
            if self._pending:
                self._send_part()
            for future in self._uploads:
                future.result()  # the first failed part's error
            self._compose([self.bucket.blob(name) for name in self._made])
        finally:
            self._clean_up()

    def abort(self) -> None:
        for future in self._uploads:
            future.cancel()
        self._clean_up()

    def _compose(self, parts: list) -> None:
        """Compose into the final object, in rounds of at most COMPOSE_LIMIT sources."""
        round_number = 0
        while len(parts) > COMPOSE_LIMIT:
            merged = []
            for i in range(0, len(parts), COMPOSE_LIMIT):
                name = f"{self.key}.compose-{round_number}-{i // COMPOSE_LIMIT:05d}"
                self._made.append(name)
                target = self.bucket.blob(name)
                target.compose(parts[i : i + COMPOSE_LIMIT])
                merged.append(target)
            parts, round_number = merged, round_number + 1
        self.bucket.blob(self.key).compose(parts)

    def _clean_up(self) -> None:
        from google.api_core.exceptions import NotFound

        self._pool.shutdown(wait=True)
        for name in self._made:
            with contextlib.suppress(NotFound):
                self.bucket.blob(name).delete()
