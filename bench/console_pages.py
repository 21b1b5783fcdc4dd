"""How long the console's pages take with N finished requests in history (issue 45, point 2: a page ≤ 1 s with 10,000
requests in history, server-side paging).

`--stored` outcomes (default 10,000) are filed over the last `--days` days (default 30) as the controller files them
(bench/report_listing.py's writer), with `--active` active records besides; then each page is fetched through the app
(Starlette's TestClient, no network): the now page (it reads the active records and the quota pools, never the
history), the history over 24 hours and over the whole window (first load: the window's listing; the next pages: the
listing kept for 30 s), its last page, a request page and the models page. Timings are the median of `--runs`.

    python bench/console_pages.py [--stored 10000] [--days 30] [--active 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.report import RESULTS, Figure  # noqa: E402
from bench.report_listing import write_history  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from functions.cloud.gcs import Gcs  # noqa: E402
from functions.intake.acceptance import artifacts  # noqa: E402
from functions.ledger.keys import key_hash, request_key  # noqa: E402
from functions.ledger.record import Record  # noqa: E402
from functions.ledger.requests import Ledger  # noqa: E402
from functions.settings import Settings  # noqa: E402
from local.names import LOCAL_PROJECT  # noqa: E402
from schemas.events import CostEstimate  # noqa: E402

PAGE_GOAL_SECONDS = 1.0


def active_record(i: int, bucket: str, now: datetime) -> Record:
    key = request_key(f"active-{i:04d}")
    return Record(
        key=key,
        key_hash=key_hash(key),
        request_id=f"active-{i:04d}",
        spec_hash="bench",
        explicit_id=True,
        request={},
        state="running",
        job_name=f"projects/{LOCAL_PROJECT}/locations/us-central1/customJobs/{i}",
        cost=CostEstimate(hourly_usd=7.3, max_usd=100, gpus=4, nodes=1, prices_as_of="2026-11-22"),
        artifacts=artifacts(f"gs://{bucket}/runs/active-{i:04d}/"),
        created=now - timedelta(minutes=30),
        updated=now - timedelta(minutes=20),
    )


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    from starlette.testclient import TestClient

    from trainctl.console.app import create_app

    deployment = stack.deployment()
    deployment.provision()
    now = datetime.now(UTC)
    write_seconds = write_history(stack, deployment.control_bucket, args.stored, args.days, now)
    ledger = Ledger(Gcs(LOCAL_PROJECT), deployment.control_bucket)
    for i in range(args.active):
        record = active_record(i, deployment.control_bucket, now)
        ledger.create(record)
        ledger.mark_active(record.key_hash)
    os.environ.update(deployment.settings_env())
    settings = Settings.from_env()
    window = f"{args.days}d"
    last = math.ceil(args.stored / 50)
    pages = [
        ("now page", "/"),
        ("history, 24 hours", "/history?since=24h"),
        (f"history, {window}: first page (lists the window)", f"/history?since={window}"),
        (f"history, {window}: page 2 (the listing kept)", f"/history?since={window}&page=2"),
        (f"history, {window}: last page ({last})", f"/history?since={window}&page={last}"),
        ("a request", "/requests/active-0000"),
        ("models", "/models"),
    ]
    figures = []
    for name, path in pages:
        times = []
        for _ in range(args.runs):
            app = create_app(settings, follow=False)  # a fresh app each run: nothing cached from the run before
            with TestClient(app) as client:
                if "page=" in path:
                    client.get(path.split("&")[0])  # what a person paging has loaded first
                start = time.monotonic()
                answer = client.get(path)
                times.append(time.monotonic() - start)
            assert answer.status_code == 200, (path, answer.status_code)
            if path.startswith(f"/history?since={window}"):  # every day of the window listed, each outcome once
                assert f"<small>{args.stored} in the window;" in answer.text, path
        seconds = statistics.median(times)
        figures.append(Figure(name, f"{seconds:.3f} s", f"≤ {PAGE_GOAL_SECONDS:.0f} s", seconds <= PAGE_GOAL_SECONDS))
    notes = [
        f"{args.stored:,} outcomes over {args.days} days written to fake-gcs-server (in memory) in {write_seconds:.1f} "
        f"s, {args.active} active records; median of {args.runs} runs, each on a fresh app (the history listing is "
        "kept 30 s per window, so page 2 and the last page are served from it); Cloud Storage's own listing time "
        "differs (bench/report_listing.py: a listing call per 1,000 outcomes)",
    ]
    return figures, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stored", type=int, default=10_000, help="finished requests in history (default 10000)")
    parser.add_argument("--days", type=int, default=30, help="days they are spread over (default 30)")
    parser.add_argument("--active", type=int, default=20, help="active requests (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per page (default 3)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    run_benchmark("console_pages", parse_args(argv), run)


if __name__ == "__main__":
    main()
