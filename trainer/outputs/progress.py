"""A heartbeat a controller can read: rank 0 rewrites `progress.json` in the checkpoint folder as training
advances, so a job that Vertex shows RUNNING but that no longer trains (a collective stuck forever, as NCCL
hangs are) can be told from one that does.

Path: `<--checkpoint-dir>/progress.json`, which on Vertex is `$AIP_CHECKPOINT_DIR/progress.json`, that is
`<base_output_directory>/checkpoints/progress.json`. Shape (one JSON object):

    {"step": 120, "total_steps": 400, "epoch": 2, "time": 1795000000.123, "attempt": 0, "state": "training",
     "job": "123", "started": 1794999900.5, "first_step": 1794999960.25, "steps_run": 140}

`time` is the writer's Unix time in seconds when `step` was reached; `attempt` is torchrun's restart count;
`state` is `starting` (before the first step), `training`, or `finished`. It is written at the start of the
loop, then at most every `--progress-every-seconds` (default 60) while steps complete, when a SIGTERM stops the
run, and at the end: a record older than a few of those intervals on a RUNNING job means the job has stopped
training. Writing is best effort: a failed write is logged and training goes on.

Time to first step and runtime goodput (issue 43): `job` is Vertex's job id (`CLOUD_ML_JOB_ID`, "" outside
Vertex); `started` is when this process started (Unix time); `first_step` when the job's first optimizer step
ended on rank 0 (null before it): a process restarted within the same job (torchrun's restart, Vertex's restart of
a preempted node) keeps the first one's, read back from the record it finds, while a new job starts its own.
`steps_run` counts every optimizer step run by every process that wrote this folder's record, across restarts,
resumes and attempts: a resumed run runs again the steps after its last checkpoint, so `steps_run` exceeds `step`
(the steps kept) by the work lost. Steps run after the last write of a process killed without SIGTERM are not
counted.
"""

from __future__ import annotations

import json
import os
import time

from trainer import logs
from trainer.storage.folders import open_folder

PROGRESS_FILE = "progress.json"


class ProgressRecord:
    def __init__(
        self, checkpoint_dir: str, every_seconds: float, total_steps: int, enabled: bool, process_started: float
    ):
        self.folder = open_folder(checkpoint_dir) if enabled else None
        self.every_seconds, self.total_steps = every_seconds, total_steps
        self.last_written = float("-inf")
        self.job = os.environ.get("CLOUD_ML_JOB_ID", "")
        self.started = round(process_started, 3)
        earlier = self._earlier()
        self.steps_run_before = _count(earlier.get("steps_run"))
        same_job = earlier.get("job") == self.job
        self.first_step: float | None = _time(earlier.get("first_step")) if same_job else None
        self.steps_run = 0  # by this process

    def _earlier(self) -> dict:
        """The record an earlier process of this run left in the folder ({} when none can be read)."""
        if self.folder is None:
            return {}
        try:
            if not self.folder.exists(PROGRESS_FILE):
                return {}
            found = json.loads(self.folder.read_at_most(PROGRESS_FILE, 64 * 1024))
        except Exception as e:  # an unreadable record only loses the earlier counts
            logs.warning(f"could not read the earlier {PROGRESS_FILE}: {type(e).__name__}: {e}")
            return {}
        return found if isinstance(found, dict) else {}

    def stepped(self, step: int, epoch: int) -> None:
        """An optimizer step ended (the first one's time is kept): counted, and the record written when due."""
        if self.first_step is None:
            self.first_step = round(time.time(), 3)
        self.steps_run += 1
        self.write(step, epoch)

    @property
    def total_steps_run(self) -> int:
        return self.steps_run_before + self.steps_run

    def figures(self) -> dict:
        """What metrics.json repeats of the record: the process's start, the first step, steps run and kept."""
        return {"process_started": self.started, "first_step": self.first_step, "steps_run": self.total_steps_run}

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
            "job": self.job,
            "started": self.started,
            "first_step": self.first_step,
            "steps_run": self.total_steps_run,
        }
        try:
            self.folder.write_bytes(PROGRESS_FILE, (json.dumps(record) + "\n").encode())
        except Exception as e:  # a heartbeat must never stop training
            logs.warning(f"could not write {PROGRESS_FILE}: {type(e).__name__}: {e}", step=step)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _time(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
