"""Cloud Storage, reduced to what the controller needs, with errors mapped to the controller's terms:
Conflict for a failed precondition, Transient for anything worth retrying, None for a missing object."""

from __future__ import annotations

import os
from typing import Any

from google.api_core import exceptions as gexc

from functions.errors import Transient

_TRANSIENT = (gexc.ServiceUnavailable, gexc.InternalServerError, gexc.TooManyRequests, gexc.GatewayTimeout)
# The library retries for up to 120 s by default; a function should rather fail and be redelivered.
# Writes always carry a generation precondition, so retrying them is safe.
CALL_TIMEOUT = 10.0
RETRY_FOR = 15.0


class Conflict(Exception):
    """The object changed since it was read, or already exists when it was to be created."""


def _client(project: str) -> Any:
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=project, credentials=AnonymousCredentials())
    return storage.Client(project=project)


class Gcs:
    def __init__(self, project: str, client: Any = None):
        self._client = client or _client(project)

    @staticmethod
    def _call(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        from google.cloud.storage.retry import DEFAULT_RETRY

        try:
            return fn(*args, retry=DEFAULT_RETRY.with_timeout(RETRY_FOR), timeout=CALL_TIMEOUT, **kwargs)
        except gexc.PreconditionFailed as exc:
            raise Conflict(str(exc)) from None
        except _TRANSIENT as exc:
            raise Transient(f"Cloud Storage is unavailable: {exc}") from exc
        except (ConnectionError, OSError) as exc:
            raise Transient(f"cannot reach Cloud Storage: {exc}") from exc

    def read(self, bucket: str, name: str, generation: int | None = None) -> tuple[bytes, int] | None:
        """(content, generation), or None when the object (at that generation) does not exist."""
        blob = self._client.bucket(bucket).blob(name, generation=generation)
        try:
            data = self._call(blob.download_as_bytes)
        except gexc.NotFound:
            return None
        return data, int(blob.generation)

    def write(self, bucket: str, name: str, data: bytes | str, if_generation_match: int) -> int:
        """Write only if the object is at `if_generation_match` (0: does not exist); returns the new generation."""
        blob = self._client.bucket(bucket).blob(name)
        content_type = "application/json" if name.endswith(".json") else "application/octet-stream"
        self._call(blob.upload_from_string, data, content_type=content_type, if_generation_match=if_generation_match)
        return int(blob.generation)

    def delete(self, bucket: str, name: str) -> None:
        try:
            self._call(self._client.bucket(bucket).blob(name).delete)
        except gexc.NotFound:
            pass

    def any_under(self, bucket: str, prefix: str) -> bool:
        """Whether any object's name starts with `prefix` (False for a missing bucket)."""
        try:
            return self._call(
                lambda **kw: any(True for _ in self._client.list_blobs(bucket, prefix=prefix, max_results=1, **kw))
            )
        except gexc.NotFound:
            return False

    def names(self, bucket: str, prefix: str) -> list[str]:
        return self._call(lambda **kw: [b.name for b in self._client.list_blobs(bucket, prefix=prefix, **kw)])
