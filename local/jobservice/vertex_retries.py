"""What Vertex itself does when a job's capacity goes away or a replica crashes (reference/apis.md §6,
"Automatic restarts" and "Spot"; sources in local/FIDELITY.md), independently of the job's
`restart_job_on_worker_restart`:

- a Spot job that is preempted is restarted up to 6 times, then fails with the stockout text;
- a stockout (capacity lost, or none to provision) restarts the job up to 3 times, then it fails with
  code 8 (RESOURCE_EXHAUSTED) and the stockout text;
- a replica that exits with SIGABRT (6, or 134 from a custom container) or SIGSEGV (11 / 139)
  restarts the job up to 3 times;
- `scheduling.disable_retries` turns all of these off (and overrides `restart_job_on_worker_restart`).

A restart keeps the job and its name; the job stays RUNNING (PENDING before it first ran).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud.aiplatform_v1.types import CustomJob, Scheduling

SPOT_RESTARTS = 6
STOCKOUT_RESTARTS = 3
CRASH_RESTARTS = 3
CRASH_STATUSES = frozenset({6, 134, 11, 139})  # SIGABRT and SIGSEGV, as Vertex lists them


@dataclass
class RetryCounts:
    """Restarts Vertex has already made for one job, by cause; kept in the job's run record."""

    spot: int = 0
    stockout: int = 0
    crash: int = 0


@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str  # for the job's service log


def after_preemption(job: CustomJob, counts: RetryCounts) -> Decision:
    """The job's nodes were preempted (or their capacity reclaimed): restart it, or let it fail."""
    scheduling = job.job_spec.scheduling
    if scheduling.disable_retries:
        return Decision(False, "scheduling.disable_retries is set: Vertex does not restart the job")
    if scheduling.strategy == Scheduling.Strategy.SPOT:
        return _spend(counts, "spot", SPOT_RESTARTS, "Spot VMs preempted")
    if scheduling.restart_job_on_worker_restart:
        return Decision(True, "a worker restarted and restart_job_on_worker_restart is set")
    return _spend(counts, "stockout", STOCKOUT_RESTARTS, "capacity lost (stockout)")


def after_stockout(job: CustomJob, counts: RetryCounts) -> Decision:
    """Provisioning the job's nodes met a stockout."""
    if job.job_spec.scheduling.disable_retries:
        return Decision(False, "scheduling.disable_retries is set: Vertex does not retry the stockout")
    return _spend(counts, "stockout", STOCKOUT_RESTARTS, "stockout while provisioning")


def after_exit(job: CustomJob, counts: RetryCounts, status: int) -> Decision:
    """A replica exited with a non-zero `status`: only SIGABRT/SIGSEGV exits are retried."""
    if status not in CRASH_STATUSES:
        return Decision(False, f"exit status {status} is not one Vertex retries")
    if job.job_spec.scheduling.disable_retries:
        return Decision(False, "scheduling.disable_retries is set: Vertex does not restart the job")
    return _spend(counts, "crash", CRASH_RESTARTS, f"a replica crashed (exit status {status})")


def _spend(counts: RetryCounts, cause: str, limit: int, what: str) -> Decision:
    used = getattr(counts, cause)
    if used >= limit:
        return Decision(False, f"{what}; Vertex has already restarted the job {used} times (its limit)")
    setattr(counts, cause, used + 1)
    return Decision(True, f"{what}; Vertex restarts the job ({used + 1} of {limit})")
