"""Checkpoints that survive preemption. Each one is a folder `step-NNNNNNNNN/` holding `state.pt` and a commit
marker `COMMITTED` written last; the marker records the size and SHA-256 of `state.pt`. A folder without a
marker, or whose state does not match its marker, never counts: resuming skips it with a log line and takes
the next older one. Rank 0 writes (DDP replicas are identical); the last `keep` committed ones are kept.

Saving fits a Spot VM's 30 s notice: `start_save` copies the state once into CPU memory
(trainer/checkpoints/snapshot.py) and returns, so training goes on while a background thread streams the copy to
storage (serialised straight into the file, or into the multi-stream Cloud Storage upload, which holds at most its
parts in flight — not a second copy of the state), then writes the marker.
At most one upload is in flight: the next `start_save` first waits for the previous one, and `wait` is called
before the process ends (the last step, SIGTERM). A background thread rather than torch.distributed.checkpoint's
`async_save`: DCP writes a folder of per-rank files committed by its own `.metadata` and reaches gs:// only
through fsspec, while this keeps the one-file checkpoint with a checked marker, the storage helper (local,
/gcs, gs:// over several streams), and older checkpoints resumable; rank 0 alone writes because DDP replicas
are identical. The thread's work (writing, hashing, HTTP) runs mostly outside the GIL.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, cast

import torch

from trainer import logs
from trainer.checkpoints.snapshot import Snapshots
from trainer.storage.folders import open_folder

STATE = "state.pt"
MARKER = "COMMITTED"
_STEP_FOLDER = re.compile(r"step-(\d{9})")


def _folder(step: int) -> str:
    return f"step-{step:09d}"


class _HashingWriter:
    """Passes bytes on to `sink`, counting them and hashing them for the commit marker. torch.save reports a
    failed write only as "unexpected pos"; the sink's own error is kept in `failure` to say what happened."""

    def __init__(self, sink) -> None:
        self.sink, self.bytes, self.sha256 = sink, 0, hashlib.sha256()
        self.failure: BaseException | None = None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha256.update(view)
        try:
            self.sink.write(view)
        except BaseException as e:
            self.failure = e
            raise
        self.bytes += len(view)
        return len(view)

    def flush(self) -> None:
        self.sink.flush()


class Checkpoints:
    def __init__(self, uri: str, keep: int = 3):
        if keep < 1:
            raise ValueError(f"--keep-checkpoints must be at least 1, got {keep}")
        self.uri = uri
        self.folder = open_folder(uri)
        self.keep = keep
        self._snapshots = Snapshots()
        self._uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-upload")
        self._upload: Future | None = None

    def _steps(self) -> tuple[list[int], list[int]]:
        """(committed, uncommitted) steps found in the folder, oldest first."""
        files: dict[int, set[str]] = {}
        for name in self.folder.list():
            head, _, tail = name.partition("/")
            match = _STEP_FOLDER.fullmatch(head)
            if match and tail:
                files.setdefault(int(match.group(1)), set()).add(tail)
        committed = sorted(s for s, names in files.items() if MARKER in names)
        uncommitted = sorted(s for s, names in files.items() if MARKER not in names)
        return committed, uncommitted

    def save(self, step: int, state: dict) -> None:
        """Save and wait until the checkpoint is committed."""
        self.start_save(step, state)
        self.wait()

    def start_save(self, step: int, state: dict) -> None:
        """Wait for the previous upload, copy `state`, and upload the copy in the background; training may
        change `state` as soon as this returns."""
        self.wait()
        started = time.monotonic()
        snapshot = self._snapshots.take(state)
        logs.log("checkpoint snapshot taken", step=step, seconds=round(time.monotonic() - started, 3))
        self._upload = self._uploader.submit(self._write, step, snapshot, started)

    def wait(self) -> None:
        """Block until the upload in flight, if any, is committed; raise its error if it failed (the checkpoint
        before it is then still the newest committed one)."""
        upload, self._upload = self._upload, None
        if upload is not None:
            upload.result()

    def _write(self, step: int, snapshot: dict, started: float) -> None:
        try:
            with self.folder.open_writer(f"{_folder(step)}/{STATE}") as sink:
                data = _HashingWriter(sink)
                try:
                    torch.save(snapshot, cast(IO[bytes], data))  # it needs only write() and flush()
                except Exception:
                    if data.failure is not None:
                        raise data.failure from None
                    raise
            # The marker last: until it exists, the state above does not count.
            marker = {"step": step, "bytes": data.bytes, "sha256": data.sha256.hexdigest(), "time": time.time()}
            self.folder.write_bytes(f"{_folder(step)}/{MARKER}", json.dumps(marker).encode())
        except Exception as e:
            logs.error(f"checkpoint upload failed: {type(e).__name__}: {e}", step=step, uri=self.folder.uri())
            raise
        logs.log(
            "checkpoint committed",
            step=step,
            bytes=data.bytes,
            uri=self.folder.uri(_folder(step)),
            seconds=round(time.monotonic() - started, 3),
        )
        self._prune(step)

    def _prune(self, newest: int) -> None:
        committed, uncommitted = self._steps()
        for step in committed[: -self.keep]:
            # Marker first: a half-deleted checkpoint must never look committed.
            self.folder.delete(f"{_folder(step)}/{MARKER}")
            self.folder.delete(_folder(step))
        for step in uncommitted:
            if step < newest:  # left behind by an interrupted save
                self.folder.delete(_folder(step))

    def load(self, step: int) -> dict:
        """The state saved at `step`, checked against its marker; raises ValueError when it does not match."""
        try:
            marker = json.loads(self.folder.read_bytes(f"{_folder(step)}/{MARKER}"))
            data = self.folder.read_bytes(f"{_folder(step)}/{STATE}")
        except Exception as e:  # OSError, bad JSON, or google.api_core NotFound for a missing object
            raise ValueError(f"unreadable: {e}") from e
        if len(data) != marker.get("bytes") or hashlib.sha256(data).hexdigest() != marker.get("sha256"):
            raise ValueError(f"{STATE} has {len(data)} bytes that do not match its commit marker")
        try:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:
            raise ValueError(f"{STATE} does not load: {e}") from e

    def latest(self) -> tuple[int, dict] | None:
        """The newest committed checkpoint that loads, or None; logs every newer one it passes over and why."""
        committed, uncommitted = self._steps()
        for step in sorted([*committed, *uncommitted], reverse=True):
            uri = self.folder.uri(_folder(step))
            if step in uncommitted:
                logs.warning("skipping uncommitted checkpoint (no commit marker)", step=step, uri=uri)
                continue
            try:
                return step, self.load(step)
            except ValueError as e:
                logs.warning("skipping corrupt checkpoint", step=step, uri=uri, reason=str(e))
        return None
