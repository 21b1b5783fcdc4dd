"""The BatchPredictionJobs the local JobService knows, one JSON file each under `--state-dir` as
`batch_prediction_jobs/<job id>.json`, so that a restarted JobService still lists them (as the job store keeps
CustomJobs). Ids are numeric and increasing, like Vertex's; a listing's page token is the last id returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from google.cloud.aiplatform_v1.types import BatchPredictionJob

from local.jobservice.store import write_atomically


def _copy(job: BatchPredictionJob) -> BatchPredictionJob:
    return BatchPredictionJob.deserialize(BatchPredictionJob.serialize(job))


def job_number(name: str) -> int:
    return int(name.rsplit("/", 1)[1])


class BatchJobStore:
    """Jobs by name in memory, each change written through; with no state_dir, nothing is written (unit tests)."""

    def __init__(self, state_dir: Path | None = None):
        self.folder = state_dir / "batch_prediction_jobs" if state_dir is not None else None
        self._lock = threading.Lock()
        self._jobs: dict[str, BatchPredictionJob] = {}
        self._last_id = 0
        for path in sorted(self.folder.glob("*.json")) if self.folder is not None else []:
            job = BatchPredictionJob.from_json(path.read_text(), ignore_unknown_fields=True)
            self._jobs[job.name] = job
            self._last_id = max(self._last_id, job_number(job.name))

    def new_id(self) -> str:
        with self._lock:
            self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
            return str(self._last_id)

    def add(self, job: BatchPredictionJob) -> BatchPredictionJob:
        with self._lock:
            self._jobs[job.name] = _copy(job)
            self._persist(job)
            return _copy(job)

    def get(self, name: str) -> BatchPredictionJob | None:
        with self._lock:
            job = self._jobs.get(name)
            return _copy(job) if job is not None else None

    def update(self, name: str, change: Callable[[BatchPredictionJob], None]) -> BatchPredictionJob:
        """Apply `change` to the stored job and write it; a copy of the result."""
        with self._lock:
            job = self._jobs[name]
            change(job)
            self._persist(job)
            return _copy(job)

    def jobs(self, parent: str = "") -> list[BatchPredictionJob]:
        """The jobs under `parent` (every job when empty), oldest first."""
        under = f"{parent}/batchPredictionJobs/" if parent else ""
        with self._lock:
            found = [job for job in self._jobs.values() if job.name.startswith(under)]
            return [_copy(job) for job in sorted(found, key=lambda job: job_number(job.name))]

    def delete(self, name: str) -> None:
        with self._lock:
            self._jobs.pop(name, None)
            if self.folder is not None:
                (self.folder / f"{job_number(name)}.json").unlink(missing_ok=True)

    def _persist(self, job: BatchPredictionJob) -> None:
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomically(self.folder / f"{job_number(job.name)}.json", BatchPredictionJob.to_json(job, indent=1))
