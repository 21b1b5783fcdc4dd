"""Reconcile against history (issue 8): the `reconcile` function's time with N active requests, then again
after M finished requests were added to the ledger; the ratio shows whether the sweep grows with history.

The active requests are real: markers delivered to `on_dataset_upload`, their jobs held in the JobService's
queue, so every tick reads each record and asks Vertex about its job and changes nothing. The finished ones
are what a finished request leaves in the ledger — `ledger/<key hash>.json` in a final state and no `active/`
entry — written straight to the control bucket (running 10,000 jobs through the JobService would measure the
fake training, not this). Two deployments, alike but for that history, are ticked in turn over HTTP; each
figure is the median of `--runs` ticks after a warm-up round.

    python bench/reconcile_scale.py [--active 50] [--finished 10000] [--runs 9] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions.ledger.keys import key_hash, marker_key  # noqa: E402
from tests.integration.deployment import Deployment  # noqa: E402

RATIO_GOAL = 1.2


def start_active(deployment: Deployment, count: int) -> list[str]:
    """Deliver `count` markers; the request keys of the submitted requests."""

    def deliver(i: int) -> str:
        blob = deployment.upload_marker(f"churn/active-{i:04d}/")
        status = deployment.deliver("on_dataset_upload", deployment.storage_event(blob))
        if status >= 300:
            raise RuntimeError(f"marker {blob.name} was not accepted ({status})")
        return marker_key(blob.bucket.name, blob.name, blob.generation)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(deliver, range(count)))


def write_finished(stack: Stack, deployment: Deployment, template: dict, count: int) -> float:
    """`count` finished ledger records shaped like `template` (a real record); the seconds it took. Plain
    JSON API uploads on kept-alive connections: the storage client's own overhead would make this minutes."""
    local = threading.local()
    host = urllib.parse.urlsplit(stack.gcs.url).netloc

    def write(i: int) -> None:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection(host, timeout=60)
        key = marker_key(deployment.data_bucket, f"churn/history-{i:05d}/_SUCCESS", i + 1)
        finished = {
            **template,
            "key": key,
            "key_hash": key_hash(key),
            "request_id": f"churn-history-{i:05d}-{i + 1}",
            "state": "succeeded",
            "job_state": "JOB_STATE_SUCCEEDED",
            "outbox": [],
        }
        finished.pop("outbox_since", None)
        name = urllib.parse.quote(f"ledger/{key_hash(key)}.json", safe="")
        path = f"/upload/storage/v1/b/{deployment.control_bucket}/o?uploadType=media&name={name}"
        local.connection.request("POST", path, json.dumps(finished), {"content-type": "application/json"})
        response = local.connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"fake-gcs-server answered {response.status} to a ledger write")

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(count)))
    return time.monotonic() - start


def tick(deployment: Deployment, active: int) -> float:
    start = time.monotonic()
    summary = deployment.reconcile()
    seconds = time.monotonic() - start
    if summary.get("active") != active or summary.get("errors"):
        raise RuntimeError(f"reconcile saw {summary}, expected {active} active requests and no errors")
    return seconds


def list_active_seconds(deployment: Deployment, runs: int = 5) -> float:
    """What listing `active/` alone costs here (fake-gcs-server), median of a few."""
    client = deployment.storage()
    times = []
    for _ in range(runs):
        start = time.monotonic()
        list(client.list_blobs(deployment.control_bucket, prefix="active/"))
        times.append(time.monotonic() - start)
    return statistics.median(times)


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    # Two deployments alike but for the history, ticked in turn: load that comes and goes hits both alike.
    plain, historic = stack.deployment(), stack.deployment()
    try:
        for deployment in (plain, historic):
            deployment.create(stack.work_dir / f"functions-{deployment.suffix}", TRAINCTL_LEASE="")
        stack.jobservice.control.hold_next_in_queue(seconds=3600, count=2 * args.active + 5)
        keys = {deployment.suffix: start_active(deployment, args.active) for deployment in (plain, historic)}
        template = historic.record(keys[historic.suffix][0])
        assert template is not None
        write_seconds = write_finished(stack, historic, template, args.finished)
        times: dict[str, list[float]] = {plain.suffix: [], historic.suffix: []}
        for round_ in range(args.runs + 1):  # the first round warms up
            for deployment in (plain, historic) if round_ % 2 else (historic, plain):
                seconds = tick(deployment, args.active)
                if round_:
                    times[deployment.suffix].append(seconds)
        listing = {deployment.suffix: list_active_seconds(deployment) for deployment in (plain, historic)}
    finally:
        for deployment in (plain, historic):
            deployment.stop()
    before, after = times[plain.suffix], times[historic.suffix]
    ratio = statistics.median(after) / statistics.median(before)
    figures = [
        Figure(f"reconcile, {args.active} active", f"{statistics.median(before) * 1000:.0f} ms"),
        Figure(
            f"reconcile, {args.active} active + {args.finished:,} finished",
            f"{statistics.median(after) * 1000:.0f} ms",
        ),
        Figure("ratio (with history / without)", f"{ratio:.2f}", f"≤ {RATIO_GOAL}", ratio <= RATIO_GOAL),
        Figure(
            f"reconcile per active request ({args.active} active)",
            f"{statistics.median(before) / args.active * 1000:.1f} ms",
        ),
    ]
    notes = [
        f"two deployments on one stack, one with {args.finished:,} finished records (written in "
        f"{write_seconds:.1f} s), ticked in turn; median of {args.runs} ticks each after a warm-up round "
        f"(ranges {min(before) * 1000:.0f}–{max(before) * 1000:.0f} ms and "
        f"{min(after) * 1000:.0f}–{max(after) * 1000:.0f} ms)",
        f"listing active/ alone on fake-gcs-server: {listing[plain.suffix] * 1000:.1f} ms without the history, "
        f"{listing[historic.suffix] * 1000:.1f} ms with it",
    ]
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--active", type=int, default=50, help="active requests (default 50)")
    parser.add_argument("--finished", type=int, default=10_000, help="finished requests added (default 10000)")
    parser.add_argument("--runs", type=int, default=9, help="timed ticks per figure (default 9)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("reconcile_scale", parse_args(argv), run)


if __name__ == "__main__":
    main()
