"""Controller under load (issue 8): distinct marker uploads plus a redelivery of each, concurrently, through
the local stack's event path; then a storm of duplicate deliveries.

The path is the one `trainctl local up` wires: an upload to fake-gcs-server → its notification on the Pub/Sub
emulator → a push subscription → the Eventarc stand-in (local/eventarc's conversion) → `on_dataset_upload`
served by functions-framework, one process per function → the local JobService. The bench's bridge adds a
stopwatch and, the moment a marker's event first arrives, posts the same event again to the function (an
at-least-once redelivery racing the first). Jobs stay queued in the JobService, so what is measured is the
controller, not the fake training's processes.

Phases, each with its own markers: `--rate` uploads per second delivered directly to the function (Eventarc's
part left out), all of them at once (a queue: the capacity), and `--rate` per second through the emulator's
push. Figures: upload → CreateCustomJob latency (upload start on this side, the job's create_time on the
JobService's; the same clock), split by hop; events handled per second; duplicates handled per second when
every marker is delivered once more with `--storm-threads` concurrent senders; the invariants (one job per
marker, one `submitted` event each, every ledger record submitted, nothing rejected or failed).

    python bench/controller_load.py [--markers 300] [--rate 5] [--storm-threads 16] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.delivery import (  # noqa: E402
    TARGET,
    Delivery,
    RecordingBridge,
    cpu_seconds,
    deliver_until_accepted,
    peak_rss_mib,
    subscribe_bridge,
)
from bench.report import RESULTS, Figure, percentile  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions.intake.triggers import derive_request_id  # noqa: E402
from functions.ledger.keys import key_hash, marker_key  # noqa: E402
from local.jobservice.client import job_service_client  # noqa: E402
from local.names import LOCAL_PROJECT, LOCAL_REGION  # noqa: E402
from tests.integration.deployment import DATA_SHARD, Deployment  # noqa: E402


@dataclass
class Upload:
    bucket: str
    name: str
    started: float = 0.0  # time.time(), the clock the JobService stamps create_time with
    finished: float = 0.0
    generation: str = ""

    @property
    def request_key(self) -> str:
        return marker_key(self.bucket, self.name, self.generation)

    @property
    def key_hash(self) -> str:
        return key_hash(self.request_key)


@dataclass
class Intake:
    """One phase: markers uploaded at a rate, each delivered twice, and what the bridge saw of them."""

    mode: str  # push, direct, burst (direct, all at once) or warmup (direct)
    rate: float
    uploads: list[Upload]
    first: dict[str, Delivery]
    events: dict[str, tuple[dict[str, str], bytes]]
    deliveries: int
    seconds: float


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    deployment = stack.deployment()
    # Production's lease (10 min, the default): the test deployment's 3 s would let a slow first delivery's
    # claim be taken over, which is not what this measures.
    deployment.create(stack.work_dir / "functions", TRAINCTL_LEASE="")
    stack.jobservice.control.hold_next_in_queue(seconds=3600, count=args.warmups + 2 * args.markers + 10)
    events = deployment.events()
    redeliveries: list[Future] = []
    pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="delivery")
    bridge = RecordingBridge(
        deployment.functions[TARGET].url,
        deployment.data_bucket,
        lambda event: redeliveries.append(pool.submit(deliver_until_accepted, deployment, event)),
    )

    def intake(mode: str, count: int) -> Intake:
        bridge.reset()
        redeliveries.clear()
        direct = (
            None if mode == "push" else lambda item, event: pool.submit(bridge.forward, item.name, event, item.finished)
        )
        rate = 0.0 if mode == "burst" else args.rate
        uploads = upload_markers(deployment, mode, count, rate, direct)
        done = wait_for_intake(bridge, uploads, redeliveries, timeout=args.timeout)
        seconds = done - min(u.started for u in uploads)
        deliveries = bridge.deliveries + len(redeliveries)
        return Intake(mode, rate, uploads, dict(bridge.first), dict(bridge.events), deliveries, seconds)

    subscription = None
    try:
        # Warm the instance first (its first submission imports the Vertex client); not measured. Direct
        # delivery before the push subscription exists, so that those markers are not pushed as well.
        warmup = intake("warmup", args.warmups)
        direct = intake("direct", args.markers)
        burst = intake("burst", args.markers)
        subscription = subscribe_bridge(stack, deployment.data_bucket, bridge.url)
        phases = [intake("push", args.markers), direct, burst]
        repeated = [event for phase in phases for event in phase.events.values()]
        cpu_before = cpu_by_component(stack, deployment)
        storm_statuses, storm_seconds = duplicate_storm(deployment, repeated, args.storm_threads)
        storm_cpu = {k: v - cpu_before[k] for k, v in cpu_by_component(stack, deployment).items()}
        function_rss = peak_rss_mib(deployment.functions[TARGET].process.pid)
    finally:
        if subscription is not None:  # before the bridge stops, or the emulator pushes to it in a tight loop
            stack.pubsub.delete_subscription(subscription)
        bridge.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        deployment.stop()

    jobs = created_jobs(stack, deployment)
    uploads = [upload for phase in phases for upload in phase.uploads]
    published = events.drain()
    states = Counter(event.state for event, _ in published)
    submitted = Counter(event.request_id for event, _ in published if event.state == "submitted")
    ledger_states = Counter((deployment.record(u.request_key) or {}).get("state") for u in uploads)
    known = {u.key_hash for u in uploads + warmup.uploads}
    violations = {
        "markers without exactly one job": sum(1 for u in uploads if len(jobs.get(u.key_hash, [])) != 1),
        "jobs of no marker": sum(len(created) for key, created in jobs.items() if key not in known),
        "markers without exactly one submitted event": sum(
            1 for u in uploads if submitted[derive_request_id(u.name, u.generation)] != 1
        ),
        "ledger records not submitted": len(uploads) - ledger_states["submitted"],
        "rejected or failed events": states["rejected"] + states["failed"],
        "duplicate-storm deliveries not answered 2xx": sum(1 for status in storm_statuses if status >= 300),
    }
    storm_rate = len(storm_statuses) / storm_seconds
    figures, notes = [], []
    paths = {
        "push": f"{args.rate:g}/s through the Pub/Sub emulator's push",
        "direct": f"{args.rate:g}/s delivered directly",
        "burst": "all at once, delivered directly",
    }
    for phase in phases:
        path, paced = paths[phase.mode], phase.rate > 0  # the goals are for a paced load, not a queue
        latencies, parts = latency(phase, jobs)
        p50, p95, p99 = (percentile(latencies, q) for q in (50, 95, 99))
        figures += [
            Figure(
                f"upload → CreateCustomJob p50, {path}", f"{p50 * 1000:.0f} ms", *goal(paced, "≤ 200 ms", p50 <= 0.2)
            ),
            Figure(f"upload → CreateCustomJob p95, {path}", f"{p95 * 1000:.0f} ms"),
            Figure(
                f"upload → CreateCustomJob p99, {path}", f"{p99 * 1000:.0f} ms", *goal(paced, "≤ 1000 ms", p99 <= 1)
            ),
            Figure(f"events handled per second, {path}", f"{phase.deliveries / phase.seconds:.1f}"),
        ]
        notes.append(
            f"{path}: {len(phase.uploads)} markers, {phase.deliveries} deliveries in {phase.seconds:.1f} s; "
            "latency parts, p50/p99 ms: "
            + "; ".join(f"{part} {percentile(v, 50) * 1000:.0f}/{percentile(v, 99) * 1000:.0f}" for part, v in parts)
        )
    figures += [
        Figure("duplicate events handled per second (storm)", f"{storm_rate:.1f}", "≥ 100", storm_rate >= 100),
        Figure("jobs created / distinct markers", f"{sum(len(created) for created in jobs.values())} / {len(known)}"),
        Figure("invariant violations", str(sum(violations.values())), "0", sum(violations.values()) == 0),
        Figure(
            "peak RSS of the on_dataset_upload function (warm, after the run)",
            f"{function_rss:.0f} MiB",
            "≤ 256 MiB",
            function_rss <= 256,
        ),
    ]
    notes += [
        f"every marker delivered twice: once through the path named, and a redelivery posted the moment the first "
        f"reaches the bridge; then {len(storm_statuses)} duplicate deliveries from {args.storm_threads} senders in "
        f"{storm_seconds:.2f} s; {args.warmups} warm-up markers before, not measured (their jobs are counted)",
        "CPU per duplicate in the storm, ms: "
        + ", ".join(f"{name} {seconds / len(storm_statuses) * 1000:.1f}" for name, seconds in storm_cpu.items()),
        f"events published: {dict(sorted(states.items()))}; violations: {violations}",
    ]
    return figures, notes


def goal(applies: bool, text: str, met: bool) -> tuple[str, bool | None]:
    return (text, met) if applies else ("", None)


def latency(phase: Intake, jobs: dict[str, list[float]]) -> tuple[list[float], list[tuple[str, list[float]]]]:
    """Upload start → create_time of each marker's job, and the parts of that path."""
    latencies: list[float] = []
    parts: dict[str, list[float]] = {}
    names = {
        "upload call": lambda u, d, created: u.finished - u.started,
        "upload → notification published (fake-gcs-server)": lambda u, d, created: d.published - u.started,
        "published → at the bridge (Pub/Sub emulator's push)": lambda u, d, created: d.arrived - d.published,
        "bridge → create_time (the controller)": lambda u, d, created: created - d.arrived,
        "bridge → the function's answer": lambda u, d, created: d.answered - d.arrived,
    }
    if phase.mode != "push":
        del names["upload → notification published (fake-gcs-server)"]
        del names["published → at the bridge (Pub/Sub emulator's push)"]
    for upload in phase.uploads:
        created, arrival = jobs.get(upload.key_hash, []), phase.first.get(upload.name)
        if len(created) == 1 and arrival is not None:
            latencies.append(created[0] - upload.started)
            for name, part in names.items():
                parts.setdefault(name, []).append(part(upload, arrival, created[0]))
    return latencies, list(parts.items())


