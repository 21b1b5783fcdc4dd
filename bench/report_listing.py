"""What `trainctl report` costs at scale (issue 15): the ledger listing behind it with N finished requests.

The report reads the history index (functions/ledger/history.py): one listing call per 1,000 finished requests, each
outcome in its object's metadata, no object read. Two parts, because fake-gcs-server's in-memory backend
slows down with every object a bucket holds (1,000 writes took 1.8 s into an empty bucket and 6.4 s into one
of 2,000 objects), so 100,000 objects cannot be loaded into it in a benchmark's time:

- on fake-gcs-server, `--stored` outcomes (default 10,000) filed as the controller files them — an empty
  `history/<day>/<key hash>` object with the outcome in its metadata, over the last `--days` days — and
  Ledger.outcomes timed over them: the time per listing call (page of 1,000);
- in this process, `--finished` outcomes (default 100,000) as the listing returns them (metadata JSON),
  parsed and made into the report (`--by team`): the client's share, which does grow with N.

The report at N = listing calls × time per call + the client's share. For comparison, reading records one
by one (what `Ledger.all_records` does) is timed on a sample and scaled to N.

    python bench/report_listing.py [--finished 100000] [--stored 10000] [--days 30] [--runs 3]
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions.cloud.gcs import Gcs  # noqa: E402
from functions.ledger.history import METADATA_KEY, Outcome  # noqa: E402
from functions.ledger.requests import HISTORY_PREFIX, Ledger  # noqa: E402
from local.names import LOCAL_PROJECT  # noqa: E402
from trainctl.report import build_report  # noqa: E402

T = TypeVar("T")

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


def timed(action: Callable[[], T], runs: int) -> tuple[float, T]:
    """The median seconds of `runs` (at least one) calls of `action`, and what its last call returned."""
    times = []
    for _ in range(runs):
        start = time.monotonic()
        result = action()
        times.append(time.monotonic() - start)
    return statistics.median(times), result


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    deployment = stack.deployment()
    deployment.provision()
    now = datetime.now(UTC)
    since = now - timedelta(days=args.days)
    write_seconds = write_history(stack, deployment.control_bucket, args.stored, args.days, now)
    ledger = Ledger(Gcs(LOCAL_PROJECT), deployment.control_bucket)

    listing_seconds, listed = timed(lambda: ledger.outcomes(since), args.runs)
    assert len(listed) == args.stored, f"listed {len(listed)} of {args.stored}"
    stored_calls = math.ceil(args.stored / PAGE)
    per_call = listing_seconds / stored_calls

    # The client's share at full scale: parse what N listing items carry, then build the report.
    metadata = [{METADATA_KEY: outcome(i, now, args.days).model_dump_json()} for i in range(args.finished)]

    def client_share() -> dict:
        parsed = [Outcome.model_validate_json(m[METADATA_KEY]) for m in metadata]
        return build_report([o for o in parsed if o.time >= since], since, now, "team")

    client_seconds, report = timed(client_share, args.runs)
    assert report["total"]["requests"] == args.finished
    calls = math.ceil(args.finished / PAGE)
    estimate = calls * per_call + client_seconds

    # The record-by-record way, on a sample: one GET per object.
    gcs = Gcs(LOCAL_PROJECT)
    listing = gcs.metadata_under(deployment.control_bucket, HISTORY_PREFIX)
    names = [name for name, _ in itertools.islice(listing, READ_SAMPLE)]
    start = time.monotonic()
    for name in names:
        gcs.read(deployment.control_bucket, name)
    per_read = (time.monotonic() - start) / max(1, len(names))

    figures = [
        Figure(f"listing {args.stored:,} stored outcomes ({stored_calls} calls)", f"{listing_seconds:.2f} s"),
        Figure("time per listing call (1,000 outcomes)", f"{per_call * 1000:.0f} ms"),
        Figure(f"listing calls at {args.finished:,} finished requests", f"{calls}"),
        Figure(f"parsing {args.finished:,} outcomes + building the report (--by team)", f"{client_seconds:.2f} s"),
        Figure(
            f"report over {args.finished:,} finished requests (calls × per call + client)",
            f"{estimate:.1f} s",
            f"≤ {REPORT_GOAL_SECONDS:.0f} s",
            estimate <= REPORT_GOAL_SECONDS,
        ),
        Figure(
            f"reading {args.finished:,} records one by one instead (scaled from {len(names)} reads)",
            f"{per_read * args.finished:.0f} s",
        ),
    ]
    notes = [
        f"{args.stored:,} outcomes over {args.days} days written to fake-gcs-server (in memory) in "
        f"{write_seconds:.1f} s; median of {args.runs} runs; Cloud Storage's own time per listing call differs",
    ]
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=100_000, help="finished requests (default 100000)")
    parser.add_argument("--stored", type=int, default=10_000, help="outcomes stored in fake-gcs (default 10000)")
    parser.add_argument("--days", type=int, default=30, help="days they are spread over (default 30)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (default 3)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("report_listing", parse_args(argv), run)


if __name__ == "__main__":
    main()
