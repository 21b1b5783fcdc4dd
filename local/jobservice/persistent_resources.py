"""Vertex AI's PersistentResourceService on the local stack (issue 43, point 4; local/FIDELITY.md "Persistent
resources"), served on the JobService's REST port by persistent_rest.py, on the real aiplatform_v1 message types.

- CreatePersistentResource answers a long-running operation (`persistentResources/ID/operations/OP`, a numeric OP
  as gcloud reads it); the resource is PROVISIONING for the capacity model's `provisioning` delay of its first
  pool's machine (capacity.py), then RUNNING (`start_time` set, the operation done with the resource). Its IDs
  follow CreatePersistentResourceRequest's rule (`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`); one in use is
  ALREADY_EXISTS.
- Each pool needs a machine_spec with a known machine type (and a GPU it can take), and replica_count ≥ 1 or an
  autoscaling_spec with 0 < min_replica_count ≤ replica_count ≤ max_replica_count and min < max (ResourcePool's
  comments). `used_replica_count` is computed on every read: the replicas of the jobs on the pool that hold their
  machines (PENDING, RUNNING, CANCELLING).
- A resource's GPUs count against the capacity model's custom-training quota while it exists (every pool at its
  most replicas); the jobs on it draw on its pools' replicas instead, and wait QUEUED until enough are free.
- DeletePersistentResource cancels the jobs on the resource ("automatically cancelled before the persistent
  resource is deleted"), keeps it STOPPING until they have ended, then forgets it.
- A CustomJob naming `job_spec.persistent_resource_id` (same project and location) is refused unless each of its
  worker pools matches a resource pool exactly (machine type, accelerator, boot disk type) within its replicas, and
  its network and CMEK key are the resource's (job_problems).

Resources are kept in `--state-dir` as `persistent_resources/<project>/<location>/<id>.json` (with the time a
PROVISIONING one becomes RUNNING), so a restarted JobService knows them; operations live in memory, as the
EndpointService's do.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.aiplatform_v1.types import (
    CreatePersistentResourceOperationMetadata,
    CustomJob,
    DeleteOperationMetadata,
    JobState,
    ListPersistentResourcesResponse,
    MachineSpec,
    PersistentResource,
    ResourcePool,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from local.jobservice.model_listing import one_page
from local.jobservice.model_rules import RegistryError, refuse_invalid
from local.jobservice.quota_queue import HOLDING_STATES, gpu_demand, region_of
from local.jobservice.reservations import reservation_of
from local.jobservice.store import write_atomically
from local.jobservice.validation import Problem
from schemas import catalog
from schemas.catalog import quota_metric

if TYPE_CHECKING:
    from local.jobservice.execution import JobExecutor

log = logging.getLogger("local.jobservice")

ID_RE = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")  # CreatePersistentResourceRequest.persistent_resource_id
PARENT_RE = re.compile(r"projects/[^/]+/locations/[^/]+")
NAME_RE = re.compile(r"projects/[^/]+/locations/[^/]+/persistentResources/[^/]+")
# A job's demand on a resource pool's replicas: POOL_DEMAND + the resource's name + "#" + the pool's id.
POOL_DEMAND = "persistent:"
DEFAULT_BOOT_DISK = "pd-ssd"  # Vertex's default boot disk type for training (DiskSpec)
State = PersistentResource.State
# Terminal states: what a job on a deleted resource must have reached before the resource goes.
_ENDED = frozenset({JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED})
_ACTIVE = frozenset(set(JobState) - _ENDED - {JobState.JOB_STATE_UNSPECIFIED})


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def pool_key(resource: str, pool_id: str) -> str:
    return f"{POOL_DEMAND}{resource}#{pool_id}"


def pool_capacity(pool: ResourcePool) -> int:
    """The most replicas a job may take of the pool: its replica_count, or its autoscaling maximum."""
    spec = pool.autoscaling_spec
    most = spec.max_replica_count if "max_replica_count" in spec else 0
    return max(pool.replica_count if "replica_count" in pool else 0, most)


def boot_disk(disk_type: str) -> str:
    return disk_type or DEFAULT_BOOT_DISK


def pool_shape(spec: MachineSpec, disk_type: str) -> tuple[str, str, int, str]:
    accelerator = spec.accelerator_type.name if spec.accelerator_count else "ACCELERATOR_TYPE_UNSPECIFIED"
    return spec.machine_type, accelerator, spec.accelerator_count, boot_disk(disk_type)


def describe_shape(shape: tuple[str, str, int, str]) -> str:
    machine, accelerator, count, disk = shape
    gpus = f" with {count} {accelerator}" if count else ""
    return f"{machine}{gpus} on {disk}"


class PersistentResources:
    """The resources of every project and location, their create/delete operations and provisioning timers."""

    def __init__(self, executor: JobExecutor, state_dir: Path | None = None):
        self._executor = executor
        self._jobs = executor.store
        self._dir = state_dir / "persistent_resources" if state_dir is not None else None
        self._lock = threading.RLock()
        self._resources: dict[str, PersistentResource] = {}
        self._ready_at: dict[str, float] = {}  # PROVISIONING resources: when they become RUNNING
        self._create_ops: dict[str, str] = {}  # resource → its create operation, until done
        self._sequence: dict[str, int] = {}
        self._operations: dict[str, operations_pb2.Operation] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._last_id = 0
        self._stopped = False
        for resource, ready_at in self._load():
            self._resources[resource.name] = resource
            self._sequence[resource.name] = len(self._sequence) + 1
            if resource.state == State.PROVISIONING:
                self._ready_at[resource.name] = ready_at

    # --- the JobService's life

    def start(self) -> None:
        """Carry on after a restart: provisioning resources become RUNNING when due, stopping ones go."""
        with self._lock:
            provisioning = dict(self._ready_at)
            stopping = [name for name, r in self._resources.items() if r.state == State.STOPPING]
        for name, ready_at in provisioning.items():
            self._schedule(name, ready_at)
        for name in stopping:
            threading.Thread(target=self._finish_delete, args=(name, None), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()

    # --- the service's methods

    def create(self, parent: str, resource: PersistentResource, resource_id: str) -> operations_pb2.Operation:
        problems: list[Problem | None] = []
        if not PARENT_RE.fullmatch(parent):
            problems.append(("parent", f"must look like projects/P/locations/L, got {parent!r}"))
        if not resource_id:
            problems.append(("persistent_resource_id", "is required"))
        elif not ID_RE.fullmatch(resource_id):
            problems.append(
                (
                    "persistent_resource_id",
                    f"{resource_id!r} is invalid: up to 63 characters matching /^[a-z]([a-z0-9-]{{0,61}}[a-z0-9])?$/",
                )
            )
        problems += resource_problems(resource)
        refuse_invalid(problems)
        unsupported = unsupported_fields(resource)
        if unsupported:
            field, why = unsupported[0]
            raise RegistryError(grpc.StatusCode.UNIMPLEMENTED, f"{field}: {why}")
        model = self._executor.quota.model
        pools = list(resource.resource_pools)
        for index, pool in enumerate(pools):
            if not pool.id:
                pool.id = _pool_id(pool, index, {p.id for p in pools})
        first = pools[0].machine_spec.machine_type
        delay = model.provisioning_delay(region_of(parent), first, "STANDARD")
        with self._lock:
            name = f"{parent}/persistentResources/{resource_id}"
            if name in self._resources:
                raise RegistryError(grpc.StatusCode.ALREADY_EXISTS, f"PersistentResource {name} already exists.")
            self._refuse_over_quota(parent, pools)
            now = _utc_now()
            created = PersistentResource(
                name=name,
                display_name=resource.display_name,
                resource_pools=[_stored_pool(pool) for pool in pools],
                state=State.PROVISIONING,
                create_time=now,
                update_time=now,
                labels=dict(resource.labels),
                network=resource.network,
                encryption_spec=resource.encryption_spec,
                reserved_ip_ranges=list(resource.reserved_ip_ranges),
                resource_runtime_spec=resource.resource_runtime_spec,
                psc_interface_config=resource.psc_interface_config,
            )
            self._resources[name] = created
            self._sequence[name] = max(self._sequence.values(), default=0) + 1
            ready_at = time.time() + delay
            self._ready_at[name] = ready_at
            self._save(created)
            metadata = CreatePersistentResourceOperationMetadata(
                generic_metadata={"create_time": now, "update_time": now},
                progress_message="Provisioning the persistent resource's machines.",
            )
            operation = self._operation(name, metadata, None, done=False)
            self._create_ops[name] = operation.name
        self._schedule(name, ready_at)
        return operation

    def get(self, name: str) -> PersistentResource:
        self._refuse_bad_name(name)
        with self._lock:
            return self._with_usage(self._resource(name))

    def list_resources(self, parent: str, page_size: int, page_token: str) -> ListPersistentResourcesResponse:
        if not PARENT_RE.fullmatch(parent):
            refuse_invalid([("parent", f"must look like projects/P/locations/L, got {parent!r}")])
        with self._lock:
            listed = [
                (self._sequence[name], self._with_usage(resource))
                for name, resource in sorted(self._resources.items(), key=lambda item: self._sequence[item[0]])
                if name.startswith(f"{parent}/persistentResources/")
            ]
        page, token = one_page(listed, page_size, page_token)
        return ListPersistentResourcesResponse(persistent_resources=page, next_page_token=token)

    def delete(self, name: str) -> operations_pb2.Operation:
        self._refuse_bad_name(name)
        with self._lock:
            resource = self._resource(name)
            if resource.state == State.STOPPING:
                raise RegistryError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"PersistentResource {name} is already being deleted."
                )
            resource.state = State.STOPPING  # type: ignore[assignment]  # proto-plus enum members are ints
            resource.update_time = _utc_now()
            self._ready_at.pop(name, None)
            timer = self._timers.pop(name, None)
            self._save(resource)
            now = _utc_now()
            metadata = DeleteOperationMetadata(generic_metadata={"create_time": now, "update_time": now})
            operation = self._operation(name, metadata, None, done=False)
        if timer is not None:
            timer.cancel()
        threading.Thread(target=self._finish_delete, args=(name, operation.name), daemon=True).start()
        return operation

    def get_operation(self, name: str) -> operations_pb2.Operation:
        with self._lock:
            if name not in self._operations:
                raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
            return operations_pb2.Operation.FromString(self._operations[name].SerializeToString())

    # --- the jobs on a resource (servicer.py, quota_queue.py)

    def job_refusal(self, parent: str, job: CustomJob) -> tuple[grpc.StatusCode, list[Problem]] | None:
        """Why CreateCustomJob refuses a job naming job_spec.persistent_resource_id, else None."""
        field = "custom_job.job_spec.persistent_resource_id"
        spec = job.job_spec
        name = f"{parent}/persistentResources/{spec.persistent_resource_id}"
        with self._lock:
            resource = self._resources.get(name)
            if resource is None:
                why = f"PersistentResource {name} does not exist (it must be in the job's project and location)."
                return grpc.StatusCode.INVALID_ARGUMENT, [(field, why)]
            if resource.state in (State.STOPPING, State.ERROR):
                why = f"PersistentResource {name} is {resource.state.name}; it cannot run jobs."
                return grpc.StatusCode.FAILED_PRECONDITION, [(field, why)]
            problems = self._match_problems(resource, job)
        return (grpc.StatusCode.INVALID_ARGUMENT, problems) if problems else None

    def job_demand(self, job: CustomJob) -> dict[str, int]:
        """The replicas a job on a resource takes of each of its pools (keyed by pool_key)."""
        name = f"{job.name.split('/customJobs/')[0]}/persistentResources/{job.job_spec.persistent_resource_id}"
        with self._lock:
            resource = self._resources.get(name)
            demand: dict[str, int] = {}
            for worker_pool in job.job_spec.worker_pool_specs:
                if not worker_pool.replica_count:
                    continue
                pool = _matching_pool(resource, worker_pool) if resource is not None else None
                key = pool_key(name, pool.id if pool is not None else "-gone-")
                demand[key] = demand.get(key, 0) + worker_pool.replica_count
            return demand

    def pool_limits(self) -> dict[str, int]:
        """Each pool's replicas jobs may take: none until the resource is RUNNING, none once it is STOPPING."""
        with self._lock:
            return {
                pool_key(name, pool.id): pool_capacity(pool) if resource.state == State.RUNNING else 0
                for name, resource in self._resources.items()
                for pool in resource.resource_pools
            }

    def gpus_held(self, parent: str) -> dict[str, int]:
        """GPUs per quota metric that the resources of `parent` (projects/P/locations/L) hold while they exist."""
        with self._lock:
            held: dict[str, int] = {}
            for name, resource in self._resources.items():
                if name.startswith(f"{parent}/persistentResources/"):
                    for metric, gpus in _resource_gpus(list(resource.resource_pools)).items():
                        held[metric] = held.get(metric, 0) + gpus
            return held

    # --- machinery

    def _match_problems(self, resource: PersistentResource, job: CustomJob) -> list[Problem]:
        spec = job.job_spec
        problems: list[Problem] = []
        taken: dict[str, int] = {}
        for index, worker_pool in enumerate(spec.worker_pool_specs):
            if not worker_pool.replica_count and "machine_spec" not in worker_pool:
                continue  # an empty pool (skipped)
            where = f"custom_job.job_spec.worker_pool_specs[{index}]"
            pool = _matching_pool(resource, worker_pool)
            if pool is None:
                shape = pool_shape(worker_pool.machine_spec, worker_pool.disk_spec.boot_disk_type)
                offered = "; ".join(
                    f"{p.id}: {describe_shape(pool_shape(p.machine_spec, p.disk_spec.boot_disk_type))}"
                    for p in resource.resource_pools
                )
                problems.append(
                    (
                        f"{where}.machine_spec",
                        f"{describe_shape(shape)} matches no resource pool of {resource.name} exactly "
                        f"(machine type, accelerator and disk type): {offered}.",
                    )
                )
                continue
            taken[pool.id] = taken.get(pool.id, 0) + worker_pool.replica_count
            if taken[pool.id] > pool_capacity(pool):
                problems.append(
                    (
                        f"{where}.replica_count",
                        f"{taken[pool.id]} replicas exceed resource pool {pool.id}'s "
                        f"{pool_capacity(pool)} (its replica_count, or its autoscaling max_replica_count).",
                    )
                )
        if spec.network != resource.network:
            problems.append(
                (
                    "custom_job.job_spec.network",
                    f"must be the persistent resource's network ({resource.network or 'none'}), "
                    f"got {spec.network or 'none'}.",
                )
            )
        job_key, resource_key = job.encryption_spec.kms_key_name, resource.encryption_spec.kms_key_name
        if job_key != resource_key:
            problems.append(
                (
                    "custom_job.encryption_spec.kms_key_name",
                    f"must be the persistent resource's CMEK key ({resource_key or 'none'}), got {job_key or 'none'}.",
                )
            )
        return problems

    def _refuse_over_quota(self, parent: str, pools: list[ResourcePool]) -> None:
        """RESOURCE_EXHAUSTED when the resource's GPUs, beside those held now, exceed a quota limit."""
        from local.jobservice.faults import QUOTA_MESSAGE

        model = self._executor.quota.model
        region = region_of(parent)
        held = self.gpus_held(parent)
        for job in self._jobs.jobs(parent):
            if job.state in HOLDING_STATES and not job.job_spec.persistent_resource_id:
                for metric, gpus in gpu_demand(job).items():
                    held[metric] = held.get(metric, 0) + gpus
        for metric, gpus in _resource_gpus(pools).items():
            limit = model.limit(region, metric)
            if limit is not None and held.get(metric, 0) + gpus > limit:
                raise RegistryError(grpc.StatusCode.RESOURCE_EXHAUSTED, QUOTA_MESSAGE.format(metric=metric))

    def _schedule(self, name: str, ready_at: float) -> None:
        timer = threading.Timer(max(0.0, ready_at - time.time()), self._provisioned, args=(name,))
        timer.daemon = True
        with self._lock:
            if self._stopped:
                return
            self._timers[name] = timer
        timer.start()

    def _provisioned(self, name: str) -> None:
        """PROVISIONING → RUNNING: the pools' nodes are started; waiting jobs may take them."""
        with self._lock:
            self._timers.pop(name, None)
            resource = self._resources.get(name)
            if resource is None or resource.state != State.PROVISIONING:
                return
            now = _utc_now()
            resource.state = State.RUNNING  # type: ignore[assignment]  # proto-plus enum members are ints
            resource.start_time = now
            resource.update_time = now
            self._ready_at.pop(name, None)
            self._save(resource)
            operation = self._create_ops.pop(name, None)
            if operation is not None:
                self._finish(operation, PersistentResource.pb(resource))
        log.info(json.dumps({"severity": "INFO", "message": f"{name} is RUNNING"}))
        self._executor.quota.wake()

    def _finish_delete(self, name: str, operation: str | None) -> None:
        """Cancel the jobs on the resource, wait until they have ended, then forget it."""
        parent, resource_id = name.split("/persistentResources/")
        deadline = time.time() + self._executor.settings.cancel_grace + 60
        while True:
            on_it = [
                job
                for job in self._jobs.jobs(parent)
                if job.job_spec.persistent_resource_id == resource_id and job.state in _ACTIVE
            ]
            for job in on_it:
                if job.state != JobState.JOB_STATE_CANCELLING:
                    try:
                        self._executor.cancel(job.name)
                    except Exception as error:  # ended meanwhile (TransitionRefused)
                        log.info("cancelling %s for the deletion of %s: %s", job.name, name, error)
            if not on_it or time.time() > deadline:
                break
            time.sleep(0.1)
        with self._lock:
            self._resources.pop(name, None)
            self._ready_at.pop(name, None)
            self._create_ops.pop(name, None)
            self._unsave(name)
            if operation is not None and operation in self._operations:
                self._finish(operation, empty_pb2.Empty())
        self._executor.quota.wake()

    def _with_usage(self, resource: PersistentResource) -> PersistentResource:
        copy = PersistentResource.deserialize(PersistentResource.serialize(resource))
        parent = resource.name.split("/persistentResources/")[0]
        used: dict[str, int] = {}
        for job in self._jobs.jobs(parent):
            if job.job_spec.persistent_resource_id and job.state in HOLDING_STATES:
                for key, replicas in self.job_demand(job).items():
                    used[key] = used.get(key, 0) + replicas
        for pool in copy.resource_pools:
            pool.used_replica_count = used.get(pool_key(resource.name, pool.id), 0)
        return copy

    def _resource(self, name: str) -> PersistentResource:
        resource = self._resources.get(name)
        if resource is None:
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"PersistentResource {name} does not exist.")
        return resource

    @staticmethod
    def _refuse_bad_name(name: str) -> None:
        if not NAME_RE.fullmatch(name):
            refuse_invalid([("name", f"must look like projects/P/locations/L/persistentResources/ID, got {name!r}")])

    def _operation(self, resource: str, metadata: Any, response: Any, done: bool) -> operations_pb2.Operation:
        operation = operations_pb2.Operation(name=f"{resource}/operations/{self._new_id()}", done=done)
        operation.metadata.Pack(type(metadata).pb(metadata))
        if response is not None:
            operation.response.Pack(response)
        self._operations[operation.name] = operation
        return operations_pb2.Operation.FromString(operation.SerializeToString())

    def _finish(self, name: str, response: Any) -> None:
        stored = self._operations[name]
        stored.response.Pack(response)
        stored.done = True

    def _new_id(self) -> str:
        """Numeric and increasing, like Vertex's operation ids (gcloud reads `operations/(\\d+)`)."""
        self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
        return str(self._last_id)

    def _path(self, name: str) -> Path | None:
        if self._dir is None:
            return None
        _, project, _, location, _, resource_id = name.split("/")
        return self._dir / project / location / f"{resource_id}.json"

    def _save(self, resource: PersistentResource) -> None:
        path = self._path(resource.name)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            record = {
                "resource": json.loads(PersistentResource.to_json(resource)),
                "ready_at": self._ready_at.get(resource.name, 0.0),
            }
            write_atomically(path, json.dumps(record))

    def _unsave(self, name: str) -> None:
        path = self._path(name)
        if path is not None:
            path.unlink(missing_ok=True)

    def _load(self) -> list[tuple[PersistentResource, float]]:
        if self._dir is None:
            return []
        loaded = []
        for path in sorted(self._dir.glob("*/*/*.json")):
            record = json.loads(path.read_text())
            resource = PersistentResource.from_json(json.dumps(record["resource"]), ignore_unknown_fields=True)
            loaded.append((resource, float(record.get("ready_at", 0.0))))
        return loaded


