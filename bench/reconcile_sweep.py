"""Reconcile by listing at scale (issue 25 point 9; first issue 16 item 6): `reconcile` ticks over tens of thousands
of active requests, with the latencies of the real services injected — 30 ms for every Cloud Storage call (a listing:
each page of 1,000) and 100 ms before every Vertex call (each ListCustomJobs page and each GetCustomJob, to the local
JobService).

Each active request is a ledger record `submitted` with a job of its own, labelled as trainctl labels its jobs and
parked in the JobService's queue (QUEUED, nothing runs it); the records and their active entries are copies of a
real request's record. The ledger lives in this process (FarStorage, Cloud Storage's semantics: generations,
preconditions, custom metadata, sorted paged listings) rather than in fake-gcs-server, whose every object lookup scans
the bucket's objects one by one (internal/backend/memory.go, findObject): with the control bucket's 40,000 objects
that scan, not the sweep, would be what is measured. Events go to the Pub/Sub emulator and are pulled back. The ticks
run in this process, on the real adapters, each under the function's deadline:
  1. the first ticks after the upgrade: no active entry says what was seen yet, so each record is read once;
  2. `--ended` jobs are cancelled (they end at once), then the measured tick, one schedule interval (5 minutes) later
     by the controller's clock, so that as many records come due by the clock as in a deployment's steady state:
     one listing of the waiting and running jobs, and only the ended ones read, their `cancelled` published once;
  3. a tick with nothing new, another interval later.

    python bench/reconcile_sweep.py [--active 20000] [--ended 200] [--concurrency 16] [--page-cap N]
        [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

import google.cloud.pubsub_v1 as pubsub_v1  # noqa: E402
from google.cloud.aiplatform_v1.types import CustomJob  # noqa: E402

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions.cloud import deadline  # noqa: E402
from functions.cloud.job_labels import deployment_label, job_labels  # noqa: E402
from functions.cloud.retry import RetryPolicy  # noqa: E402
from functions.cloud.vertex import VertexJobs  # noqa: E402
from functions.controller import Controller  # noqa: E402
from functions.ledger.keys import key_hash, request_key  # noqa: E402
from functions.settings import Settings  # noqa: E402
from local.jobservice.client import job_service_client  # noqa: E402
from local.memory_gcs import MemoryGcs  # noqa: E402
from local.names import LOCAL_PROJECT, LOCAL_REGION  # noqa: E402
from local.pubsub_emulator import pull_now  # noqa: E402
from schemas.events import parse_event  # noqa: E402
from tests.integration.deployment import fake_node_request  # noqa: E402

GOAL_SECONDS = 10.0
GOAL_CALL_SHARE = 0.02  # Vertex calls per tick, as a share of the active requests
STORAGE_LATENCY = 0.030
VERTEX_LATENCY = 0.100
SCHEDULE = timedelta(minutes=5)  # Terraform's reconcile_schedule, */5 * * * *
LISTING_PAGE = 1000  # objects.list's maxResults as the adapter asks for it
PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
PARK_BATCH = 1000  # jobs per control call (gRPC's 4 MiB message limit)


@dataclasses.dataclass
class FarStorage(MemoryGcs):
    """The in-memory Cloud Storage, as far away as the real one: each call waits STORAGE_LATENCY first (a listing,
    each page of LISTING_PAGE) and is counted in `calls`; `seed` writes without waiting, to set the ledger up."""

    calls: int = 0

    def _far(self, calls: int = 1) -> None:
        with self._lock:
            self.calls += calls
        time.sleep(STORAGE_LATENCY * calls)

    def seed(self, bucket: str, name: str, data: bytes | str) -> None:
        super().write(bucket, name, data, 0)

    def read(
        self, bucket: str, name: str, generation: int | None = None, max_bytes: int | None = None
    ) -> tuple[bytes, int] | None:
        self._far()
        return super().read(bucket, name, generation, max_bytes)

    def write(
        self,
        bucket: str,
        name: str,
        data: bytes | str,
        if_generation_match: int,
        custom_metadata: dict[str, str] | None = None,
    ) -> int:
        self._far()
        return super().write(bucket, name, data, if_generation_match, custom_metadata)

    def copy(self, bucket: str, name: str, to_bucket: str, to_name: str) -> int | None:
        self._far()
        return super().copy(bucket, name, to_bucket, to_name)

    def delete(self, bucket: str, name: str) -> None:
        self._far()
        super().delete(bucket, name)

    def set_metadata(self, bucket: str, name: str, custom_metadata: dict[str, str]) -> bool:
        self._far()
        return super().set_metadata(bucket, name, custom_metadata)

    def names(self, bucket: str, prefix: str) -> list[str]:
        names = super().names(bucket, prefix)
        self._far(max(1, -(-len(names) // LISTING_PAGE)))
        return names

    def metadata_under(self, bucket: str, prefix: str, start_offset: str = "") -> Iterator[tuple[str, dict[str, str]]]:
        listing = list(super().metadata_under(bucket, prefix, start_offset))
        for first in range(0, max(1, len(listing)), LISTING_PAGE):
            self._far()
            yield from listing[first : first + LISTING_PAGE]


class DistantVertex(VertexJobs):
    """Vertex as far away as the real one: each call waits VERTEX_LATENCY first, and is counted by method."""

    calls: ClassVar[collections.Counter[str]] = collections.Counter()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def _call(
        self,
        what: str,
        method: str,
        path: str,
        before_retry: Callable[[], Any] | None = None,
        policy: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        with self.lock:
            self.calls[what] += 1
        time.sleep(VERTEX_LATENCY)
        return super()._call(what, method, path, before_retry, policy, **kwargs)


def swept_id(i: int) -> str:
    return f"swept-{i:05d}"


def park_jobs(stack: Stack, template: CustomJob, deployment: str, count: int) -> list[str]:
    """`count` parked jobs, one per swept request, labelled as trainctl labels its jobs; their names."""
    job = json.loads(CustomJob.to_json(template))
    names: list[str] = []
    for first in range(0, count, PARK_BATCH):
        batch = range(first, min(count, first + PARK_BATCH))
        labels = [job_labels({}, key_hash(request_key(swept_id(i))), 1, swept_id(i), deployment) for i in batch]
        names += stack.jobservice.control.park_jobs(PARENT, job, labels)
    return names


def seed_ledger(storage: FarStorage, bucket: str, template: dict, jobs: list[str]) -> None:
    """A `submitted` record and its active entry per job, copies of a real request's record."""
    for i, job in enumerate(jobs):
        key = request_key(swept_id(i))
        record = {**template, "key": key, "key_hash": key_hash(key), "request_id": swept_id(i)}
        record |= {"job_name": job, "job_state": "JOB_STATE_QUEUED", "outbox": [], "max_pending": 7 * 86400}
        storage.seed(bucket, f"ledger/{key_hash(key)}.json", json.dumps(record))
        storage.seed(bucket, f"active/{key_hash(key)}", "")


