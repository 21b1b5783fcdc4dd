"""The benchmarks still run: each script's `run` on the session's stack with tiny parameters, its figures
written to a results file of the test's own. Timings are never asserted (DESIGN.md §6); invariants are."""

from __future__ import annotations

import pytest
from google.cloud import pubsub_v1

from bench import (
    checkpoint_time,
    cold_start,
    console_pages,
    controller_load,
    reconcile_scale,
    reconcile_sweep,
    report_listing,
)
from bench.report import record
from bench.stack import Stack

pytestmark = pytest.mark.integration


@pytest.fixture
def stack(pubsub_emulator, fake_gcs, jobservice, jobservice_control, tmp_path) -> Stack:
    # jobservice_control clears the queue holds a benchmark leaves unused.
    return Stack(tmp_path, pubsub_emulator, fake_gcs, jobservice)


def figures_of(script, stack: Stack, tmp_path, *argv: str) -> dict[str, str]:
    args = script.parse_args([*argv, "--results", str(tmp_path / "RESULTS.md")])
    figures, notes = script.run(stack, args)
    record(script.__name__, figures, "0 0 0", notes, args.results)
    assert "| figure | value | goal | met |" in args.results.read_text()
    return {figure.name: figure.value for figure in figures}


def test_cold_start_measures_every_path_against_the_baseline(stack, tmp_path):
    figures = figures_of(cold_start, stack, tmp_path, "--runs", "1", "--warmups", "0")
    assert "(no Vertex client)" in figures["(a) ignored shard: time to first event"]
    assert "(no Vertex client)" in figures["(b) duplicate marker: time to first event"]
    # Issue 13 item 5: the submitting path calls Vertex over REST and never imports its client library either.
    assert "(no Vertex client)" in figures["(c) submitting marker: time to first event"]
    # Guards issue 12 point 14: CPU seconds per path, and the function tier they call for.
    assert float(figures["(c) submitting marker: CPU (user + sys)"].removesuffix(" s")) > 0
    assert figures["(c) submitting marker: smallest tier within the goal"] != ""
    # Issue 25 point 7: the Cloud Quotas calls a cold submission makes are counted; the other paths make none.
    assert int(figures["(c) submitting marker: Cloud Quotas calls"]) >= 1
    assert (
        figures["(a) ignored shard: Cloud Quotas calls"] == figures["(b) duplicate marker: Cloud Quotas calls"] == "0"
    )
    # Issue 27, point 2: the cold submission of a model with a champion reads its schema.json and the new header.
    data_path = "(d) submitting marker, a model with a champion (data check)"
    assert "(no Vertex client)" in figures[f"{data_path}: time to first event"]
    assert any(name.startswith("cold data check alone") for name in figures)


def test_controller_load_submits_each_marker_once(stack, tmp_path):
    argv = ["--markers", "3", "--warmups", "1", "--rate", "0", "--storm-threads", "2"]
    figures = figures_of(controller_load, stack, tmp_path, *argv)
    assert figures["invariant violations"] == "0"
    assert figures["jobs created / distinct markers"] == "10 / 10"  # 1 warm-up + 3 in each of 3 phases
    # Its push subscription is gone with its bridge: the emulator would push to the closed port without pause.
    subscriptions = pubsub_v1.SubscriberClient().list_subscriptions(project=f"projects/{stack.pubsub.project}")
    assert not [s.name for s in subscriptions if s.push_config.push_endpoint]


def test_reconcile_scale_ticks_with_and_without_history(stack, tmp_path):
    figures = figures_of(reconcile_scale, stack, tmp_path, "--active", "2", "--finished", "20", "--runs", "1")
    assert "ratio (with history / without)" in figures


def test_reconcile_sweep_lists_the_jobs_and_reads_only_those_that_ended(stack, tmp_path):
    """Issue 25, point 9: the sweep benchmark still runs (tiny here); its measured tick lists once and reads only the
    ended jobs, publishing each one's `cancelled` once."""
    figures = figures_of(reconcile_sweep, stack, tmp_path, "--active", "30", "--ended", "3", "--concurrency", "4")
    assert figures["Vertex calls in that tick"].startswith("4 (1 ListCustomJobs pages, 3 GetCustomJob)")
    assert figures["events published by that tick"] == "3; `cancelled` exactly once for 3 of the 3 ended"


def test_report_listing_lists_every_outcome_filed(stack, tmp_path):
    """Guards issue 15 item 4: the benchmark of the report's listing at scale still runs (tiny here)."""
    figures = figures_of(
        report_listing, stack, tmp_path, "--finished", "300", "--stored", "30", "--days", "3", "--runs", "1"
    )
    assert figures["listing calls at 300 finished requests"] == "1"


def test_console_pages_fetches_every_page_of_the_real_console(stack, tmp_path):
    """Guards issue 45 point 2: the benchmark of the console's pages with a history still runs (tiny here): the
    console starts as a user starts it and answers each page, the history's middle page included."""
    figures = figures_of(
        console_pages, stack, tmp_path, "--requests", "260", "--active", "2", "--days", "2", "--runs", "1"
    )
    pages = {name.rsplit(", ", 1)[0] for name in figures}
    assert pages == {
        "now (/)",
        "a request (/requests/<id>)",
        "models (/models)",
        "history, 2d, first page",
        "history, 2d, page 3 (middle)",
        "history, 2d, page 6 (last)",
        "history, 24h, first page",
    }


def test_checkpoint_time_saves_a_small_state_to_disk_and_to_cloud_storage(fake_gcs, tmp_path):
    """Guards issue 17 item 9: the checkpoint-time benchmark still runs (a 16 MiB state here, 2 GB for real)."""
    args = checkpoint_time.parse_args(["--gigabytes", "0.015", "--rounds", "1", "--results", str(tmp_path / "R.md")])
    figures, notes = checkpoint_time.run(args, fake_gcs.url)
    record("checkpoint_time", figures, "0 0 0", notes, args.results)
    names = {figure.name for figure in figures}
    assert {f"{target}: time until the checkpoint is committed" for target in ("local", "gcs")} <= names