def resource_problems(resource: PersistentResource) -> list[Problem]:
    """What CreatePersistentResource refuses of the resource's pools (INVALID_ARGUMENT)."""
    problems: list[Problem] = []
    if not resource.resource_pools:
        return [("persistent_resource.resource_pools", "is required: at least one resource pool")]
    ids = [pool.id for pool in resource.resource_pools if pool.id]
    for pool_id in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(("persistent_resource.resource_pools.id", f"{pool_id!r} names more than one pool"))
    for index, pool in enumerate(resource.resource_pools):
        where = f"persistent_resource.resource_pools[{index}]"
        spec = pool.machine_spec
        if not spec.machine_type:
            problems.append((f"{where}.machine_spec.machine_type", "is required"))
        elif catalog.machine(spec.machine_type) is None:
            problems.append((f"{where}.machine_spec.machine_type", catalog.unknown_machine(spec.machine_type)))
        elif spec.accelerator_count:
            problem = catalog.accelerator_problem(spec.machine_type, spec.accelerator_type.name, spec.accelerator_count)
            if problem:
                problems.append((f"{where}.machine_spec", problem))
        problems += _replica_problems(where, pool)
    return problems


def _replica_problems(where: str, pool: ResourcePool) -> list[Problem]:
    """ResourcePool.replica_count and AutoscalingSpec: 0 < min ≤ replica_count ≤ max, min < max."""
    has_count = "replica_count" in pool
    count = pool.replica_count if has_count else None
    if "autoscaling_spec" not in pool:
        if not has_count or (count or 0) < 1:
            return [(f"{where}.replica_count", f"must be at least 1 (or set autoscaling_spec), got {count or 0}")]
        return []
    spec = pool.autoscaling_spec
    low = spec.min_replica_count if "min_replica_count" in spec else None
    high = spec.max_replica_count if "max_replica_count" in spec else None
    problems: list[Problem] = []
    scaling = f"{where}.autoscaling_spec"
    if low is None or low < 1:
        problems.append((f"{scaling}.min_replica_count", f"must be > 0 on a persistent resource, got {low or 0}"))
    if high is None:
        problems.append((f"{scaling}.max_replica_count", "is required with autoscaling_spec"))
    if low is not None and high is not None and low >= high:
        problems.append((f"{scaling}.min_replica_count", f"must be < max_replica_count ({high}), got {low}"))
    if count is not None and low is not None and count < low:
        problems.append((f"{where}.replica_count", f"must be ≥ min_replica_count ({low}), got {count}"))
    if count is not None and high is not None and count > high:
        problems.append((f"{where}.replica_count", f"must be ≤ max_replica_count ({high}), got {count}"))
    return problems


