"""Ending a node whose run is already over. When a rank dies after every rank passed the last barrier (killed,
or aborted while the process tears down), its node's torchrun restarts the worker group and waits at the
rendezvous for nodes whose workers have already succeeded — and those wait in torchrun's exit barrier (300 s)
for it: both launchers hang though the model is written (seen in the two-node kill test). The launcher
therefore watches the progress record (trainer/outputs/progress.py): once it says `finished` (written after the outputs,
before the last barrier) and this node is still running `grace` seconds later, the launcher exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from trainer import logs
from trainer.outputs.progress import PROGRESS_FILE
from trainer.storage.folders import open_folder

GRACE_SECONDS = 45.0
POLL_SECONDS = 5.0


def checkpoint_dir(train_args: list[str], env: dict[str, str]) -> str:
    """Where trainer.train will write progress.json: its --checkpoint-dir, as trainer/flags.py defaults it."""
    for i, arg in enumerate(train_args):
        if arg == "--checkpoint-dir" and i + 1 < len(train_args):
            return train_args[i + 1]
        if arg.startswith("--checkpoint-dir="):
            return arg.split("=", 1)[1]
    return env.get("AIP_CHECKPOINT_DIR") or "trainer_output/checkpoints"


def finished_at(folder_uri: str) -> float | None:
    """The `time` of a progress record that says `finished`, else None."""
    try:
        record = json.loads(open_folder(folder_uri).read_bytes(PROGRESS_FILE))
    except Exception:  # not written yet, or unreadable for now: not finished as far as anyone can tell
        return None
    return record.get("time") if record.get("state") == "finished" else None


def watch(folder_uri: str, grace: float = GRACE_SECONDS, poll: float = POLL_SECONDS) -> threading.Thread:
    """Start the watch in a daemon thread; it ends the process `grace` seconds after the run finished."""
    earlier = finished_at(folder_uri)  # a record left by an earlier run into the same folder does not count

    def run() -> None:
        seen_at = None
        while True:
            time.sleep(poll)
            if seen_at is None and finished_at(folder_uri) not in (None, earlier):
                seen_at = time.monotonic()
            if seen_at is not None and time.monotonic() - seen_at >= grace:
                logs.warning("training finished, but this node is still waiting for others; ending it",
                             seconds_since_finished=round(time.monotonic() - seen_at))  # fmt: skip
                sys.stdout.flush()
                os._exit(0)

    thread = threading.Thread(target=run, name="finished-watch", daemon=True)
    thread.start()
    return thread
