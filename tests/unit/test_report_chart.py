"""`trainctl report --png`: the window at a glance — its bins, bars, labels and legend (issue 28, point 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import Rectangle

from functions.ledger.history import Outcome
from trainctl.report import bin_for, build_report, format_report
from trainctl.report_chart import chart, draw, time_unit

UNTIL = datetime(2026, 11, 24, 9, 30, tzinfo=UTC)


def outcome(
    request_id: str, state: str, finished: datetime, wait_minutes: float = 2, run_minutes: float = 28, **more
) -> Outcome:
    accepted = finished - timedelta(minutes=wait_minutes + run_minutes)
    return Outcome(
        request_id=request_id,
        state=state,
        time=finished,
        accepted=accepted,
        started=None if state == "rejected" else accepted + timedelta(minutes=wait_minutes),
        ended=None if state == "rejected" else finished,
        gpus=2,
        hourly_usd=8.0,
        **more,
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
        requests, _, start, gpu_time, cost = figure.axes
        days = len(report["timeline"]["bins"])
        assert report["timeline"]["bin"] == "day" and days == 8  # the window's 7 days touch 8 calendar days

        # One bar per day and outcome, every day drawn, empty ones too; the busy day stacks 1 succeeded + 1 failed.
        heights = bar_heights(requests)
        assert len(heights) == days * 5  # five outcomes: skipped too (issue 42)
        per_day = [sum(heights[state * days + day] for state in range(5)) for day in range(days)]
        assert per_day == [0, 2, 0, 0, 0, 0, 0, 1]
        assert requests.get_ylabel() == "requests per day"
        assert sorted(start.collections[0].get_offsets()[:, 1].tolist()) == [2, 2, 12]  # minutes, each request
        assert start.get_ylabel() == "time to start\n(minutes, each request)"
        assert gpu_time.get_ylabel() == "GPU-minutes\nper day" and max(bar_heights(gpu_time)) == pytest.approx(
            112, abs=0.01
        )  # 2 × 2 GPUs × 28 min
        assert "estimated cost" in cost.get_ylabel() and len(bar_heights(cost)) == days
        assert [label.get_text() for label in cost.get_xticklabels()][:2] == ["Tue 17 Nov", "Wed 18 Nov"]

        # The legend names the outcomes and stands outside every panel.
        figure.canvas.draw()
        legend, decided = figure.legends
        outcomes = ["succeeded", "failed", "cancelled", "rejected", "skipped"]
        assert [text.get_text() for text in legend.get_texts()] == outcomes
        assert [text.get_text() for text in decided.get_texts()] == ["promoted", "held", "data rejected"]
        for box in (legend.get_window_extent(), decided.get_window_extent()):
            assert all(not box.overlaps(axes.get_window_extent()) for axes in figure.axes)
            assert box.x1 <= figure.bbox.x1  # inside the picture
    finally:
        plt.close(figure)


def test_a_short_window_is_drawn_by_the_hour():
    """Guards issue 28, point 6: a window of a day is cut into hours, not one day-wide bar."""
    report = build_report(
        [outcome("a", "succeeded", UNTIL - timedelta(minutes=20))], UNTIL - timedelta(hours=24), UNTIL, None
    )
    figure = chart(report)
    try:
        assert report["timeline"]["bin"] == "hour" and len(report["timeline"]["bins"]) == 25
        assert figure.axes[0].get_xlim() == tuple(mdates.date2num([UNTIL - timedelta(hours=24), UNTIL]))
        assert figure.axes[0].get_ylabel() == "requests per hour"
        assert sum(bar_heights(figure.axes[0])) == 1
    finally:
        plt.close(figure)


@pytest.mark.parametrize(
    ("window", "name", "bins"),
    [
        (timedelta(hours=1), "5 minutes", 12),
        (timedelta(hours=1, minutes=2), "5 minutes", 13),  # 08:28 falls in 08:25-08:30
        (timedelta(hours=6), "15 minutes", 24),
        (timedelta(hours=6, minutes=1), "hour", 7),
        (timedelta(hours=24), "hour", 25),
        (timedelta(days=7), "day", 8),
    ],
)
def test_the_bin_fits_the_window(window, name, bins):
    """Guards issue 44, point 5: an hour's window was two hour-wide bins, one of them mostly past the window."""
    assert bin_for(window)[0] == name
    line = build_report([], UNTIL - window, UNTIL, None)["timeline"]
    assert line["bin"] == name and len(line["bins"]) == bins
    assert (
        datetime.fromisoformat(line["bins"][0]["start"])
        <= UNTIL - window
        < datetime.fromisoformat(line["bins"][1]["start"])
    )


