"""The web console's pages at scale (issue 45, point 2): each page of `trainctl console`, over HTTP, with N requests
in its history; the goal is ≤ 1 s a page on this machine.

The deployment is real (bench/stack.py's emulators, the local JobService, the functions served): `--active` markers
delivered to on_dataset_upload give real ledger records and events, their jobs held in the JobService's queue so they
stay active. The history is `--requests` finished outcomes filed as the controller files them (an empty
`history/<day>/<name>` object, the outcome in its metadata: bench/report_listing.py's write_history), spread over
`--days` days. Then `trainctl console --port 0` is started as a user starts it, and each page is fetched: the first
fetch (cold: nothing cached in the app) and the median of `--runs` more (warm):

- now (`/`), a request (`/requests/<id>` of an active one), models (`/models`);
- history over the whole window (`/history?since=<days>d`): its first page, a middle one and the last (50 a page),
  then over the last 24 hours (the console's default window).

    python bench/console_pages.py [--requests 10000] [--active 20] [--days 30] [--runs 5]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.reconcile_scale import start_active  # noqa: E402
from bench.report import RESULTS, Figure  # noqa: E402
from bench.report_listing import write_history  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from trainctl.console.views import PAGE_SIZE  # noqa: E402

PAGE_GOAL_SECONDS = 1.0


def fetch(url: str) -> tuple[float, int, bytes]:
    """Seconds to the whole body, the status and the body of one GET."""
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as refused:
        body, status = refused.read(), refused.code
    return time.monotonic() - start, status, body


class Console:
    """`trainctl console --port 0` against the deployment whose settings are `env`, stopped on exit."""

    def __init__(self, env: dict[str, str], log: Path):
        self.log = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trainctl", "console", "--port", "0"],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def __enter__(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # its first line, flushed; "" if it ended first
        if not line.startswith("console: http://"):
            self.__exit__()
            raise RuntimeError(f"trainctl console did not start: {line!r} (log: {self.log.name})")
        return line.split(" ", 1)[1].strip().rstrip("/")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def time_page(url: str, runs: int) -> tuple[float, float, bytes]:
    """The first fetch's seconds, the median of `runs` more, and the last body; a page that is not 200 stops the
    benchmark, naming it."""
    cold, status, body = fetch(url)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}: {body[:300]!r}")
    warm = []
    for _ in range(runs):
        seconds, status, body = fetch(url)
        if status != 200:
            raise RuntimeError(f"{url} answered {status}: {body[:300]!r}")
        warm.append(seconds)
    return cold, statistics.median(warm) if warm else cold, body


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    deployment = stack.deployment()
    try:
        deployment.create(stack.work_dir / f"functions-{deployment.suffix}", TRAINCTL_LEASE="")
        stack.jobservice.control.hold_next_in_queue(seconds=3600, count=args.active + 5)
        keys = start_active(deployment, args.active)
        record = deployment.record(keys[0])
        assert record is not None, "the first marker left no ledger record"
        write_seconds = write_history(stack, deployment.control_bucket, args.requests, args.days, datetime.now(UTC))
        env = {**os.environ, **deployment.settings_env(TRAINCTL_LEASE=""), "PYTHONPATH": str(REPO_ROOT)}
        with Console(env, stack.work_dir / "console.log") as base:
            pages = {
                "now (/)": f"{base}/",
                "a request (/requests/<id>)": f"{base}/requests/{record['request_id']}",
                "models (/models)": f"{base}/models",
                f"history, {args.days}d, first page": f"{base}/history?since={args.days}d&page=1",
            }
            last = max(1, math.ceil(args.requests / PAGE_SIZE))
            middle = max(1, last // 2)
            pages[f"history, {args.days}d, page {middle} (middle)"] = f"{base}/history?since={args.days}d&page={middle}"
            pages[f"history, {args.days}d, page {last} (last)"] = f"{base}/history?since={args.days}d&page={last}"
            pages["history, 24h, first page"] = f"{base}/history?since=24h"
            timed = {name: time_page(url, args.runs) for name, url in pages.items()}
    finally:
        deployment.stop()
    for name, (_, _, body) in timed.items():
        if name.startswith("history") and b'id="figures"' not in body:
            raise RuntimeError(f"{name}: the page has no #figures")
        whole_window = f"<small>{args.requests} in the window;".encode()
        if name.startswith(f"history, {args.days}d") and whole_window not in body:  # every day listed, each once
            raise RuntimeError(f"{name}: the page does not count the window's {args.requests} requests")
    figures = []
    for name, (cold, warm, _) in timed.items():
        figures.append(Figure(f"{name}, first fetch", f"{cold * 1000:.0f} ms", "≤ 1 s", cold <= PAGE_GOAL_SECONDS))
        figures.append(
            Figure(f"{name}, median of {args.runs} more", f"{warm * 1000:.0f} ms", "≤ 1 s", warm <= PAGE_GOAL_SECONDS)
        )
    notes = [
        f"{args.requests:,} finished requests filed in the history over {args.days} days (written to fake-gcs-server "
        f"in {write_seconds:.1f} s) and {args.active} active requests (real markers, jobs held in the queue); "
        "`trainctl console --port 0` in its own process, each page fetched over HTTP (urllib, one connection each)",
    ]
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="finished requests in history (default 10000)")
    parser.add_argument("--active", type=int, default=20, help="active requests (default 20)")
    parser.add_argument("--days", type=int, default=30, help="days the history is spread over (default 30)")
    parser.add_argument("--runs", type=int, default=5, help="warm fetches per page after the first (default 5)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("console_pages", parse_args(argv), run)


if __name__ == "__main__":
    main()
