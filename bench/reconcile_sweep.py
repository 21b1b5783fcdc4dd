"""A sweep that scales (issue 16 item 6): one `reconcile` tick over thousands of active requests, with the
latencies of the real services injected in front of the local ones — 30 ms before every Cloud Storage call
(fake-gcs-server) and 100 ms before every GetCustomJob (the local JobService) — at several concurrencies.

The active requests are ledger records written straight to the control bucket, each `submitted` with a real
job in the JobService held in its queue (a few dozen jobs shared by all records: the sweep reads each record
and asks Vertex about its job, and nothing changes, so every figure is the cost of looking). The tick runs
in this process, on the real adapters, with a deadline as the deployed function has.

    python bench/reconcile_sweep.py [--active 5000] [--concurrency 8,16,32] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions import deadline  # noqa: E402
from functions.controller import Controller  # noqa: E402
from functions.gcs import Gcs  # noqa: E402
from functions.keys import key_hash, request_key  # noqa: E402
from functions.settings import Settings  # noqa: E402
from functions.vertex import VertexJobs  # noqa: E402
from tests.integration.deployment import Deployment, fake_node_request  # noqa: E402

GOAL_SECONDS = 60.0
STORAGE_LATENCY = 0.030
VERTEX_LATENCY = 0.100


class DistantGcs(Gcs):
    """Cloud Storage as far away as the real one: each call waits STORAGE_LATENCY first."""

    def _call(self, method: str, url: str, missing_ok: bool = False, **kwargs: Any) -> Any:
        time.sleep(STORAGE_LATENCY)
        return super()._call(method, url, missing_ok, **kwargs)


class DistantVertex(VertexJobs):
    """Vertex as far away as the real one: each GetCustomJob waits VERTEX_LATENCY first."""

    def get(self, name: str) -> Any:
        time.sleep(VERTEX_LATENCY)
        return super().get(name)


def write_active(stack: Stack, deployment: Deployment, template: dict, jobs: list[str], count: int) -> float:
    """`count` submitted records and their active/ entries; the seconds it took (plain JSON API uploads)."""
    local = threading.local()
    host = urllib.parse.urlsplit(stack.gcs.url).netloc

    def upload(name: str, body: str) -> None:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection(host, timeout=60)
        quoted = urllib.parse.quote(name, safe="")
        path = f"/upload/storage/v1/b/{deployment.control_bucket}/o?uploadType=media&name={quoted}"
        local.connection.request("POST", path, body, {"content-type": "application/json"})
        response = local.connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"fake-gcs-server answered {response.status} to writing {name}")

    def write(i: int) -> None:
        key = request_key(f"swept-{i:05d}")
        record = {**template, "key": key, "key_hash": key_hash(key), "request_id": f"swept-{i:05d}"}
        record |= {"job_name": jobs[i % len(jobs)], "outbox": [], "max_pending": 7 * 86400}
        upload(f"ledger/{key_hash(key)}.json", json.dumps(record))
        upload(f"active/{key_hash(key)}", key_hash(key))

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(count)))
    return time.monotonic() - start


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    deployment = stack.deployment()
    deployment.create(stack.work_dir / "functions", TRAINCTL_LEASE="")
    try:
        stack.jobservice.control.hold_next_in_queue(seconds=3600, count=args.jobs)
        for i in range(args.jobs):
            request = fake_node_request(f"shared-{i:03d}", scheduling={"max_pending": "7d"})
            if deployment.request(request) != 200:
                raise RuntimeError(f"request shared-{i:03d} was not accepted")
        records = [deployment.record(request_key(f"shared-{i:03d}")) for i in range(args.jobs)]
        jobs = [r["job_name"] for r in records if r]
        write_seconds = write_active(stack, deployment, records[0], jobs, args.active)
    finally:
        deployment.stop()  # the tick runs in this process; the functions are not needed any more
    base = Settings.from_env(deployment.settings_env())
    figures, notes = [], []
    for concurrency in args.concurrency:
        settings = dataclasses.replace(base, reconcile_concurrency=concurrency)
        controller = Controller.from_settings(
            settings,
            gcs=DistantGcs(settings.project),
            vertex_factory=lambda s=settings: DistantVertex(s.project, s.region, s.vertex_endpoint),
        )
        start, cpu_start = time.monotonic(), time.process_time()
        with deadline.handler_deadline(settings.function_timeout):
            summary = controller.reconcile()
        seconds, cpu = time.monotonic() - start, time.process_time() - cpu_start
        total = args.active + args.jobs
        if summary.get("errors") or summary.get("active", 0) + summary.get("deferred", 0) != total:
            raise RuntimeError(f"the tick at concurrency {concurrency} saw {summary}")
        deferred = summary.get("deferred", 0)
        figures.append(
            Figure(
                f"reconcile tick, {total:,} active, concurrency {concurrency}",
                f"{seconds:.1f} s" + (f" ({deferred:,} deferred to the next tick)" if deferred else ""),
                f"≤ {GOAL_SECONDS:.0f} s, none deferred",
                seconds <= GOAL_SECONDS and not deferred,
            )
        )
        # The tick's own CPU (this process: every thread): on a loaded machine the wall time above is bounded
        # by it rather than by the latencies; a deployed reconcile has its function's vCPU to itself.
        figures.append(
            Figure(
                f"CPU of that tick (user + sys), concurrency {concurrency}",
                f"{cpu:.1f} s ({cpu / total * 1000:.1f} ms per request)",
            )
        )
    notes.append(
        f"{args.active:,} ledger records written straight to the control bucket in {write_seconds:.1f} s, each "
        f"`submitted` with one of {args.jobs} real jobs held in the JobService's queue; injected latency "
        f"{STORAGE_LATENCY * 1000:.0f} ms per Cloud Storage call, {VERTEX_LATENCY * 1000:.0f} ms per GetCustomJob; "
        f"the tick in-process on the real adapters, inside the function's deadline ({base.function_timeout} s)"
    )
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--active", type=int, default=5000, help="active requests (default 5000)")
    parser.add_argument("--jobs", type=int, default=40, help="real queued jobs the records share (default 40)")
    parser.add_argument(
        "--concurrency",
        type=lambda text: [int(c) for c in text.split(",")],
        default=[8, 16, 32],
        help="comma-separated concurrencies to tick at (default 8,16,32)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("reconcile_sweep", parse_args(argv), run)


if __name__ == "__main__":
    main()