def published(subscriber: pubsub_v1.SubscriberClient, subscription: str) -> collections.Counter[str]:
    """Every event published since the last call, counted by "request state"."""
    counts: collections.Counter[str] = collections.Counter()
    while True:
        response = pull_now(subscriber, subscription, 1000)
        if not response.received_messages:
            return counts
        for received in response.received_messages:
            event = parse_event(received.message.data)
            counts[f"{event.request_id} {event.state}"] += 1
        subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])


@dataclasses.dataclass
class Tick:
    summary: dict[str, int]
    seconds: float
    vertex: collections.Counter[str]
    storage_calls: int


def tick(controller: Controller, settings: Settings, storage: FarStorage) -> Tick:
    """One tick under the function's deadline."""
    DistantVertex.calls.clear()
    storage_before = storage.calls
    start = time.monotonic()
    with deadline.handler_deadline(settings.function_timeout):
        summary = controller.reconcile()
    seconds = time.monotonic() - start
    return Tick(summary, seconds, collections.Counter(DistantVertex.calls), storage.calls - storage_before)


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    deployment = stack.deployment()
    deployment.create(stack.work_dir / "functions", TRAINCTL_LEASE="")
    try:
        stack.jobservice.control.hold_next_in_queue(seconds=3600)
        if deployment.request(fake_node_request("template", scheduling={"max_pending": "7d"})) != 200:
            raise RuntimeError("the template request was not accepted")
        template = deployment.record(request_key("template"))
    finally:
        deployment.stop()  # the ticks run in this process; the functions are not needed any more
    assert template is not None
    client = job_service_client(stack.jobservice.address)
    template_job = client.get_custom_job(name=template["job_name"])
    start = time.monotonic()
    jobs = park_jobs(stack, template_job, deployment_label(deployment.control_bucket), args.active)
    storage = FarStorage()
    seed_ledger(storage, deployment.control_bucket, template, jobs)
    setup_seconds = time.monotonic() - start
    stack.jobservice.control.cap_list_pages(args.page_cap)

    settings = dataclasses.replace(Settings.from_env(deployment.settings_env()), reconcile_concurrency=args.concurrency)
    later = [timedelta(0)]  # how far the controller's clock is ahead of this machine's
    controller = dataclasses.replace(
        Controller.from_settings(
            settings,
            gcs=storage,
            vertex_factory=lambda: DistantVertex(settings.project, settings.region, settings.vertex_endpoint),
        ),
        clock=lambda: datetime.now(UTC) + later[0],
    )
    subscriber = pubsub_v1.SubscriberClient()
    subscription = subscriber.subscription_path(LOCAL_PROJECT, f"bench-sweep-{deployment.suffix}")
    topic = pubsub_v1.PublisherClient.topic_path(LOCAL_PROJECT, deployment.events_topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    try:
        figures = measure(controller, settings, storage, later, client, jobs, subscriber, subscription, args)
    finally:
        subscriber.delete_subscription(subscription=subscription)
        stack.jobservice.control.cap_list_pages(None)
    notes = [
        f"{len(jobs):,} jobs parked in the JobService's queue and as many `submitted` records with their active "
        f"entries set up in {setup_seconds:.1f} s; injected latency {STORAGE_LATENCY * 1000:.0f} ms per Cloud Storage "
        f"call (a listing: each page of {LISTING_PAGE:,}), {VERTEX_LATENCY * 1000:.0f} ms per Vertex call (each "
        f"ListCustomJobs page, each GetCustomJob); a ListCustomJobs page holds at most {args.page_cap or 1000:,} jobs "
        "(Vertex's own maximum is not documented), each region listed in create-time windows side by side; the ledger "
        "in this process with Cloud Storage's semantics (fake-gcs-server scans a bucket's objects for every lookup); "
        f"the ticks in-process on the real adapters, inside the function's deadline ({settings.function_timeout} s), "
        f"the measured ones {SCHEDULE.total_seconds() / 60:.0f} minutes apart by the controller's clock"
    ]
    return figures, notes


def measure(
    controller: Controller,
    settings: Settings,
    storage: FarStorage,
    later: list[timedelta],
    client: Any,
    jobs: list[str],
    subscriber: pubsub_v1.SubscriberClient,
    subscription: str,
    args: argparse.Namespace,
) -> list[Figure]:
    active = len(jobs)
    first: list[Tick] = []
    while len(first) < 10:  # the first ticks after the upgrade: until every record has been read once
        first.append(tick(controller, settings, storage))
        if first[-1].summary.get("errors"):
            raise RuntimeError(f"a first tick saw {first[-1].summary}")
        if not first[-1].summary.get("deferred"):
            break
    seconds = sum(t.seconds for t in first)
    figures = [Figure("first ticks after the upgrade (each record read once)", f"{len(first)}, {seconds:.1f} s")]

    for name in jobs[: args.ended]:
        client.cancel_custom_job(name=name)
    later[0] += SCHEDULE
    measured = tick(controller, settings, storage)
    events = published(subscriber, subscription)
    summary, calls = measured.summary, measured.vertex
    vertex_calls = sum(calls.values())
    cancelled_once = sum(1 for i in range(args.ended) if events[f"{swept_id(i)} cancelled"] == 1)
    if summary.get("errors") or summary.get("deferred") or summary.get("cancelled", 0) != args.ended:
        raise RuntimeError(f"the measured tick saw {summary}")
    figures += [
        Figure(
            f"reconcile tick, {active:,} active of which {args.ended:,} ended, concurrency {args.concurrency}",
            f"{measured.seconds:.1f} s",
            f"≤ {GOAL_SECONDS:.0f} s, none deferred",
            measured.seconds <= GOAL_SECONDS,
        ),
        Figure(
            "Vertex calls in that tick",
            f"{vertex_calls} ({calls['ListCustomJobs']} ListCustomJobs pages, {calls['GetCustomJob']} GetCustomJob), "
            f"{vertex_calls / active:.2%} of the active requests",
            f"≤ {GOAL_CALL_SHARE:.0%} of the active requests",
            vertex_calls <= GOAL_CALL_SHARE * active,
        ),
        Figure(
            "records looked at in that tick (ended, or due by the clock)",
            f"{active - summary.get('unchanged', 0):,} of {active:,}; {measured.storage_calls:,} Cloud Storage calls",
        ),
        Figure(
            "events published by that tick",
            f"{sum(events.values())}; `cancelled` exactly once for {cancelled_once:,} of the {args.ended:,} ended",
            "each ended request's `cancelled` once, nothing else",
            cancelled_once == args.ended and sum(events.values()) == args.ended,
        ),
    ]
    later[0] += SCHEDULE
    quiet = tick(controller, settings, storage)
    events = published(subscriber, subscription)
    figures.append(
        Figure(
            f"next tick, nothing new ({active - args.ended:,} active)",
            f"{quiet.seconds:.1f} s, {sum(quiet.vertex.values())} Vertex calls, {quiet.storage_calls:,} Cloud Storage "
            f"calls, {quiet.summary.get('unchanged', 0):,} left alone, {sum(events.values())} events",
        )
    )
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--active", type=int, default=20000, help="active requests (default 20000)")
    parser.add_argument("--ended", type=int, default=200, help="of them, jobs that end before the tick (default 200)")
    parser.add_argument("--concurrency", type=int, default=16, help="records observed at once (default 16)")
    parser.add_argument(
        "--page-cap",
        type=int,
        default=None,
        help="jobs a ListCustomJobs page holds at most (default: the local JobService's 1,000; Vertex's maximum "
        "is not documented, so 100 shows the sweep's cost should it be that)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("reconcile_sweep", parse_args(argv), run)


if __name__ == "__main__":
    main()
