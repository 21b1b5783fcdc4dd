"""Running CustomJobs the way Vertex does, with local processes.

Each job gets one supervising thread (`JobRun`) that walks it through QUEUED → PENDING → RUNNING →
SUCCEEDED | FAILED, or CANCELLING → CANCELLED. Every node is a process group led by the node agent
(node_agent.py), with its output in `logs/<node>.log` under the job's folder. Decisions follow
reference/vertex.md §1.6 and §6.3:

- the job succeeds when the primary (workerpool0-0) exits 0; the other nodes are then stopped;
- it fails as soon as any node exits non-zero: "The replica workerpool1-0 exited with a non-zero status
  of 3." (error code 3, as Vertex reports user-code failures);
- `scheduling.timeout` bounds the running time (FAILED, DEADLINE_EXCEEDED);
- cancel and preemption send SIGTERM to every node and SIGKILL after the grace period;
- Vertex's own restarts (preemption, stockout, SIGABRT/SIGSEGV exits) are decided by vertex_retries.py:
  a restart is a new attempt of the same job, which stays RUNNING;
- faults planned at create time (faults.NewJobFaults, kept in the run record) hold the job in QUEUED or
  PENDING, fail it for quota, or make its provisioning meet stockouts;
- the capacity model (capacity.py) keeps the job QUEUED while its GPUs do not fit the quota (quota_queue.py),
  holds it in PENDING for its cold nodes' `provisioning` delay (none on a persistent resource, whose nodes are
  started), and its machine rule adds stockouts and preempts each attempt `preempt_after` seconds after it starts.

Exit events are queued in the order the nodes exit, so "primary exited 0, then a worker lost its peer"
counts as a success, as it would on Vertex. Every state change goes through `JobExecutor.transition`,
which persists the job and calls the transition hooks.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from google.cloud.aiplatform_v1.types import CustomJob, JobState
from google.rpc import code_pb2, status_pb2

from local.jobservice import vertex_retries
from local.jobservice.capacity import ALWAYS
from local.jobservice.faults import QUOTA_MESSAGE, STOCKOUT_MESSAGE, NewJobFaults
from local.jobservice.nodes import Node, start_node
from local.jobservice.packages import PackageError, install_packages
from local.jobservice.quota_queue import QuotaQueue, region_of
from local.jobservice.replicas import ExecutionSettings, NodePlanError, plan_nodes
from local.jobservice.reservations import on_reservation
from local.jobservice.store import JobStore, ReplicaRecord, RunRecord
from local.processes import free_port, signal_group, stop_groups
from schemas.catalog import quota_metric

if TYPE_CHECKING:  # secret_manager.py serves on the REST port, whose module imports this one
    from local.jobservice.secret_manager import MetadataServer, NodeServices

# A JobState member: proto-plus enums carry no types, so to the type checker their members are ints.
State = int

log = logging.getLogger("local.jobservice")

TERMINAL_STATES = frozenset({JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED})
ACTIVE_STATES = frozenset(set(JobState) - TERMINAL_STATES - {JobState.JOB_STATE_UNSPECIFIED})
PRIMARY = "workerpool0-0"

TransitionHook = Callable[[CustomJob], None]


class TransitionRefused(Exception):
    """The job is not in a state this change may start from."""


@dataclass(frozen=True)
class Outcome:
    state: State | None  # None: the job was preempted and restarts
    code: int = 0
    message: str = ""


class JobExecutor:
    def __init__(self, store: JobStore, settings: ExecutionSettings, hooks: Iterable[TransitionHook] = ()):
        self.store = store
        self.settings = settings
        self.quota = QuotaQueue(store)
        # Every state change may free quota: the waiting jobs look again.
        self.hooks: list[TransitionHook] = [self.quota.wake, *hooks]
        self._runs: dict[str, JobRun] = {}
        self._lock = threading.Lock()
        # Each job's metadata server and the Secret Manager stand-in (secret_manager.py); None: the nodes get none.
        self.node_services: NodeServices | None = None

    def created(self, job: CustomJob, faults: NewJobFaults | None = None) -> None:
        """A job was just stored in QUEUED: tell the hooks and start supervising it."""
        self._notify(job)
        faults = faults or NewJobFaults()
        machine_type = job.job_spec.worker_pool_specs[0].machine_spec.machine_type
        strategy = job.job_spec.scheduling.strategy.name
        model = self.quota.model
        rule = model.machine_rule(region_of(job.name), machine_type, strategy)
        # Cold nodes are provisioned first (the capacity model's delay, spent in PENDING); a persistent resource's
        # nodes are already started, so a job on one skips it (local/FIDELITY.md "Persistent resources").
        warm = bool(job.job_spec.persistent_resource_id)
        provisioning = 0.0 if warm else model.provisioning_delay(region_of(job.name), machine_type, strategy)
        if warm or on_reservation(job, model):  # its machines are already there: no stockout reaches it
            rule = replace(rule, stockouts=0)
        run = RunRecord(
            queued_until=time.time() + faults.queue_hold,
            pending_hold=faults.pending_hold + provisioning,
            quota_failure=faults.quota_failure,
            stockouts=min(ALWAYS, faults.stockouts + rule.stockouts),
            preempt_after=rule.preempt_after,
        )
        self.store.save_run(job.name, run)
        self._launch(job.name, run)

    def park(self, job: CustomJob) -> None:
        """A job just stored QUEUED that nothing runs: it waits, as a job Vertex holds for quota does, until it is
        cancelled. For scale tests (bench/reconcile_sweep.py): no thread, no node, no service line per job."""
        self.store.save_run(job.name, RunRecord(parked=True))

    def resume_all(self) -> None:
        """After a restart: carry on with every job that had not ended, adopting live nodes."""
        for job in self.store.jobs():
            if job.state in ACTIVE_STATES and not (run := self.store.load_run(job.name)).parked:
                self._launch(job.name, run)

    def cancel(self, name: str) -> None:
        """Raises TransitionRefused when the job has already ended."""
        self.transition(name, JobState.JOB_STATE_CANCELLING, only_from=ACTIVE_STATES)
        run = self._run(name)
        if run is not None:
            run.events.put(("cancel",))
        elif self.store.load_run(name).parked:  # nothing runs it: it ends at once
            self.transition(name, JobState.JOB_STATE_CANCELLED, code_pb2.CANCELLED, "CustomJob was cancelled.")

    def preempt(self, name: str) -> None:
        """Raises TransitionRefused unless the job is running."""
        run = self._run(name)
        job = self.store.get(name)
        if run is None or job is None or job.state != JobState.JOB_STATE_RUNNING:
            raise TransitionRefused(f"only a running job can be preempted; {name} is not running")
        run.events.put(("preempt",))

    def log_paths(self, name: str) -> dict[str, str]:
        return {path.stem: str(path) for path in sorted(self.store.log_dir(name).glob("*.log"))}

    def shutdown(self, stop_jobs: bool = True) -> None:
        """Stop supervising. With `stop_jobs`, running nodes are stopped and their jobs fail; without,
        the nodes keep running (a restarted server adopts them)."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.events.put(("shutdown",) if stop_jobs else ("detach",))
        for run in runs:
            run.thread.join(timeout=self.settings.cancel_grace + 10)

    def transition(
        self, name: str, state: State, code: int = 0, message: str = "", only_from: Iterable[State] = ()
    ) -> CustomJob:
        allowed = frozenset(only_from)
        now = dt.datetime.now(dt.UTC)

        def change(job: CustomJob) -> None:
            if allowed and job.state not in allowed:
                raise TransitionRefused(f"{name} is {job.state.name}")
            job.state = state  # type: ignore[assignment]  # a JobState member (State)
            job.update_time = now
            if state == JobState.JOB_STATE_RUNNING and "start_time" not in job:
                job.start_time = now
            if state in TERMINAL_STATES:
                job.end_time = now
            if code:
                job.error = status_pb2.Status(code=code, message=message)

        job = self.store.update(name, change)
        self._notify(job, message)
        return job

    def _notify(self, job: CustomJob, message: str = "") -> None:
        self.service_log(job.name, f"{job.state.name}{': ' + message if message else ''}")
        for hook in self.hooks:
            try:
                hook(job)
            except Exception:
                log.exception("a state-transition hook failed for %s", job.name)

    def service_log(self, name: str, message: str) -> None:
        """A line in the job's `service.log`, like the lines Vertex logs under task name "service"."""
        log.info(json.dumps({"severity": "INFO", "message": message, "job": name}))
        log_dir = self.store.log_dir(name)
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / "service.log", "a") as handle:
            handle.write(f"{dt.datetime.now(dt.UTC).isoformat()} {message}\n")

    def _launch(self, name: str, run: RunRecord) -> None:
        job_run = JobRun(self, name, run)
        with self._lock:
            self._runs[name] = job_run
        job_run.thread.start()

    def _run(self, name: str) -> JobRun | None:
        with self._lock:
            return self._runs.get(name)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._runs.pop(name, None)


