"""Where the trainer reads and writes: a local folder (which includes Vertex's `/gcs/…` FUSE mount) or a
`gs://bucket/prefix` folder written through google-cloud-storage. Both offer the same few operations on
names relative to the folder, so checkpoints and outputs do not care which one they got. `open_writer` streams
a large file in (a checkpoint) without holding it in memory; on Cloud Storage it uploads over several streams.

With `STORAGE_EMULATOR_HOST` set (the local stack's fake-gcs-server), the client talks to the emulator with
anonymous credentials.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from trainer.storage.gcs_composite import CompositeWriter


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """`gs://bucket/a/b` → (`bucket`, `a/b`)."""
    if not is_gcs(uri):
        raise ValueError(f"{uri!r} is not a gs:// URI")
    bucket, _, path = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket; expected gs://BUCKET/PATH")
    return bucket, path


@functools.cache
def gcs_client():
    import google.cloud.storage as storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(
            project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local"), credentials=AnonymousCredentials()
        )
    return storage.Client()


class LocalFolder:
    def __init__(self, path: str | Path):
        self.root = Path(path)

    def uri(self, name: str = "") -> str:
        return str(self.root / name) if name else str(self.root)

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.open_writer(name) as file:
            file.write(data)

    @contextlib.contextmanager
    def open_writer(self, name: str) -> Iterator[BinaryIO]:
        """A file to write `name` through; it appears whole when the block ends, and not at all on an error."""
        # Write beside, then rename: a reader never sees half a file.
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False)  # noqa: SIM115
        try:
            with tmp:
                yield tmp  # type: ignore[misc]
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp.name, target)
        except BaseException:
            Path(tmp.name).unlink(missing_ok=True)
            raise

    def read_bytes(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def read_at_most(self, name: str, limit: int) -> bytes:
        with (self.root / name).open("rb") as file:
            return _within(file.read(limit + 1), limit, self.uri(name))

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def list(self, prefix: str = "") -> list[str]:
        """Every file below the folder whose relative name starts with `prefix`, sorted."""
        if not self.root.is_dir():
            return []
        names = (p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
        return sorted(n for n in names if n.startswith(prefix))

    def delete(self, name: str) -> None:
        path = self.root / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


class GcsFolder:
    def __init__(self, uri: str):
        self.bucket_name, prefix = split_gcs_uri(uri)
        self.prefix = prefix.strip("/")

    @functools.cached_property
    def bucket(self):
        return gcs_client().bucket(self.bucket_name)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def uri(self, name: str = "") -> str:
        key = self._key(name) if name else self.prefix
        return f"gs://{self.bucket_name}/{key}"

    def write_bytes(self, name: str, data: bytes) -> None:
        # A Cloud Storage object appears whole or not at all.
        self.bucket.blob(self._key(name)).upload_from_string(data)

    @contextlib.contextmanager
    def open_writer(self, name: str, part_bytes: int | None = None) -> Iterator[CompositeWriter]:
        """A writer for the object `name`, uploaded in parts over several streams as it is written (a parallel
        composite upload); the object appears when the block ends, and not at all on an error."""
        writer = CompositeWriter(self.bucket, self._key(name), **({"part_bytes": part_bytes} if part_bytes else {}))
        try:
            yield writer
        except BaseException:
            writer.abort()
            raise
        writer.commit()

    def read_bytes(self, name: str) -> bytes:
        return self.bucket.blob(self._key(name)).download_as_bytes()

    def read_at_most(self, name: str, limit: int) -> bytes:
        # A ranged read (`end` is inclusive): a larger object costs one byte more than the limit, never its size.
        return _within(self.bucket.blob(self._key(name)).download_as_bytes(start=0, end=limit), limit, self.uri(name))

    def exists(self, name: str) -> bool:
        return self.bucket.blob(self._key(name)).exists()

    def list(self, prefix: str = "") -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        blobs = gcs_client().list_blobs(self.bucket_name, prefix=base + prefix)
        return sorted(b.name[len(base) :] for b in blobs if not b.name.endswith("/"))

    def delete(self, name: str) -> None:
        """Delete one object, or every object below `name/`."""
        from google.api_core.exceptions import NotFound

        for key in [self._key(name), *(self._key(n) for n in self.list(name.rstrip("/") + "/"))]:
            with contextlib.suppress(NotFound):
                self.bucket.blob(key).delete()


def _within(data: bytes, limit: int, uri: str) -> bytes:
    """`data`, read as `limit + 1` bytes at most, when the file it came from holds no more than `limit` bytes."""
    if len(data) > limit:
        raise ValueError(f"{uri} is larger than the {limit:,} bytes this reader accepts")
    return data


def open_folder(uri: str) -> LocalFolder | GcsFolder:
    return GcsFolder(uri) if is_gcs(uri) else LocalFolder(uri)


def is_file(uri: str) -> bool:
    """True when `uri` names one file or object (not a folder or prefix)."""
    if is_gcs(uri):
        bucket, key = split_gcs_uri(uri)
        return bool(key) and not key.endswith("/") and gcs_client().bucket(bucket).blob(key).exists()
    return Path(uri).is_file()


def read_uri(uri: str) -> bytes:
    if is_gcs(uri):
        bucket, key = split_gcs_uri(uri)
        return gcs_client().bucket(bucket).blob(key).download_as_bytes()
    return Path(uri).read_bytes()


def write_uri(uri: str, data: bytes) -> None:
    parent, _, name = uri.rstrip("/").rpartition("/")
    open_folder(parent or ".").write_bytes(name, data)


def size_of(uri: str) -> int:
    """The stored size of one file or object, in bytes (what the memory budget is estimated from)."""
    if is_gcs(uri):
        bucket, key = split_gcs_uri(uri)
        blob = gcs_client().bucket(bucket).get_blob(key)
        return int(blob.size) if blob is not None and blob.size is not None else 0
    return Path(uri).stat().st_size


def download_to(uri: str, path: Path) -> None:
    """Copy an object to a node-local file without holding it in memory (streamed data)."""
    bucket, key = split_gcs_uri(uri)
    gcs_client().bucket(bucket).blob(key).download_to_filename(str(path))