def upload_markers(
    deployment: Deployment, folder: str, count: int, rate: float, deliver: Callable[[Upload, Any], Any] | None
) -> list[Upload]:
    """Upload `count` empty markers (each after a data shard), paced at `rate` per second (0: all at once), from a
    pool of senders; `deliver(upload, event)` hands each uploaded marker's CloudEvent on (None: Pub/Sub delivers it)."""
    local = threading.local()
    uploads = [Upload(deployment.data_bucket, f"churn/{folder}-{i:04d}/_SUCCESS") for i in range(count)]

    def upload(item: Upload) -> None:
        if not hasattr(local, "bucket"):
            local.bucket = deployment.storage().bucket(deployment.data_bucket)
        # The data first, untimed: admission refuses a dataset with no data in it.
        local.bucket.blob(item.name.replace("_SUCCESS", "part-0.csv")).upload_from_string(DATA_SHARD)
        blob = local.bucket.blob(item.name)
        item.started = time.time()
        blob.upload_from_string(b"")
        item.finished = time.time()
        item.generation = str(blob.generation)
        if deliver is not None:
            deliver(item, deployment.storage_event(blob))

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="uploader") as pool:
        start = time.monotonic()
        futures = []
        for i, item in enumerate(uploads):
            if rate:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            futures.append(pool.submit(upload, item))
        for future in futures:
            future.result()
    return uploads


