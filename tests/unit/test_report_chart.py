"""`trainctl report --png`: the window at a glance — its bins, bars, labels and legend (issue 28, point 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from functions.ledger.history import Outcome
from trainctl.report import build_report
from trainctl.report_chart import chart

UNTIL = datetime(2026, 11, 24, 9, 30, tzinfo=UTC)


def outcome(request_id: str, state: str, finished: datetime, wait_minutes: float = 2) -> Outcome:
    accepted = finished - timedelta(minutes=30)
    return Outcome(
        request_id=request_id,
        state=state,
        time=finished,
        accepted=accepted,
        started=accepted + timedelta(minutes=wait_minutes),
        ended=finished,
        gpus=2,
        hourly_usd=8.0,
    )


def bar_heights(axes) -> list[float]:
    return [patch.get_height() for patch in axes.patches if isinstance(patch, Rectangle)]


def test_a_week_is_drawn_as_days_with_outcomes_time_to_start_gpu_hours_and_cost_and_the_legend_outside():
    """Guards issue 28, point 6: a 7-day window was one bar filling the width with the legend over it."""
    outcomes = [
        outcome("a", "succeeded", UNTIL - timedelta(days=6, hours=1)),
        outcome("b", "failed", UNTIL - timedelta(days=6, hours=1)),
        outcome("c", "succeeded", UNTIL - timedelta(hours=2), wait_minutes=12),
    ]
    report = build_report(outcomes, UNTIL - timedelta(days=7), UNTIL, None)
    figure = chart(report)
    try:
        requests, start, gpu_hours, cost = figure.axes
        days = len(report["timeline"]["bins"])
        assert report["timeline"]["bin"] == "day" and days == 8  # the window's 7 days touch 8 calendar days

        # One bar per day and outcome, every day drawn, empty ones too; the busy day stacks 1 succeeded + 1 failed.
        heights = bar_heights(requests)
        assert len(heights) == days * 5  # five outcomes: skipped too (issue 42)
        per_day = [sum(heights[state * days + day] for state in range(5)) for day in range(days)]
        assert per_day == [0, 2, 0, 0, 0, 0, 0, 1]
        assert requests.get_ylabel() == "requests per day"
        assert sorted(start.collections[0].get_offsets()[:, 1].tolist()) == [2, 2, 12]  # minutes, each request
        assert "time to start" in start.get_ylabel()
        assert gpu_hours.get_ylabel() == "GPU-hours per day" and max(bar_heights(gpu_hours)) > 0
        assert "estimated cost" in cost.get_ylabel() and len(bar_heights(cost)) == days
        assert [label.get_text() for label in cost.get_xticklabels()][:2] == ["Tue 17 Nov", "Wed 18 Nov"]

        # The legend names the outcomes and stands outside every panel.
        figure.canvas.draw()
        (legend,) = figure.legends
        outcomes = ["succeeded", "failed", "cancelled", "rejected", "skipped"]
        assert [text.get_text() for text in legend.get_texts()] == outcomes
        box = legend.get_window_extent()
        assert all(not box.overlaps(axes.get_window_extent()) for axes in figure.axes)
    finally:
        plt.close(figure)


def test_a_short_window_is_drawn_by_the_hour():
    """Guards issue 28, point 6: a window of a day is cut into hours, not one day-wide bar."""
    report = build_report(
        [outcome("a", "succeeded", UNTIL - timedelta(minutes=20))], UNTIL - timedelta(hours=6), UNTIL, None
    )
    figure = chart(report)
    try:
        assert report["timeline"]["bin"] == "hour" and len(report["timeline"]["bins"]) == 7
        assert figure.axes[0].get_ylabel() == "requests per hour"
        assert sum(bar_heights(figure.axes[0])) == 1
    finally:
        plt.close(figure)
