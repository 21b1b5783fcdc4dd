"""A heartbeat a controller can read: rank 0 rewrites `progress.json` in the checkpoint folder as training
advances, so a job that Vertex shows RUNNING but that no longer trains (a collective stuck forever, as NCCL
hangs are) can be told from one that does.

Path: `<--checkpoint-dir>/progress.json`, which on Vertex is `$AIP_CHECKPOINT_DIR/progress.json`, that is
`<base_output_directory>/checkpoints/progress.json`. Shape (one JSON object):

    {"step": 120, "total_steps": 400, "epoch": 2, "time": 1795000000.123, "attempt": 0, "state": "training"}

`time` is the writer's Unix time in seconds when `step` was reached; `attempt` is torchrun's restart count;
`state` is `starting` (before the first step), `training`, or `finished`. It is written at the start of the
loop, then at most every `--progress-every-seconds` (default 60) while steps complete, and at the end: a record
older than a few of those intervals on a RUNNING job means the job has stopped training. Writing is best
effort: a failed write is logged and training goes on.
"""

from __future__ import annotations

import json
import os
import time

from trainer import logs
from trainer.storage.folders import open_folder

PROGRESS_FILE = "progress.json"


class ProgressRecord:
    def __init__(self, checkpoint_dir: str, every_seconds: float, total_steps: int, enabled: bool):
        self.folder = open_folder(checkpoint_dir) if enabled else None
        self.every_seconds, self.total_steps = every_seconds, total_steps
        self.last_written = float("-inf")

    def write(self, step: int, epoch: int, state: str = "training", force: bool = False) -> None:
        now = time.monotonic()
        if self.folder is None or (not force and now - self.last_written < self.every_seconds):
            return
        self.last_written = now
        record = {
            "step": step,
            "total_steps": self.total_steps,
            "epoch": epoch,
            "time": round(time.time(), 3),
            "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "state": state,
        }
        try:
            self.folder.write_bytes(PROGRESS_FILE, (json.dumps(record) + "\n").encode())
        except Exception as e:  # a heartbeat must never stop training
            logs.warning(f"could not write {PROGRESS_FILE}: {type(e).__name__}: {e}", step=step)
