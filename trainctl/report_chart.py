"""`trainctl report --png FILE`: the window at a glance, one PNG of four panels over the same time axis — requests
by outcome (stacked bars per day, or per hour for windows up to two days), each request's time to start, GPU-hours
and estimated cost per bin. Every bin of the window is drawn, empty ones too, so a quiet week looks quiet rather
than one bar filling the width; the legend stands outside the data."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# Colours people read without a legend: green done, red failed, grey cancelled, amber rejected, blue-grey skipped.
STATE_COLOURS = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "cancelled": "#757575",
    "rejected": "#ef8f00",
    "skipped": "#90a4ae",
}


def chart(report: dict[str, Any]) -> Any:
    """The report's figure (a matplotlib Figure), not yet saved: tests read its bars and labels."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    line = report["timeline"]
    bins = line["bins"]
    step = timedelta(hours=1) if line["bin"] == "hour" else timedelta(days=1)
    starts = [datetime.fromisoformat(b["start"]) for b in bins]
    centres = [s + step / 2 for s in starts]
    width = step * 0.8

    figure, (requests, start, gpu_hours, cost) = plt.subplots(
        4, 1, figsize=(10, 9), dpi=100, sharex=True, gridspec_kw={"height_ratios": [3, 2, 2, 2]}
    )
    figure.suptitle(
        f"trainctl report: {report['since'][:16].replace('T', ' ')} → {report['until'][:16].replace('T', ' ')} UTC,"
        f" per {line['bin']}"
    )

    bottom = [0] * len(bins)
    for state, colour in STATE_COLOURS.items():
        counts = [b["by_state"][state] for b in bins]
        requests.bar(centres, counts, width=width, bottom=bottom, color=colour, label=state)
        bottom = [low + n for low, n in zip(bottom, counts, strict=True)]
    requests.set_ylabel(f"requests per {line['bin']}")
    requests.yaxis.get_major_locator().set_params(integer=True)
    if not any(bottom):
        requests.text(0.5, 0.5, "nothing finished in this window", ha="center", transform=requests.transAxes)
    figure.legend(*requests.get_legend_handles_labels(), title="outcome", loc="upper left", bbox_to_anchor=(0.86, 0.9))

    waits = [(c, s / 60) for c, b in zip(centres, bins, strict=True) for s in b["time_to_start_seconds"]]
    start.scatter([c for c, _ in waits], [m for _, m in waits], s=14, color="#6a1b9a", alpha=0.7)
    start.set_ylabel("time to start\n(minutes, each request)")
    start.set_ylim(bottom=0)

    gpu_hours.bar(centres, [b["gpu_hours"] for b in bins], width=width, color="#1565c0")
    gpu_hours.set_ylabel(f"GPU-hours per {line['bin']}")
    cost.bar(centres, [b["estimated_cost_usd"] for b in bins], width=width, color="#00838f")
    cost.set_ylabel(f"estimated cost\n(USD per {line['bin']})")

    for axes in (requests, start, gpu_hours, cost):
        axes.grid(axis="y", alpha=0.3)
        axes.set_ylim(0, max(axes.get_ylim()[1], 1 if not any(bottom) else 0))  # no negative counts or hours
        axes.set_xlim(starts[0], starts[-1] + step)
    if line["bin"] == "day":  # each day's name under its bar
        cost.set_xticks(centres)
    cost.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M" if line["bin"] == "hour" else "%a %d %b"))
    cost.set_xlabel("UTC")
    figure.autofmt_xdate()
    figure.tight_layout(rect=(0, 0, 0.85, 1))
    return figure


def draw(report: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = chart(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
