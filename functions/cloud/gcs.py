"""Cloud Storage over its JSON API, reduced to what the controller needs, with errors mapped to the
controller's terms: Conflict for a failed precondition, Transient for anything worth retrying, None for a
missing object.

One small HTTP call per operation instead of google-cloud-storage: that client, with google.api_core and grpc
behind it, was the larger part of a duplicate delivery's cold start (bench/RESULTS.md), and the controller
uses four calls of it. Like the client library, it honours STORAGE_EMULATOR_HOST and retries transient
failures (408, 429, 5xx, connection errors) with jittered backoff — writes too, as they all carry a generation
precondition.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3

from functions.cloud.errors import Transient
from functions.cloud.rest import rest_session
from functions.cloud.retry import Retryable, RetryPolicy

_SCOPES = ["https://www.googleapis.com/auth/devstorage.read_write"]
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
POLICY = RetryPolicy(attempts=5, first_pause=0.25, max_pause=4.0, call_timeout=30.0)
# Cloud Storage's limits on an object's custom metadata, in UTF-8 bytes: a key at most 1 KiB, a value at most 4 KiB,
# all keys and values together at most 8 KiB (google.storage.v2 ServiceConstants.Values
# MAX_CUSTOM_METADATA_FIELD_NAME_BYTES, _FIELD_VALUE_BYTES, _TOTAL_SIZE_BYTES; local/FIDELITY.md). Cloud Storage
# refuses a write past them; fake-gcs-server enforces none, so `write` checks them itself, in both places.
MAX_METADATA_KEY_BYTES = 1024
MAX_METADATA_VALUE_BYTES = 4096
MAX_METADATA_TOTAL_BYTES = 8192


class Conflict(Exception):
    """The object changed since it was read, or already exists when it was to be created."""


class TooLarge(Exception):
    """An object is larger than the caller will read: it is never downloaded whole (anything a requester or a job
    wrote is read with a bound, so that a huge object cannot exhaust the function's memory)."""

    def __init__(self, uri: str, limit: int, size: int | None = None):
        stated = f"{size} bytes" if size is not None else "larger than that"
        super().__init__(f"{uri} is {stated}; the limit is {limit} bytes")
        self.uri, self.limit, self.size = uri, limit, size


@dataclass(frozen=True)
class ObjectDigest:
    """One generation of an object, as read whole: the sha256 of its bytes, and what Cloud Storage states of it."""

    sha256: str  # hex, of the bytes received
    size: int
    generation: int
    crc32c: str | None  # base64, from the download's x-goog-hash; Cloud Storage computes it for every object
    md5: str | None  # base64; composite objects have none


@dataclass(frozen=True)
class ListedObject:
    """One object as a listing shows it, read from no object: what a dataset's fingerprint and a rule's newest marker
    are made of (issue 42)."""

    name: str
    size: int
    generation: int
    crc32c: str  # base64 of the big-endian CRC32C, as Cloud Storage states it for every object
    updated: str  # RFC 3339, when this generation was written


class StorageError(Exception):
    """Cloud Storage refused a call for a reason retrying will not fix (permission, bad request …)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class Gcs:
    def __init__(self, project: str, policy: RetryPolicy = POLICY):
        self.project = project
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        self._session, self._base = rest_session(emulator, "https://storage.googleapis.com", _SCOPES)
        self._policy = policy

    def _object_url(self, bucket: str, name: str) -> str:
        return f"{self._base}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"

    def _call(self, method: str, url: str, missing_ok: bool = False, **kwargs: Any) -> Any:
        """The response; None for 404 when `missing_ok`; Conflict on 412; Transient once retries run out."""

        def attempt(timeout: float) -> Any:
            try:
                response = self._session.request(method, url, timeout=timeout, **kwargs)
            except OSError as exc:  # requests' ConnectionError and Timeout are OSErrors
                raise Retryable(f"cannot reach Cloud Storage: {exc}") from None
            if response.status_code < 300:
                return response
            if response.status_code == 404 and missing_ok:
                return None
            if response.status_code == 412:
                raise Conflict(f"{method} {url}: precondition failed")
            problem = f"Cloud Storage answered {response.status_code} to {method} {url}: {response.text[:200]}"
            if response.status_code in _RETRYABLE_STATUS:
                raise Retryable(problem)
            raise StorageError(problem, response.status_code)

        return self._policy.call(f"{method} {url}", attempt)

    def read(
        self, bucket: str, name: str, generation: int | None = None, max_bytes: int | None = None
    ) -> tuple[bytes, int] | None:
        """(content, generation), or None when the object (at that generation) does not exist. With `max_bytes`,
        an object larger than that raises TooLarge having read at most `max_bytes` + 1 of it: the download is
        streamed and abandoned, so the bound holds whatever the object's stated size."""
        params: dict[str, Any] = {"alt": "media"}
        if generation is not None:
            params["generation"] = generation
        streamed = max_bytes is not None
        response = self._call("GET", self._object_url(bucket, name), missing_ok=True, params=params, stream=streamed)
        if response is None:
            return None
        found_generation = int(response.headers["x-goog-generation"])
        if max_bytes is None:
            return response.content, found_generation
        with response:
            return _bounded_body(response, f"gs://{bucket}/{name}", max_bytes), found_generation

    def digest(self, bucket: str, name: str, max_bytes: int) -> ObjectDigest | None:
        """The sha256 of the object's bytes, with its generation and stated hashes, or None when it does not exist:
        one media download, hashed as it streams (never held whole), so the generation and hashes are those of the
        very bytes hashed. TooLarge past `max_bytes`; Transient when the download breaks off."""
        uri = f"gs://{bucket}/{name}"
        response = self._call("GET", self._object_url(bucket, name), missing_ok=True, params={"alt": "media"},
                              stream=True)  # fmt: skip
        if response is None:
            return None
        with response:
            stated = response.headers.get("x-goog-stored-content-length") or response.headers.get("content-length")
            if stated is not None and stated.isdigit() and int(stated) > max_bytes:
                raise TooLarge(uri, max_bytes, int(stated))
            sha256, size = hashlib.sha256(), 0
            try:  # the bytes as stored: an object uploaded with Content-Encoding gzip is hashed undecoded
                for chunk in response.raw.stream(256 * 1024, decode_content=False):
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(uri, max_bytes)
                    sha256.update(chunk)
            except (OSError, urllib3.exceptions.HTTPError) as exc:
                raise Transient(f"the download of {uri} broke off: {exc}") from None
            hashes = _stated_hashes(response.headers.get("x-goog-hash", ""))
            return ObjectDigest(
                sha256.hexdigest(), size, int(response.headers["x-goog-generation"]), hashes.get("crc32c"),
                hashes.get("md5"),
            )  # fmt: skip

    def read_range(self, bucket: str, name: str, start: int, length: int) -> bytes | None:
        """At most `length` bytes of the object from byte `start` (fewer at its end), or None when it does not
        exist: an HTTP Range request (cloud.google.com/storage/docs/json_api/v1/objects/get, "Range" header), so a
        large data file's header or footer is read without the rest of it. A server that ignores the Range and
        sends the whole object is read only as far as the range reaches."""
        if length <= 0:
            return b""
        headers = {"Range": f"bytes={start}-{start + length - 1}"}
        try:
            response = self._call(
                "GET",
                self._object_url(bucket, name),
                missing_ok=True,
                params={"alt": "media"},
                headers=headers,
                stream=True,
            )
        except StorageError as exc:
            if exc.status == 416:  # the range starts past the object's end
                return b""
            raise
        if response is None:
            return None
        skip = 0 if response.status_code == 206 else start
        with response:
            chunks, received = [], 0
            for chunk in response.iter_content(chunk_size=64 * 1024):
                chunks.append(chunk)
                received += len(chunk)
                if received >= skip + length:
                    break
        return b"".join(chunks)[skip : skip + length]

    def write(
        self,
        bucket: str,
        name: str,
        data: bytes | str,
        if_generation_match: int,
        custom_metadata: dict[str, str] | None = None,
    ) -> int:
        """Write only if the object is at `if_generation_match` (0: does not exist); returns the new generation.
        `custom_metadata` is the object's own key/value metadata, which listings can return without a read;
        StorageError (400, as Cloud Storage answers) when it breaks Cloud Storage's limits."""
        if problems := metadata_problems(custom_metadata or {}):
            raise StorageError(f"custom metadata of gs://{bucket}/{name} is too large: {'; '.join(problems)}", 400)
        content_type = "application/json" if name.endswith(".json") else "application/octet-stream"
        # A multipart upload, as the client library makes: fake-gcs-server ignores preconditions on media ones.
        boundary = f"trainctl-{random.getrandbits(64):016x}"
        resource: dict[str, Any] = {"name": name, "contentType": content_type}
        if custom_metadata:
            resource["metadata"] = custom_metadata
        metadata = json.dumps(resource)
        body = b"".join(
            [
                f"--{boundary}\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n{metadata}\r\n".encode(),
                f"--{boundary}\r\ncontent-type: {content_type}\r\n\r\n".encode(),
                data.encode() if isinstance(data, str) else data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        response = self._call(
            "POST",
            f"{self._base}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
            params={"uploadType": "multipart", "ifGenerationMatch": if_generation_match},
            data=body,
            headers={"content-type": f"multipart/related; boundary={boundary}"},
        )
        return int(response.json()["generation"])

    def copy(self, bucket: str, name: str, to_bucket: str, to_name: str) -> int | None:
        """A server-side copy (objects.rewrite, called again with its rewriteToken until `done`, as
        cloud.google.com/storage/docs/json_api/v1/objects/rewrite says large or cross-location copies need); the
        new object's generation, or None when the source does not exist. Replaces what is at `to_name`."""
        url = f"{self._object_url(bucket, name)}/rewriteTo/b/{quote(to_bucket, safe='')}/o/{quote(to_name, safe='')}"
        params: dict[str, Any] = {}
        while True:
            response = self._call("POST", url, missing_ok=True, params=params, json={})
            if response is None:
                return None
            progress = response.json()
            if progress.get("done"):
                return int(progress["resource"]["generation"])
            params["rewriteToken"] = progress["rewriteToken"]

    def delete(self, bucket: str, name: str) -> None:
        self._call("DELETE", self._object_url(bucket, name), missing_ok=True)

    def set_metadata(self, bucket: str, name: str, custom_metadata: dict[str, str]) -> bool:
        """Set these keys of an existing object's custom metadata (objects.patch: its content and generation stay
        as they are); False when there is no such object, which is never created by this."""
        if problems := metadata_problems(custom_metadata):
            raise StorageError(f"custom metadata of gs://{bucket}/{name} is too large: {'; '.join(problems)}", 400)
        patched = self._call(
            "PATCH",
            self._object_url(bucket, name),
            missing_ok=True,
            params={"fields": "name"},
            json={"metadata": custom_metadata},
        )
        return patched is not None

    def objects_under(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        """(name, size) of each object whose name starts with `prefix`, page by page as they are consumed
        (nothing for a missing bucket); StorageError when the listing is refused (403)."""
        url = f"{self._base}/storage/v1/b/{quote(bucket, safe='')}/o"
        params: dict[str, Any] = {"prefix": prefix, "maxResults": 100, "fields": "items(name,size),nextPageToken"}
        while True:
            response = self._call("GET", url, missing_ok=True, params=params)
            listing = response.json() if response is not None else {}
            yield from ((item["name"], int(item.get("size", 0))) for item in listing.get("items", []))
            if not listing.get("nextPageToken"):
                return
            params["pageToken"] = listing["nextPageToken"]

    def listing(self, bucket: str, prefix: str) -> Iterator[ListedObject]:
        """Each object whose name starts with `prefix`, with its generation, CRC32C and update time (objects.list's
        resource fields: cloud.google.com/storage/docs/json_api/v1/objects#resource), page by page as they are
        consumed; nothing for a missing bucket; StorageError when the listing is refused."""
        url = f"{self._base}/storage/v1/b/{quote(bucket, safe='')}/o"
        fields = "items(name,size,generation,crc32c,updated),nextPageToken"
        params: dict[str, Any] = {"prefix": prefix, "maxResults": 1000, "fields": fields}
        while True:
            response = self._call("GET", url, missing_ok=True, params=params)
            page = response.json() if response is not None else {}
            for item in page.get("items", []):
                yield ListedObject(
                    item["name"],
                    int(item.get("size", 0)),
                    int(item.get("generation", 0)),
                    str(item.get("crc32c", "")),
                    str(item.get("updated", "")),
                )
            if not page.get("nextPageToken"):
                return
            params["pageToken"] = page["nextPageToken"]

    def any_under(self, bucket: str, prefix: str) -> bool:
        """Whether any object's name starts with `prefix` (False for a missing bucket)."""
        return next(self.objects_under(bucket, prefix), None) is not None

    def metadata_under(self, bucket: str, prefix: str, start_offset: str = "") -> Iterator[tuple[str, dict[str, str]]]:
        """(name, custom metadata) of each object under `prefix` whose name sorts at or after `start_offset`,
        1,000 to a page: a listing carries each object's metadata, so no object is read."""
        url = f"{self._base}/storage/v1/b/{quote(bucket, safe='')}/o"
        params: dict[str, Any] = {"prefix": prefix, "maxResults": 1000, "fields": "items(name,metadata),nextPageToken"}
        if start_offset:
            params["startOffset"] = start_offset
        while True:
            listing = self._call("GET", url, params=params).json()
            yield from ((item["name"], item.get("metadata") or {}) for item in listing.get("items", []))
            if not listing.get("nextPageToken"):
                return
            params["pageToken"] = listing["nextPageToken"]

    def names(self, bucket: str, prefix: str) -> list[str]:
        url = f"{self._base}/storage/v1/b/{quote(bucket, safe='')}/o"
        params: dict[str, Any] = {"prefix": prefix, "fields": "items(name),nextPageToken"}
        names: list[str] = []
        while True:
            listing = self._call("GET", url, params=params).json()
            names += [item["name"] for item in listing.get("items", [])]
            if not listing.get("nextPageToken"):
                return names
            params["pageToken"] = listing["nextPageToken"]


def metadata_problems(metadata: dict[str, str]) -> list[str]:
    """How custom metadata breaks Cloud Storage's limits; [] when it is within them."""
    problems = []
    for key, value in metadata.items():
        if (size := len(key.encode())) > MAX_METADATA_KEY_BYTES:
            problems.append(f"key {key[:40]!r} is {size} bytes, over {MAX_METADATA_KEY_BYTES}")
        if (size := len(value.encode())) > MAX_METADATA_VALUE_BYTES:
            problems.append(f"the value of {key[:40]!r} is {size} bytes, over {MAX_METADATA_VALUE_BYTES}")
    total = sum(len(key.encode()) + len(value.encode()) for key, value in metadata.items())
    if total > MAX_METADATA_TOTAL_BYTES:
        problems.append(f"keys and values total {total} bytes, over {MAX_METADATA_TOTAL_BYTES}")
    return problems


def _stated_hashes(header: str) -> dict[str, str]:
    """x-goog-hash (`crc32c=<base64>,md5=<base64>`, md5 absent for composite objects) as {"crc32c": …, "md5": …}."""
    pairs = (item.strip().split("=", 1) for item in header.split(",") if "=" in item)
    return {key: value for key, value in pairs}


def _bounded_body(response: Any, uri: str, max_bytes: int) -> bytes:
    """The body of a streamed download, or TooLarge as soon as it is known to exceed `max_bytes`: from the size
    Cloud Storage states (x-goog-stored-content-length, the object's size whatever the transfer encoding), else
    from the bytes received."""
    stated = response.headers.get("x-goog-stored-content-length") or response.headers.get("content-length")
    if stated is not None and stated.isdigit() and int(stated) > max_bytes:
        raise TooLarge(uri, max_bytes, int(stated))
    chunks, received = [], 0
    for chunk in response.iter_content(chunk_size=64 * 1024):
        chunks.append(chunk)
        received += len(chunk)
        if received > max_bytes:
            raise TooLarge(uri, max_bytes)
    return b"".join(chunks)