def unsupported_fields(resource: PersistentResource) -> list[Problem]:
    """Fields the local stack does not imitate: refused (UNIMPLEMENTED) rather than silently ignored."""
    found: list[Problem] = []
    if "ray_spec" in resource.resource_runtime_spec:
        found.append(("persistent_resource.resource_runtime_spec.ray_spec", "Ray on Vertex is not imitated locally"))
    for index, pool in enumerate(resource.resource_pools):
        if reservation_of(pool.machine_spec) is not None:
            found.append(
                (
                    f"persistent_resource.resource_pools[{index}].machine_spec.reservation_affinity",
                    "reservations on persistent resources are not imitated locally",
                )
            )
    return found


def _matching_pool(resource: PersistentResource, worker_pool: Any) -> ResourcePool | None:
    shape = pool_shape(worker_pool.machine_spec, worker_pool.disk_spec.boot_disk_type)
    for pool in resource.resource_pools:
        if pool_shape(pool.machine_spec, pool.disk_spec.boot_disk_type) == shape:
            return pool
    return None


def _resource_gpus(pools: list[ResourcePool]) -> dict[str, int]:
    """GPUs per on-demand training quota metric: each pool's accelerators × its most replicas."""
    gpus: dict[str, int] = {}
    for pool in pools:
        spec = pool.machine_spec
        if spec.accelerator_count:
            metric = quota_metric(spec.accelerator_type.name, "STANDARD")
            gpus[metric] = gpus.get(metric, 0) + spec.accelerator_count * pool_capacity(pool)
    return gpus


def _pool_id(pool: ResourcePool, index: int, taken: set[str]) -> str:
    """A generated pool id (Vertex's own form is not documented): the machine type, unique in the resource."""
    base = pool.machine_spec.machine_type or f"pool-{index}"
    candidate, suffix = base, 1
    while candidate in taken:
        suffix += 1
        candidate = f"{base}-{suffix}"
    taken.add(candidate)
    return candidate


def _stored_pool(pool: ResourcePool) -> ResourcePool:
    stored = ResourcePool(pool)
    if "replica_count" not in stored and "min_replica_count" in stored.autoscaling_spec:
        stored.replica_count = stored.autoscaling_spec.min_replica_count  # autoscaling starts at its minimum
    stored.used_replica_count = 0
    return stored
