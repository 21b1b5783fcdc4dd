"""`trainctl report`'s time to first step and goodput (issue 43): the p50/p90 of accepted → first step and of its
phases, and goodput overall and per team, from outcomes filed as the outbox files them (history.outcome_of), the
figures each final event carries (Record.add_events)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from functions.ledger.history import history_entry, outcome_of
from schemas.events import Succeeded, Timestamps
from tests.unit.conftest import RECORD_TIME, make_record
from trainctl.report import build_report, format_report

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return RECORD_TIME + timedelta(seconds=seconds)


def finished(request_id: str, team: str, queued: float, first_step: float, steps: tuple[int, int] | None):
    """A succeeded request accepted at RECORD_TIME whose job was created at 100 s, started at 160 s and ended at
    1000 s, with the trainer's first step at `first_step` s (None: no record) and `steps` (run, kept)."""
    record = make_record(request_id=request_id, team=team, queued_seconds=queued)
    record.first_step = at(first_step)
    if steps:
        record.steps_run, record.steps_kept = steps
    stamps = Timestamps(created=at(100), started=at(160), ended=at(1000))
    event = Succeeded(
        request_id=request_id, request_key=record.key, time=at(1000), message="m", artifacts=record.artifacts,
        timestamps=stamps,
    )  # fmt: skip
    record.add_events([event])
    return outcome_of(record.outbox_events()[0], record)


def test_the_report_shows_time_to_first_step_by_phase_and_goodput_per_team():
    outcomes = [
        finished("a", "ads", queued=0, first_step=200, steps=(100, 100)),
        finished("b", "ads", queued=30, first_step=220, steps=(300, 200)),
        finished("c", "search", queued=60, first_step=400, steps=None),
    ]
    report = build_report(outcomes, NOW - timedelta(days=1), NOW, "team")
    total = report["total"]
    assert total["first_step_seconds"]["requests"] == 3
    assert total["first_step_seconds"]["total"] == {"p50": 220, "p90": 400}
    assert total["first_step_seconds"]["provisioning"] == {"p50": 60, "p90": 60}
    assert total["first_step_seconds"]["startup"] == {"p50": 60, "p90": 240}
    assert total["first_step_seconds"]["queue"] == {"p50": 30, "p90": 60}
    assert total["goodput"] == {"scheduling": 0.84, "runtime": 0.75, "steps_run": 400, "steps_kept": 300}
    assert report["groups"]["ads"]["goodput"]["runtime"] == 0.75
    assert report["groups"]["search"]["goodput"]["runtime"] is None

    text = format_report(report)
    assert "  to first step    p50 3.7m p90 6.7m  (3 with a first step)" in text
    assert "    queue p50 30s p90 60s · provisioning p50 60s p90 60s · start-up p50 60s p90 4.0m" in text
    assert "  goodput          scheduling 84% (running of accepted → end)  runtime 75% (300 of 400 steps kept)" in text
    assert "  goodput          scheduling 84% (running of accepted → end)  runtime - (0 of 0 steps kept)" in text


def test_the_history_entry_keeps_the_figures():
    outcome = finished("a", "ads", queued=0, first_step=200, steps=(100, 100))
    _, metadata = history_entry(outcome)
    assert '"first_step":{"total_seconds":200.0' in metadata["outcome"] and '"runtime":1.0' in metadata["outcome"]


def test_without_first_steps_or_goodput_the_report_has_no_such_lines():
    assert "to first step" not in format_report(build_report([], NOW - timedelta(days=1), NOW, None))
