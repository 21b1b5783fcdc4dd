"""The controller on trainctl replay's in-memory Cloud Storage (compare-and-swap included), with Vertex, Pub/Sub and
Cloud Quotas kept in memory behind the interfaces of functions/cloud/ports.py and a clock the test moves: submission and
observation (issue 29, point 6) tested through the Controller's public calls, at unit-test cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.cloud.errors import Transient
from functions.cloud.job_labels import ATTEMPT, DEPLOYMENT, KEY
from functions.cloud.job_snapshot import JobSnapshot
from functions.cloud.vertex import CallRejected
from functions.controller import Controller, Delivery
from functions.ledger.keys import key_hash
from functions.ledger.record import Record
from functions.ledger.requests import ACTIVE_PREFIX, Ledger
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from schemas.events import JobEvent, Trigger
from tests.unit.conftest import make_request
from trainctl.replay import DryRunGcs

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
PARENT = "projects/p/locations/us-central1"
WAITING = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING")
RUNNING = ("JOB_STATE_RUNNING", "JOB_STATE_UPDATING")
A100_QUOTA = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
L4_QUOTA = "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
A100_POOL = "us-central1/custom_model_training_nvidia_a100_gpus"
L4_POOL = "us-central1/custom_model_training_nvidia_l4_gpus"
# What Vertex answers CreateCustomJob when the project's GPU quota is short (reference/vertex.md §6.1).
QUOTA_REFUSAL = CallRejected(
    8, "quota", f"The following quota metrics exceed quota limits: {A100_QUOTA}"
)  # RESOURCE_EXHAUSTED
STOCKOUT = "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."


class Clock:
    """The controller's clock, moved by the test."""

    def __init__(self, now: datetime = NOW):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class MemoryVertex:
    """Vertex's JobService (ports.Jobs): jobs in memory, adopted by their attempt's labels as functions/cloud/vertex.py
    finds them; `refusals` are raised by the next creates, in order."""

    clock: Clock
    parent: str = PARENT
    jobs: dict[str, JobSnapshot] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    refusals: list[Exception] = field(default_factory=list)

    def find_or_create(
        self, custom_job: dict[str, Any], region: str | None = None, legacy: bool = True
    ) -> tuple[JobSnapshot, bool]:
        labels = custom_job["labels"]
        for job in self.jobs.values():
            if all((job.labels or {}).get(k) == labels[k] for k in (KEY, ATTEMPT, DEPLOYMENT)):
                return job, True
        if self.refusals:
            raise self.refusals.pop(0)
        self.created.append(custom_job)
        name = f"projects/p/locations/{region or 'us-central1'}/customJobs/{len(self.created)}"
        self.jobs[name] = JobSnapshot(name, "JOB_STATE_QUEUED", create_time=self.clock(), labels=dict(labels))
        return self.jobs[name], False

    def active_jobs(
        self, region: str, deployment: str, since: datetime | None = None, before: datetime | None = None
    ) -> dict[str, JobSnapshot]:
        return {
            name: job
            for name, job in self.jobs.items()
            if f"/locations/{region}/" in name and job.state in (*WAITING, *RUNNING)
        }

    def get(self, name: str) -> JobSnapshot | None:
        return self.jobs.get(name)

    def cancel(self, name: str) -> None:
        self.cancelled.append(name)

    def set_state(self, name: str, state: str, **fields: Any) -> None:
        """The job moves on, as Vertex moves it."""
        self.jobs[name] = dataclasses.replace(self.jobs[name], state=state, **fields)

    def last(self) -> str:
        """The name of the job created last."""
        return list(self.jobs)[-1]


@dataclass
class MemoryPublisher:
    """Pub/Sub (ports.Events): the events published, in order; `down` refuses them."""

    source: str = "test"
    events: list[JobEvent] = field(default_factory=list)
    down: bool = False
    then: Callable[[], None] | None = None  # runs after each event is published

    def publish(self, event: JobEvent) -> str:
        if self.down:
            raise Transient("Pub/Sub is unavailable")
        self.events.append(event)
        if self.then is not None:
            self.then()
        return event.ce_id

    @property
    def states(self) -> list[str]:
        return [e.state for e in self.events]


@dataclass
class FixedQuotas:
    """Cloud Quotas (ports.Quotas): the project's GPU limit per metric in us-central1."""

    limits: dict[str, int]

    def limit(self, metric: str, region: str) -> int | None:
        return self.limits.get(metric) if region == "us-central1" else None


@dataclass
class InterferingGcs(DryRunGcs):
    """DryRunGcs where another writer gets in first: each of the next `interruptions` writes of the object named
    `contested` finds it rewritten since it was read (another handler's compare-and-swap), and fails with Conflict."""

    contested: str = ""
    interruptions: int = 0

    def write(self, bucket, name, data, if_generation_match, custom_metadata=None):  # type: ignore[no-untyped-def]
        if self.interruptions and name == self.contested and (bucket, name) in self.objects:
            self.interruptions -= 1
            unchanged, generation = self.objects[(bucket, name)]
            super().write(bucket, name, unchanged, generation)
        return super().write(bucket, name, data, if_generation_match, custom_metadata)


@dataclass
class Harness:
    ctl: Controller
    gcs: MemoryGcs
    vertex: MemoryVertex
    publisher: MemoryPublisher
    clock: Clock

    def submit(self, request_id: str = "r1", **sections: Any) -> str:
        """Deliver a Pub/Sub request (BASE_REQUEST with `sections` replaced)."""
        request = make_request(request_id=request_id, **sections)
        trigger = Trigger(kind="pubsub", message_id=f"m-{request_id}", topic="requests")
        delivery = Delivery(trigger, f"m-{request_id}", self.clock())
        return self.ctl.handle_request(request, f"request:{request_id}", True, delivery)

    def record(self, request_id: str = "r1") -> Record:
        found = self.ctl.ledger.read(key_hash(f"request:{request_id}"))
        assert found is not None, f"no record of {request_id}"
        return found[0]

    def active(self) -> list[str]:
        return self.gcs.names("control", ACTIVE_PREFIX)

    def events_of(self, state: str) -> list[JobEvent]:
        return [e for e in self.publisher.events if e.state == state]


def harness(gcs: MemoryGcs | None = None, quotas: dict[str, int] | None = None, **settings: Any) -> Harness:
    """A controller on in-memory stand-ins; `quotas`: the project's GPU limits (None: no quota gating). Cloud
    Storage is the dry run's, by default: the requests' datasets and packages, never written, are assumed there."""
    gcs = gcs if gcs is not None else DryRunGcs()
    clock = Clock()
    vertex, publisher = MemoryVertex(clock), MemoryPublisher()
    config = Settings(project="p", control_bucket="control", events_topic="events", trainer_image="img", **settings)
    ctl = Controller(
        config,
        Ledger(gcs, "control"),
        gcs,
        publisher,
        lambda: vertex,
        quotas=FixedQuotas(quotas) if quotas is not None else None,
        clock=clock,
    )
    return Harness(ctl, gcs, vertex, publisher, clock)
