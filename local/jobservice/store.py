"""The JobService's memory: every CustomJob and, for jobs that run, which replica processes run them.

Everything is kept in `--state-dir` so that a restarted server knows its jobs and can adopt replicas
that kept running while it was down. Layout, one folder per job (`jobs/<job id>/`):
`job.json` (the CustomJob, proto JSON), `run.json` (attempt, ports, replica pids), `logs/<replica>.log`,
`exits/attempt-<n>/<replica>.exit` (exit status, written by the node agent).
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.cloud.aiplatform_v1.types import CustomJob

from local.jobservice.vertex_retries import RetryCounts


@dataclass
class ReplicaRecord:
    name: str  # workerpool<i>-<j>, as Vertex names nodes
    pid: int
    exit_file: str


@dataclass
class RunRecord:
    """How a job is being run right now; rewritten at each step so a restarted server can carry on."""

    attempt: int = 0
    master_port: int = 0
    replicas: list[ReplicaRecord] = field(default_factory=list)
    queued_until: float = 0.0  # wall-clock seconds; a fault may hold the job in QUEUED until then
    pending_hold: float = 0.0  # seconds a fault holds the job in PENDING, counted from entering it
    pending_until: float = 0.0  # wall-clock seconds, set on entering PENDING
    quota_failure: bool = False  # a fault: the job fails for quota instead of leaving QUEUED
    stockouts: int = 0  # a fault or the capacity model: provisioning attempts still to meet a stockout
    preempt_after: float = 0.0  # the capacity model: seconds after each start at which the nodes are preempted
    retries: RetryCounts = field(default_factory=RetryCounts)  # Vertex's own restarts so far
    parked: bool = False  # stored QUEUED with nothing to run it, until cancelled (JobExecutor.park)

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        data["replicas"] = [ReplicaRecord(**replica) for replica in data.get("replicas", [])]
        data["retries"] = RetryCounts(**data.get("retries", {}))
        return cls(**data)


def job_id_of(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _copy(job: CustomJob) -> CustomJob:
    return CustomJob.deserialize(CustomJob.serialize(job))


class JobStore:
    def __init__(self, state_dir: Path):
        self.jobs_dir = state_dir / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._jobs: dict[str, CustomJob] = {}
        # Every job's numeric id, in order, and its name: a page of a listing starts after its token's id.
        self._ids: list[int] = []
        self._names: dict[int, str] = {}
        self._last_id = 0
        for job_file in self.jobs_dir.glob("*/job.json"):
            self._remember(CustomJob.from_json(job_file.read_text(), ignore_unknown_fields=True))

    def new_job_id(self) -> str:
        """Numeric and increasing, like Vertex's ids (resource.labels.job_id in the logs is numeric)."""
        with self._lock:
            self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
            return str(self._last_id)

    def job_dir(self, name: str) -> Path:
        return self.jobs_dir / job_id_of(name)

    def log_dir(self, name: str) -> Path:
        return self.job_dir(name) / "logs"

    def add(self, job: CustomJob) -> CustomJob:
        with self._lock:
            self.job_dir(job.name).mkdir(parents=True, exist_ok=True)
            self._remember(_copy(job))
            self._persist(job)
            return _copy(job)

    def _remember(self, job: CustomJob) -> None:
        number = int(job_id_of(job.name))
        if job.name not in self._jobs:
            bisect.insort(self._ids, number)
            self._names[number] = job.name
        self._jobs[job.name] = job
        self._last_id = max(self._last_id, number)

    def require(self, name: str) -> CustomJob:
        """A job known to exist (jobs are deleted only once they have ended)."""
        job = self.get(name)
        if job is None:
            raise KeyError(f"no job {name}")
        return job

    def get(self, name: str) -> CustomJob | None:
        with self._lock:
            job = self._jobs.get(name)
            return _copy(job) if job is not None else None

    def update(self, name: str, change: Callable[[CustomJob], None]) -> CustomJob:
        """Apply `change` to the stored job and persist it; returns a copy of the result."""
        with self._lock:
            job = self._jobs[name]
            change(job)
            self._persist(job)
            return _copy(job)

    def jobs(self, parent: str = "") -> list[CustomJob]:
        """Jobs under `parent` (all when empty), oldest first."""
        with self._lock:
            names = (self._names[number] for number in self._ids)
            return [_copy(self._jobs[name]) for name in names if name.startswith(f"{parent}/" if parent else "")]

    def page(
        self,
        parent: str,
        matches: Callable[[CustomJob], bool],
        after: int,
        size: int,
        copy: Callable[[CustomJob], CustomJob] | None = None,
    ) -> tuple[list[CustomJob], bool]:
        """Up to `size` jobs under `parent` that `matches`, oldest first, of those whose id is above `after`, each
        through `copy` (a whole copy by default); and whether more follow. Only the jobs after the token are looked
        at, and only the page's copied."""
        with self._lock:  # the jobs as they stand; a listing, like Vertex's, is no transaction
            after_token = self._ids[bisect.bisect_right(self._ids, after) :]
        page: list[CustomJob] = []
        for number in after_token:
            job = self._jobs.get(self._names.get(number, ""))
            if job is not None and job.name.startswith(f"{parent}/") and matches(job):
                if len(page) == size:
                    return page, True
                page.append((copy or _copy)(job))
        return page, False

    def delete(self, name: str) -> None:
        """Forget the job; its logs stay on disk, as Cloud Logging keeps a deleted job's logs."""
        with self._lock:
            if self._jobs.pop(name, None) is not None:
                number = int(job_id_of(name))
                self._ids.remove(number)
                del self._names[number]
            for record in ("job.json", "run.json"):
                (self.job_dir(name) / record).unlink(missing_ok=True)

    def save_run(self, name: str, run: RunRecord) -> None:
        write_atomically(self.job_dir(name) / "run.json", json.dumps(asdict(run), indent=1))

    def load_run(self, name: str) -> RunRecord:
        path = self.job_dir(name) / "run.json"
        return RunRecord.from_json(path.read_text()) if path.exists() else RunRecord()

    def _persist(self, job: CustomJob) -> None:
        write_atomically(self.job_dir(job.name) / "job.json", CustomJob.to_json(job, indent=1))
