"""`trainctl report`'s trigger-policy figures (issue 42): requests skipped at their claim by reason, runs superseded,
markers coalesced, and the GPU-hours they saved — from the history index's outcomes, each filed as the outbox files
it (functions/ledger/history.py outcome_of)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from functions.ledger.history import outcome_of
from schemas.events import Cancelled, Coalesced, Skipped, Succeeded
from tests.unit.conftest import make_record
from trainctl.report import build_report, format_report

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def filed(event, **fields):
    return outcome_of(event, make_record(**fields))


def test_skipped_superseded_and_coalesced_are_counted_with_the_gpu_hours_they_saved():
    common = {"request_key": "request:r1", "time": NOW, "message": "m"}
    outcomes = [
        filed(Skipped(request_id="s1", **common, reason="running", blocking_request="r0", saved_gpu_hours=16.0)),
        filed(Skipped(request_id="s2", **common, reason="running", blocking_request="r0", saved_gpu_hours=16.0)),
        filed(
            Skipped(
                request_id="s3",
                **common,
                reason="unchanged_data",
                fingerprint="sha256:x",
                champion_version="3",
                saved_gpu_hours=8.0,
            )
        ),
        filed(Cancelled(request_id="c1", **common, reason="superseded")),
        filed(Cancelled(request_id="c2", **common)),  # cancelled by request: not superseded
        filed(Succeeded(request_id="ok", **common, artifacts=make_record().artifacts)),
    ]
    markers = [f"gs://data/churn/p{i}/_SUCCESS#{i}" for i in range(10)]
    coalesced = [
        outcome_of(
            Coalesced(
                request_id="w1",
                **common,
                rule="gs://data/churn/",
                markers=markers,
                dataset_uri="gs://data/churn/p9/",
                saved_gpu_hours=144.0,
            ),
            None,
        )
    ]
    report = build_report(outcomes, NOW - timedelta(days=1), NOW, None, [], coalesced)
    total = report["total"]
    assert total["by_state"] == {"succeeded": 1, "failed": 0, "cancelled": 2, "rejected": 0, "skipped": 3}
    assert total["trigger_policies"] == {
        "skipped": {
            "requests": 3,
            "by_reason": {"running": 2, "unchanged_data": 1},
            "gpu_hours_saved": 40.0,
            "cost_saved_usd": 72.0,  # each skipped request's own estimate: its plan's max_usd (24 here)
        },
        "superseded": 1,
        "coalesced": {"requests": 1, "markers": 10, "gpu_hours_saved": 144.0},
        "gpu_hours_saved": 184.0,  # a superseded run's saving is not counted: it ran
    }
    assert total["success_rate"] == round(1 / 3, 4), "skipped requests got no job"
    text = format_report(report)
    assert "  skipped          3 (running 2, unchanged_data 1), saving up to 40.00 GPU-hours ($72.00)" in text
    assert "  superseded       1 (cancelled for a newer run of their model; nothing saved)" in text
    assert "  coalesced        1 requests from 10 markers, saving up to 144.00 GPU-hours" in text
    assert "  policies saved   up to 184.00 GPU-hours (each run's GPUs × its timeout)" in text


def test_the_lines_are_left_out_when_no_policy_did_anything():
    common = {"request_key": "request:r1", "time": NOW, "message": "m"}
    report = build_report(
        [filed(Succeeded(request_id="ok", **common, artifacts=make_record().artifacts))],
        NOW - timedelta(days=1),
        NOW,
        None,
    )
    assert report["total"]["trigger_policies"]["gpu_hours_saved"] == 0
    assert "skipped  " not in format_report(report) and "superseded" not in format_report(report)


def test_groups_count_their_own_policies():
    common = {"request_key": "request:r1", "time": NOW, "message": "m"}
    skipped = Skipped(request_id="s1", **common, reason="running", saved_gpu_hours=2.0)
    outcomes = [
        filed(skipped, team="vision"),
        filed(Succeeded(request_id="ok", **common, artifacts=make_record().artifacts), team="shared"),
    ]
    report = build_report(outcomes, NOW - timedelta(days=1), NOW, "team")
    assert report["groups"]["vision"]["trigger_policies"]["skipped"]["requests"] == 1
    assert report["groups"]["shared"]["trigger_policies"]["skipped"]["requests"] == 0