def test_times_are_in_the_unit_their_size_reads_best_in():
    assert time_unit([]) == ("seconds", 1)
    assert time_unit([6.0, 119]) == ("seconds", 1)
    assert time_unit([6.0, 120]) == ("minutes", 60)
    assert time_unit([7200]) == ("hours", 3600)


def test_an_hour_is_drawn_in_five_minute_bins_over_the_window_in_seconds_and_gpu_minutes(tmp_path):
    """Guards issue 44, point 5: `--since 1h` drew one wide bar, its axis ran past the window, and time to start and
    GPU time were hours like 0.0017."""
    until = UNTIL + timedelta(minutes=7)  # 08:37 → 09:37: neither end on a bin's edge
    since = until - timedelta(hours=1)
    outcomes = [
        outcome("a", "succeeded", UNTIL - timedelta(minutes=20), wait_minutes=0.25, run_minutes=3),
        outcome("b", "succeeded", UNTIL - timedelta(minutes=19), wait_minutes=0.5, run_minutes=3),
        outcome("c", "rejected", UNTIL - timedelta(minutes=40), reason="data", saved_gpu_hours=2, saved_usd=16),
        outcome("d", "rejected", UNTIL - timedelta(minutes=41), reason="guardrail"),
    ]
    decisions = [
        Outcome(request_id="a", state="promoted", model="churn", time=UNTIL - timedelta(minutes=19)),
        Outcome(request_id="b", state="held", model="churn", time=UNTIL - timedelta(minutes=18)),
    ]
    report = build_report(outcomes, since, until, None, decisions)
    figure = chart(report)
    try:
        requests, decided, start, gpu_time, cost = figure.axes
        for axes in figure.axes:
            assert axes.get_xlim() == tuple(mdates.date2num([since, until]))  # the window, not past it
        assert requests.get_ylabel() == "requests per 5 minutes"
        bars = len(report["timeline"]["bins"])
        assert bars == 13 and sum(bar_heights(requests)) == 4
        widths = {round(p.get_width() * 24 * 60, 3) for p in requests.patches}
        assert widths == {4.0}  # 0.8 of five minutes, in days
        promoted, held, rejected = (bar_heights(decided)[i * bars : (i + 1) * bars] for i in range(3))
        assert (sum(promoted), sum(held), sum(rejected)) == (1, 1, 1)  # the guardrail's rejection is not the data's
        assert start.get_ylabel() == "time to start\n(seconds, each request)"
        assert sorted(start.collections[0].get_offsets()[:, 1].tolist()) == [15, 30]
        assert gpu_time.get_ylabel() == "GPU-minutes\nper 5 minutes" and sum(bar_heights(gpu_time)) == 12
        assert cost.get_ylabel() == "estimated cost\n(USD per 5 minutes)"
        labels = [t.get_text() for t in cost.get_xticklabels()]
        assert labels and all(len(label) == 5 and label[2] == ":" for label in labels)  # HH:MM
    finally:
        plt.close(figure)
    path = draw(report, tmp_path / "out" / "report.png")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_an_empty_window_says_so_in_each_panel():
    figure = chart(build_report([], UNTIL - timedelta(hours=1), UNTIL, None))
    try:
        said = [t.get_text() for axes in figure.axes for t in axes.texts]
        assert said == ["nothing finished in this window", "no promotion, hold or data rejection", "no request started"]
        assert all(axes.get_ylim() == (0, 1) for axes in figure.axes)
    finally:
        plt.close(figure)


def test_the_text_says_a_short_run_s_gpu_time_in_minutes_not_as_0_00_gpu_hours():
    outcomes = [outcome(name, "succeeded", UNTIL - timedelta(minutes=9), run_minutes=3) for name in "ab"]
    text = format_report(build_report(outcomes, UNTIL - timedelta(hours=1), UNTIL, None))
    assert "  GPU-hours        0.20 (12.0m of GPU time)   estimated cost $0.80" in text
    one_day = [outcome("a", "succeeded", UNTIL - timedelta(minutes=9), run_minutes=60)]
    assert "  GPU-hours        2.00   estimated" in format_report(
        build_report(one_day, UNTIL - timedelta(days=1), UNTIL, None)
    )