class JobRun:
    """The thread that supervises one job from where it stands to its end."""

    def __init__(self, executor: JobExecutor, name: str, record: RunRecord):
        self.executor = executor
        self.store = executor.store
        self.name = name
        self.record = record
        self.events: queue.Queue[tuple] = queue.Queue()
        self.nodes: list[Node] = []
        self.metadata: MetadataServer | None = None  # the job's metadata server, from its first start of nodes
        self.thread = threading.Thread(target=self._main, name=f"job-{name.rsplit('/', 1)[-1]}", daemon=True)

    def _main(self) -> None:
        try:
            self._walk()
        except Exception as error:  # a bug here must not leave the job RUNNING forever
            log.exception("supervising %s failed", self.name)
            self._stop_nodes()
            with contextlib.suppress(TransitionRefused):  # refused: it had ended before the bug struck
                self.executor.transition(
                    self.name,
                    JobState.JOB_STATE_FAILED,
                    code_pb2.INTERNAL,
                    f"Internal error in the local JobService: {error}",
                    only_from=ACTIVE_STATES,
                )
        finally:
            if self.metadata is not None:
                self.metadata.stop()
            self.executor._forget(self.name)

    def _walk(self) -> None:
        if self._state() == JobState.JOB_STATE_QUEUED:
            if self._hold(self.record.queued_until) == "leave":  # a restarted server picks the job up
                return None
            if self.record.quota_failure and self._state() == JobState.JOB_STATE_QUEUED:
                return self._end(self._quota_failure())
            if self._wait_for_quota() == "leave":
                return None
        pending = self._state() == JobState.JOB_STATE_PENDING and not self.record.replicas
        if pending and self._hold(self.record.pending_until) == "leave":
            return None
        if self.record.replicas:
            self._adopt()
        while True:
            if not self.nodes:
                outcome = self._start_nodes()
                if outcome is not None and outcome.state is None:
                    continue  # a stockout Vertex retries: provision again
                if outcome is not None:
                    return self._end(outcome)
            outcome = self._supervise()
            if outcome is None:  # detached: the server is going away, the nodes keep running
                return None
            if outcome.state is not None:
                return self._end(outcome)
            self.nodes = []  # restarted (by Vertex, or restart_job_on_worker_restart): run the job again

    def _state(self) -> State:
        return self.store.require(self.name).state

    def _wait_for_quota(self) -> str:
        """Stay QUEUED until the job's GPUs fit the capacity model's quota, then move to PENDING. Returns
        "done" once it moved or was cancelled, "leave" when the server shuts down."""
        quota = self.executor.quota
        quota.wait(self.name, self.events)
        said = False
        try:
            while self._state() == JobState.JOB_STATE_QUEUED:
                if quota.try_admit(self.name, self._enter_pending):
                    return "done"
                if not said:
                    region = region_of(self.name)
                    self.executor.service_log(self.name, f"waiting for GPU quota in {region} (capacity model)")
                    said = True
                event = self.events.get()
                if event[0] in ("shutdown", "detach"):
                    return "leave"
            return "done"
        finally:
            quota.leave(self.name)

    def _enter_pending(self) -> None:
        with contextlib.suppress(TransitionRefused):  # refused: cancelled meanwhile, handled by the caller
            self.executor.transition(self.name, JobState.JOB_STATE_PENDING, only_from={JobState.JOB_STATE_QUEUED})
            self.record.pending_until = time.time() + self.record.pending_hold
            self.store.save_run(self.name, self.record)

    def _hold(self, until: float) -> str:
        """Wait out a fault's hold. Returns "done" when it is over or the job was cancelled meanwhile,
        "leave" when the server shuts down (the job stays as it is for the next server)."""
        while True:
            remaining = until - time.time()
            if remaining <= 0 or self._state() == JobState.JOB_STATE_CANCELLING:
                return "done"
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                return "done"
            if event[0] in ("shutdown", "detach"):
                return "leave"

    def _start_nodes(self) -> Outcome | None:
        job = self.store.require(self.name)
        if job.state == JobState.JOB_STATE_CANCELLING:
            return Outcome(JobState.JOB_STATE_CANCELLED, code_pb2.CANCELLED, "CustomJob was cancelled.")
        if self.record.stockouts > 0:
            self.record.stockouts -= 1
            decision = vertex_retries.after_stockout(job, self.record.retries)
            self.store.save_run(self.name, self.record)
            return self._restart_or_stockout(decision)
        self.record.attempt += 1
        self.record.master_port = free_port()
        try:
            homes = self.store.job_dir(self.name) / "homes" / f"attempt-{self.record.attempt}"
            packages = self._install_packages(job)
            services = self._services(job)
            plan = plan_nodes(job, self.executor.settings, self.record.master_port, homes, packages, services)
        except (NodePlanError, PackageError) as error:
            return Outcome(JobState.JOB_STATE_FAILED, code_pb2.INVALID_ARGUMENT, str(error))
        for pool, count in plan.unstarted_pools.items():
            self.executor.service_log(
                self.name, f"{pool} ({count} replicas) is listed in CLUSTER_SPEC but not started locally"
            )
        log_dir = self.store.log_dir(self.name)
        exit_dir = self.store.job_dir(self.name) / "exits" / f"attempt-{self.record.attempt}"
        exit_dir.mkdir(parents=True, exist_ok=True)
        for node in plan.nodes:
            self.nodes.append(start_node(node, self.record.attempt, log_dir, exit_dir, self.executor.settings.workdir))
        self.record.replicas = [ReplicaRecord(node.name, node.pid, str(node.exit_file)) for node in self.nodes]
        self.store.save_run(self.name, self.record)
        if self.record.attempt == 1:
            # Refused when a cancel came in meanwhile; the supervision loop then stops the nodes.
            with contextlib.suppress(TransitionRefused):
                self.executor.transition(self.name, JobState.JOB_STATE_RUNNING, only_from={JobState.JOB_STATE_PENDING})
        return None

    def _services(self, job: CustomJob) -> dict[str, str]:
        """The nodes' variables for the job's metadata server (started once, for the job's account) and Secret
        Manager, as every Vertex node reaches them."""
        services = self.executor.node_services
        if services is None:
            return {}
        if self.metadata is None:
            project = job.name.split("/")[1]
            self.metadata = services.metadata_for(job.job_spec.service_account, project)
        return services.node_env(self.metadata)

    def _install_packages(self, job: CustomJob) -> dict[int, Path]:
        """Each pythonPackageSpec pool's packages, installed once per job (pools with the same URIs share a folder),
        as Vertex installs them on every node before it runs the module."""
        folders: dict[tuple[str, ...], Path] = {}
        installed: dict[int, Path] = {}
        for index, pool in enumerate(job.job_spec.worker_pool_specs):
            if "python_package_spec" not in pool:
                continue
            uris = tuple(pool.python_package_spec.package_uris)
            if uris not in folders:
                target = self.store.job_dir(self.name) / "packages" / f"set-{len(folders)}"
                self.executor.service_log(self.name, f"installing {', '.join(uris)} for workerpool{index}")
                settings = self.executor.settings
                folders[uris] = install_packages(
                    list(uris),
                    target,
                    settings.storage_emulator_host,
                    pool.python_package_spec.executor_image_uri,
                    settings.package_index,
                )
            installed[index] = folders[uris]
        return installed

    def _adopt(self) -> None:
        self.nodes = [Node(r.name, r.pid, Path(r.exit_file)) for r in self.record.replicas]
        self.executor.service_log(self.name, f"adopted {len(self.nodes)} running nodes after a restart")
        with contextlib.suppress(TransitionRefused):  # the server stopped between starting them and RUNNING
            self.executor.transition(self.name, JobState.JOB_STATE_RUNNING, only_from={JobState.JOB_STATE_PENDING})

    def _supervise(self) -> Outcome | None:
        attempt = self.record.attempt
        for node in self.nodes:
            threading.Thread(target=self._watch, args=(node, attempt), daemon=True).start()
        if self.store.require(self.name).state == JobState.JOB_STATE_CANCELLING:
            self.events.put(("cancel",))
        # The capacity model's preemption of this attempt (an adopted one counts from its adoption).
        preempt_at = time.time() + self.record.preempt_after if self.record.preempt_after else None
        while True:
            time_left = self._time_left()
            until_preempted = None if preempt_at is None else max(0.0, preempt_at - time.time())
            preempt_first = until_preempted is not None and (time_left is None or until_preempted < time_left)
            try:
                event = self.events.get(timeout=until_preempted if preempt_first else time_left)
            except queue.Empty:
                event = ("preempt",) if preempt_first else ("timeout",)
            if event[0] == "timeout":
                self._stop_nodes()
                timeout = int(self.store.require(self.name).job_spec.scheduling.timeout.total_seconds())
                message = f"The job exceeded its maximum running time of {timeout}s (scheduling.timeout)."
                return Outcome(JobState.JOB_STATE_FAILED, code_pb2.DEADLINE_EXCEEDED, message)
            kind = event[0]
            if kind == "exit" and event[1] == attempt:
                outcome = self._decide_on_exit(event[2], event[3])
                if outcome is not None:
                    self._stop_nodes()
                    return outcome
            elif kind == "cancel":
                self._stop_nodes()
                return Outcome(JobState.JOB_STATE_CANCELLED, code_pb2.CANCELLED, "CustomJob was cancelled.")
            elif kind == "preempt":
                return self._preempted()
            elif kind == "shutdown":
                self._stop_nodes()
                # The job's machines went away under it, which Vertex reports as an infrastructure failure: code
                # INTERNAL and the text of its last internal-error attempt (reference/vertex.md §6.3, from
                # cloud.google.com/vertex-ai/docs/training/understanding-training-service) — never the code's fault,
                # so the controller resubmits it (reason `internal`) when the stack is back, as after a lost node.
                message = (
                    "Internal error occurred for the current attempt: the local JobService stopped while the job "
                    "was running; its nodes were stopped."
                )
                return Outcome(JobState.JOB_STATE_FAILED, code_pb2.INTERNAL, message)
            elif kind == "detach":
                return None

    def _decide_on_exit(self, node: str, status: int) -> Outcome | None:
        self.executor.service_log(self.name, f"{node} exited with status {status}")
        if status != 0:
            job = self.store.require(self.name)
            decision = vertex_retries.after_exit(job, self.record.retries, status)
            if decision.restart:
                self.store.save_run(self.name, self.record)
                self.executor.service_log(self.name, decision.reason)
                return Outcome(None)
            log_path = self.store.log_dir(self.name) / f"{node}.log"
            message = (
                f"The replica {node} exited with a non-zero status of {status}. "
                f"To find out more about why your job exited please check the logs: {log_path}"
            )
            return Outcome(JobState.JOB_STATE_FAILED, code_pb2.INVALID_ARGUMENT, message)
        if node == PRIMARY:
            return Outcome(JobState.JOB_STATE_SUCCEEDED)
        return None  # a worker finished first; the primary decides

    def _preempted(self) -> Outcome:
        self.executor.service_log(self.name, "nodes preempted: sending SIGTERM to every node")
        self._stop_nodes()
        decision = vertex_retries.after_preemption(self.store.require(self.name), self.record.retries)
        self.store.save_run(self.name, self.record)
        return self._restart_or_stockout(decision)

    def _restart_or_stockout(self, decision: vertex_retries.Decision) -> Outcome:
        """Outcome(None) to run the job again, else FAILED with code 8 and the stockout text."""
        self.executor.service_log(self.name, decision.reason)
        if decision.restart:
            return Outcome(None)
        message = STOCKOUT_MESSAGE.format(region=region_of(self.name))
        return Outcome(JobState.JOB_STATE_FAILED, code_pb2.RESOURCE_EXHAUSTED, message)

    def _quota_failure(self) -> Outcome:
        """FAILED with code 8 and Vertex's quota text naming the metric of the job's primary pool."""
        spec = self.store.require(self.name).job_spec
        accelerator = spec.worker_pool_specs[0].machine_spec.accelerator_type.name
        metric = quota_metric(accelerator, spec.scheduling.strategy.name)
        return Outcome(JobState.JOB_STATE_FAILED, code_pb2.RESOURCE_EXHAUSTED, QUOTA_MESSAGE.format(metric=metric))

    def _watch(self, node: Node, attempt: int) -> None:
        status = node.wait()
        # The node agent is gone; anything still in its group dies with it, as with a container.
        signal_group(node.pid, signal.SIGKILL)
        self.events.put(("exit", attempt, node.name, status))

    def _time_left(self) -> float | None:
        job = self.store.require(self.name)
        timeout = job.job_spec.scheduling.timeout
        if not timeout or "start_time" not in job:
            return None
        deadline = job.start_time.timestamp() + timeout.total_seconds()
        return max(0.0, deadline - time.time())

    def _stop_nodes(self) -> None:
        stop_groups([(node.pid, node.popen) for node in self.nodes], self.executor.settings.cancel_grace)

    def _end(self, outcome: Outcome) -> None:
        assert outcome.state is not None, "a restart is not an end"
        self.record.replicas = []
        self.store.save_run(self.name, self.record)
        self.executor.transition(self.name, outcome.state, outcome.code, outcome.message)
