"""`trainctl report --png FILE`: the window at a glance, one PNG of five panels over the same time axis — requests
by outcome (stacked bars per bin: five minutes for an hour's window up to a day for a week's, trainctl/report.py
bin_for), the models' promotions and holds and the data check's rejections, each request's time to start, GPU time
and estimated cost per bin. The axis is the window itself, every bin drawn, empty ones too, so a quiet hour looks
quiet rather than one bar filling the width; times are in seconds, minutes or hours by their size, never 0.0017 h;
the legends stand outside the data."""

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
# The models and data panel: (the bin's field, its legend, colour).
DECISIONS = (
    ("promoted", "promoted", "#1b5e20"),
    ("held", "held", "#9e9e9e"),
    ("data_rejections", "data rejected", "#ef8f00"),
)


def time_unit(seconds: list[float]) -> tuple[str, float]:
    """The unit the largest of these durations reads best in, and its length in seconds: seconds under 2 minutes,
    minutes under 2 hours, else hours."""
    largest = max(seconds, default=0)
    return ("seconds", 1) if largest < 120 else ("minutes", 60) if largest < 7200 else ("hours", 3600)


def per(line: dict[str, Any]) -> str:
    """`per 5 minutes`, `per hour`: the bin, as the axis labels say it."""
    return f"per {line['bin']}"


def chart(report: dict[str, Any]) -> Any:
    """The report's figure (a matplotlib Figure), not yet saved: tests read its bars, limits and labels."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    line = report["timeline"]
    bins = line["bins"]
    step = timedelta(seconds=line.get("bin_seconds") or (3600 if line["bin"] == "hour" else 86400))
    since, until = datetime.fromisoformat(report["since"]), datetime.fromisoformat(report["until"])
    starts = [datetime.fromisoformat(b["start"]) for b in bins]
    centres = [s + step / 2 for s in starts]
    width = step * 0.8

    figure, (requests, decisions, start, gpu_time, cost) = plt.subplots(
        5, 1, figsize=(11, 11), dpi=100, sharex=True, gridspec_kw={"height_ratios": [3, 2, 2, 2, 2]}
    )
    figure.suptitle(
        f"trainctl report: {report['since'][:16].replace('T', ' ')} → {report['until'][:16].replace('T', ' ')} UTC,"
        f" {per(line)}"
    )

    bottom = [0] * len(bins)
    for state, colour in STATE_COLOURS.items():
        counts = [b["by_state"][state] for b in bins]
        requests.bar(centres, counts, width=width, bottom=bottom, color=colour, label=state)
        bottom = [low + n for low, n in zip(bottom, counts, strict=True)]
    requests.set_ylabel(f"requests {per(line)}")
    if not any(bottom):
        requests.text(0.5, 0.5, "nothing finished in this window", ha="center", transform=requests.transAxes)

    # Promotions, holds and data rejections side by side in each bin.
    for i, (field, label, colour) in enumerate(DECISIONS):
        offset = (i - 1) * width / 3
        counts = [b.get(field, 0) for b in bins]
        decisions.bar([c + offset for c in centres], counts, width=width / 3, color=colour, label=label)
    decisions.set_ylabel(f"models and data\n{per(line)}")
    if not any(b.get(f, 0) for b in bins for f, _, _ in DECISIONS):
        decisions.text(0.5, 0.5, "no promotion, hold or data rejection", ha="center", transform=decisions.transAxes)

    waits = [(c, s) for c, b in zip(centres, bins, strict=True) for s in b["time_to_start_seconds"]]
    unit, seconds = time_unit([s for _, s in waits])
    start.scatter([c for c, _ in waits], [s / seconds for _, s in waits], s=14, color="#6a1b9a", alpha=0.7)
    start.set_ylabel(f"time to start\n({unit}, each request)")
    if not waits:
        start.text(0.5, 0.5, "no request started", ha="center", transform=start.transAxes)

    gpu_unit, gpu_seconds = time_unit([b["gpu_hours"] * 3600 for b in bins])
    gpu_time.bar(centres, [b["gpu_hours"] * 3600 / gpu_seconds for b in bins], width=width, color="#1565c0")
    gpu_time.set_ylabel(f"GPU-{gpu_unit}\n{per(line)}")
    cost.bar(centres, [b["estimated_cost_usd"] for b in bins], width=width, color="#00838f")
    cost.set_ylabel(f"estimated cost\n(USD {per(line)})")

    for axes in (requests, decisions, start, gpu_time, cost):
        axes.grid(axis="y", alpha=0.3)
        axes.set_ylim(0, max(axes.get_ylim()[1], 1))  # no negative counts or times; an empty panel from 0 to 1
        axes.set_xlim(since, until)  # the window, not the bins around it
    for axes in (requests, decisions):
        axes.yaxis.get_major_locator().set_params(integer=True)
    if line["bin"] == "day":  # each day's name under its bar
        # Under the part of each day the window holds (the first and last are partly outside it).
        cost.set_xticks([max(s, since) + (min(s + step, until) - max(s, since)) / 2 for s in starts])
        cost.xaxis.set_major_formatter(mdates.DateFormatter("%a %d %b"))
    else:
        cost.xaxis.set_major_formatter(
            mdates.DateFormatter("%H:%M" if until - since <= timedelta(hours=12) else "%a %H:%M")
        )
    cost.set_xlabel("UTC")
    figure.autofmt_xdate()
    figure.tight_layout(rect=(0, 0, 0.84, 1))
    # Each legend right of its panel, level with its top, outside every panel.
    for axes, name in ((requests, "outcome"), (decisions, "models and data")):
        figure.legend(*axes.get_legend_handles_labels(), title=name, loc="upper left", fontsize="small",
                      bbox_to_anchor=(0.85, axes.get_position().y1))  # fmt: skip
    return figure


def draw(report: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = chart(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
