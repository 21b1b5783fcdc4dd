"""Checkpoints that survive preemption. Each one is a folder `step-NNNNNNNNN/` holding `state.pt` and a commit
marker `COMMITTED` written last; the marker records the size and SHA-256 of `state.pt`. A folder without a
marker, or whose state does not match its marker, never counts: resuming skips it with a log line and takes
the next older one. Rank 0 writes (DDP replicas are identical); the last `keep` committed ones are kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time

import torch

from trainer import logs
from trainer.storage import open_folder

STATE = "state.pt"
MARKER = "COMMITTED"
_STEP_FOLDER = re.compile(r"step-(\d{9})")


def _folder(step: int) -> str:
    return f"step-{step:09d}"


class Checkpoints:
    def __init__(self, uri: str, keep: int = 3):
        if keep < 1:
            raise ValueError(f"--keep-checkpoints must be at least 1, got {keep}")
        self.uri = uri
        self.folder = open_folder(uri)
        self.keep = keep

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
        started = time.monotonic()
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        self.folder.write_bytes(f"{_folder(step)}/{STATE}", data)
        marker = {"step": step, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "time": time.time()}
        self.folder.write_bytes(f"{_folder(step)}/{MARKER}", json.dumps(marker).encode())
        logs.log(
            "checkpoint committed",
            step=step,
            bytes=len(data),
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
