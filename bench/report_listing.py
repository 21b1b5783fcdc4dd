"""What `trainctl report` costs at scale (issue 15): the ledger listing behind it with N finished requests.

N outcomes are filed as the controller files them — an empty `history/<day>/<key hash>` object with the
outcome in its metadata, spread over the last `--days` days — written straight to fake-gcs-server (running
100,000 jobs would measure the fake training, not this). Then, median of `--runs`: the listing of the whole
window (Ledger.outcomes), the whole report built from it, and a one-day window. For comparison, reading
records one by one (what `Ledger.all_records` does) is timed on a sample and scaled to N.

    python bench/report_listing.py [--finished 100000] [--days 30] [--runs 3] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import random
import statistics
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions.gcs import Gcs  # noqa: E402
from functions.history import METADATA_KEY, Outcome  # noqa: E402
from functions.ledger import HISTORY_PREFIX, Ledger  # noqa: E402
from local.names import LOCAL_PROJECT  # noqa: E402
from trainctl.report import build_report  # noqa: E402

PAGE = 1000  # objects per listing call (Gcs.metadata_under's maxResults, the JSON API's largest page)
READ_SAMPLE = 500
REPORT_GOAL_SECONDS = 60.0  # a person waiting for a weekly report at 100,000 finished requests


def outcome(i: int, now: datetime, days: int) -> Outcome:
    rng = random.Random(i)
    ended = now - timedelta(seconds=rng.uniform(60, days * 86400 - 60))
    started = ended - timedelta(seconds=rng.uniform(60, 7200))
    state = rng.choice(["succeeded"] * 6 + ["failed", "cancelled", "rejected"])
    return Outcome(
        request_id=f"bench-{i:06d}",
        state=state,
        reason=rng.choice(["user", "capacity", "quota"]) if state == "failed" else None,
        time=ended,
        accepted=None if state == "rejected" else started - timedelta(seconds=rng.uniform(5, 600)),
        started=None if state == "rejected" else started,
        ended=None if state == "rejected" else ended,
        gpus=0 if state == "rejected" else rng.choice([2, 4, 8]),
        hourly_usd=0.0 if state == "rejected" else rng.choice([2.5, 7.3, 29.4]),
        labels={"team": rng.choice(["vision", "ranking", "speech"])},
    )


def write_history(stack: Stack, bucket: str, count: int, days: int, now: datetime) -> float:
    """`count` history objects as the ledger writes them (multipart, metadata, empty body); the seconds taken."""
    local = threading.local()
    host = urllib.parse.urlsplit(stack.gcs.url).netloc
    boundary = "bench-history"

    def write(i: int) -> None:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection(host, timeout=60)
        found = outcome(i, now, days)
        resource = {
            "name": f"{HISTORY_PREFIX}{found.time:%Y-%m-%d}/{i:064x}",
            "contentType": "application/octet-stream",
            "metadata": {METADATA_KEY: found.model_dump_json()},
        }
        body = (
            f"--{boundary}\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n{json.dumps(resource)}\r\n"
            f"--{boundary}\r\ncontent-type: application/octet-stream\r\n\r\n\r\n--{boundary}--\r\n"
        )
        path = f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart"
        local.connection.request("POST", path, body, {"content-type": f"multipart/related; boundary={boundary}"})
        response = local.connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"fake-gcs-server answered {response.status} to a history write")

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(count)))
    return time.monotonic() - start


def timed(action, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        start = time.monotonic()
        result = action()
        times.append(time.monotonic() - start)
    return statistics.median(times), result


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    deployment = stack.deployment()
    deployment.provision()
    now = datetime.now(UTC)
    write_seconds = write_history(stack, deployment.control_bucket, args.finished, args.days, now)
    ledger = Ledger(Gcs(LOCAL_PROJECT), deployment.control_bucket)
    since = now - timedelta(days=args.days)

    listing_seconds, outcomes = timed(lambda: ledger.outcomes(since), args.runs)
    assert isinstance(outcomes, list) and len(outcomes) == args.finished, f"listed {len(outcomes)}"
    report_seconds, _ = timed(lambda: build_report(ledger.outcomes(since), since, now, "team"), args.runs)
    day_seconds, last_day = timed(lambda: ledger.outcomes(now - timedelta(days=1)), args.runs)
    assert isinstance(last_day, list)

    # The record-by-record way, on a sample: one GET per object.
    gcs = Gcs(LOCAL_PROJECT)
    listing = gcs.metadata_under(deployment.control_bucket, HISTORY_PREFIX)
    names = [name for name, _ in itertools.islice(listing, READ_SAMPLE)]
    start = time.monotonic()
    for name in names:
        gcs.read(deployment.control_bucket, name)
    per_read = (time.monotonic() - start) / max(1, len(names))

    figures = [
        Figure(f"listing {args.finished:,} outcomes (whole window)", f"{listing_seconds:.2f} s"),
        Figure("listing calls", f"{math.ceil(args.finished / PAGE)}"),
        Figure(
            f"report --since {args.days}d --by team over {args.finished:,}",
            f"{report_seconds:.2f} s",
            f"≤ {REPORT_GOAL_SECONDS:.0f} s",
            report_seconds <= REPORT_GOAL_SECONDS,
        ),
        Figure(f"listing a one-day window ({len(last_day):,} outcomes)", f"{day_seconds:.2f} s"),
        Figure(
            f"reading {args.finished:,} records one by one (scaled from {len(names)})",
            f"{per_read * args.finished:.0f} s",
        ),
    ]
    notes = [
        f"{args.finished:,} outcomes over {args.days} days written in {write_seconds:.1f} s; median of "
        f"{args.runs} runs; fake-gcs-server in memory on this machine (Cloud Storage's own listing latency differs)",
    ]
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=100_000, help="finished requests (default 100000)")
    parser.add_argument("--days", type=int, default=30, help="days they are spread over (default 30)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (default 3)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("report_listing", parse_args(argv), run)


if __name__ == "__main__":
    main()
