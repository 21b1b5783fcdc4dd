"""Vertex's wait for GPU quota: a job whose GPUs, with those of the admitted (PENDING, RUNNING, CANCELLING)
jobs on the same quota metric in its region, exceed the capacity model's limit stays in JOB_STATE_QUEUED,
and waiting jobs leave the queue in creation order as others end (reference/apis.md §3 "Short quota").

The model can be replaced at any time (JobServiceControl.set_capacity); every change of it, and every job
state change, wakes the waiting jobs to look again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

from google.cloud.aiplatform_v1.types import CustomJob, JobState

from local.jobservice.capacity import CapacityModel
from local.jobservice.reservations import reserved_vms
from local.jobservice.store import JobStore
from schemas.catalog import quota_metric

HOLDING_STATES = frozenset({JobState.JOB_STATE_PENDING, JobState.JOB_STATE_RUNNING, JobState.JOB_STATE_CANCELLING})


def region_of(name: str) -> str:
    """The location in a job's resource name (projects/P/locations/REGION/customJobs/ID) or its parent."""
    return name.split("/")[3]


def gpu_demand(job: CustomJob) -> dict[str, int]:
    """GPUs per quota metric: accelerator_count × replica_count over the worker pools that have GPUs."""
    strategy = job.job_spec.scheduling.strategy.name
    demand: dict[str, int] = {}
    for pool in job.job_spec.worker_pool_specs:
        spec = pool.machine_spec
        if spec.accelerator_count and spec.accelerator_type:
            metric = quota_metric(spec.accelerator_type.name, strategy)
            demand[metric] = demand.get(metric, 0) + spec.accelerator_count * pool.replica_count
    return demand | reserved_vms(job)  # and the VMs it takes of a reservation, which wait for it alike


class PoolSource(Protocol):
    """The persistent resources (persistent_resources.py): what a job on one needs of its pools, their free
    replicas, and the GPUs the resources hold against the quota."""

    def job_demand(self, job: CustomJob) -> dict[str, int]: ...

    def pool_limits(self) -> dict[str, int]: ...

    def gpus_held(self, parent: str) -> dict[str, int]: ...


class QuotaQueue:
    def __init__(self, store: JobStore, model: CapacityModel | None = None):
        self._store = store
        self._model = model or CapacityModel()
        # A job on a persistent resource waits for its pools' replicas instead of GPU quota; the resources' GPUs
        # count against the quota while they exist. None: no resources (unit tests of the queue alone).
        self.pools: PoolSource | None = None
        self._lock = threading.RLock()
        self._waiting: dict[str, queue.Queue[tuple]] = {}  # job name → its supervisor's event queue

    @property
    def model(self) -> CapacityModel:
        return self._model

    def set_model(self, model: CapacityModel) -> None:
        with self._lock:
            self._model = model
        self.wake()

    def wait(self, name: str, events: queue.Queue[tuple]) -> None:
        """Count `name` among the waiting jobs; its supervisor gets ("capacity",) whenever it may look again."""
        with self._lock:
            self._waiting[name] = events

    def leave(self, name: str) -> None:
        with self._lock:
            self._waiting.pop(name, None)

    def wake(self, _job: CustomJob | None = None) -> None:
        """A transition hook: something that may free quota happened."""
        with self._lock:
            waiting = list(self._waiting.values())
        for events in waiting:
            events.put(("capacity",))

    def demand(self, job: CustomJob) -> Mapping[str, int]:
        """What the job waits for: its pools' replicas on a persistent resource, else its GPUs per quota metric."""
        if self.pools is not None and job.job_spec.persistent_resource_id:
            return self.pools.job_demand(job)
        return gpu_demand(job)

    def try_admit(self, name: str, admit: Callable[[], None]) -> bool:
        """Run `admit` (the move to PENDING) and return True when the job fits now; under the queue's lock,
        so two jobs never both take the last GPUs."""
        with self._lock:
            job = self._store.require(name)
            region, demand = region_of(name), self.demand(job)
            limits = self.pools.pool_limits() if self.pools is not None else {}
            if not any(metric in limits or self._model.limit(region, metric) is not None for metric in demand):
                admit()
                return True
            parent = name.rsplit("/customJobs/", 1)[0]
            held: dict[str, int] = dict(self.pools.gpus_held(parent)) if self.pools is not None else {}
            waiting_before: list[Mapping[str, int]] = []
            order = (job.create_time, int(name.rsplit("/", 1)[-1]))
            for other in self._store.jobs(parent):
                if other.name == name:
                    continue
                if other.state in HOLDING_STATES:
                    for metric, gpus in self.demand(other).items():
                        held[metric] = held.get(metric, 0) + gpus
                elif other.name in self._waiting and (other.create_time, int(other.name.rsplit("/", 1)[-1])) < order:
                    waiting_before.append(self.demand(other))
            if not self._model.admits(region, demand, held, waiting_before, limits):
                return False
            admit()
            return True