def wait_for_intake(
    bridge: RecordingBridge, uploads: list[Upload], redeliveries: list[Future], timeout: float
) -> float:
    """Until every marker's first delivery and its redelivery were answered; the time of the last answer."""
    deadline = time.monotonic() + timeout

    # Count the markers only: with Pub/Sub's push the bridge also gets the data shards uploaded before them.
    def delivered() -> int:
        return sum(1 for upload in uploads if upload.name in bridge.first)

    while delivered() < len(uploads) or len(redeliveries) < len(uploads):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{delivered()} of {len(uploads)} markers delivered after {timeout} s")
        time.sleep(0.05)
    wait(redeliveries, timeout=max(1.0, deadline - time.monotonic()))
    return max(time.time(), *(bridge.first[upload.name].answered for upload in uploads))


def duplicate_storm(deployment: Deployment, events: list, threads: int) -> tuple[list[int], float]:
    """Post every event once more from `threads` senders, each on a kept-alive connection as a push
    subscription's would be; the statuses and the seconds it took."""
    port = deployment.functions[TARGET].port
    local = threading.local()

    def send(event: tuple[dict[str, str], bytes]) -> int:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        headers, body = event
        try:
            local.connection.request("POST", "/", body, headers)
            response = local.connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            del local.connection  # the server closed it; a retry of ours would be a second duplicate
            return 599

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="storm") as pool:
        start = time.monotonic()
        statuses = list(pool.map(send, events))
        return statuses, time.monotonic() - start


def cpu_by_component(stack: Stack, deployment: Deployment) -> dict[str, float]:
    own = os.times()
    return {
        "the function": cpu_seconds(deployment.functions[TARGET].process.pid),
        "Pub/Sub emulator": cpu_seconds(stack.pubsub.process.pid),
        "fake-gcs-server": cpu_seconds(stack.gcs.process.pid),
        "JobService": cpu_seconds(stack.jobservice.process.pid),
        "the bench (senders, bridge)": own.user + own.system,
    }


def created_jobs(stack: Stack, deployment: Deployment) -> dict[str, list[float]]:
    """Key hash label → create times (epoch seconds) of every job of this deployment (its output bucket)."""
    client = job_service_client(stack.jobservice.address)
    outputs = f"gs://{deployment.control_bucket}/"
    jobs: dict[str, list[float]] = {}
    for job in client.list_custom_jobs(request={"parent": f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"}):
        if job.job_spec.base_output_directory.output_uri_prefix.startswith(outputs):
            jobs.setdefault(job.labels.get("trainctl_key", ""), []).append(job.create_time.timestamp())
    return jobs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markers", type=int, default=300, help="distinct markers (default 300)")
    parser.add_argument("--rate", type=float, default=5.0, help="uploads per second; 0: all at once (default 5)")
    parser.add_argument("--warmups", type=int, default=5, help="markers sent first, not measured (default 5)")
    parser.add_argument("--storm-threads", type=int, default=16, help="concurrent duplicate senders (default 16)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the intake may take (default 600)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("controller_load", parse_args(argv), run)


if __name__ == "__main__":
    main()
