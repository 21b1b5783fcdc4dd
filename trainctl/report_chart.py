"""`trainctl report --png FILE`: jobs per day by state (stacked bars) over GPU-hours per day, one PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Colours people read without a legend: green done, red failed, grey cancelled, amber rejected.
STATE_COLOURS = {"succeeded": "#2e7d32", "failed": "#c62828", "cancelled": "#757575", "rejected": "#ef8f00"}


def draw(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    days = list(report["per_day"])
    figure, (jobs, gpu_hours) = plt.subplots(2, 1, figsize=(8, 6), dpi=110, sharex=True)
    bottom = [0] * len(days)
    for state, colour in STATE_COLOURS.items():
        counts = [report["per_day"][d]["by_state"][state] for d in days]
        jobs.bar(days, counts, bottom=bottom, color=colour, label=state)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    jobs.set_ylabel("requests")
    jobs.set_title(f"trainctl: requests finished per day, {report['since'][:10]} → {report['until'][:10]}")
    jobs.legend(loc="upper left", fontsize="small")
    gpu_hours.bar(days, [report["per_day"][d]["gpu_hours"] for d in days], color="#1565c0")
    gpu_hours.set_ylabel("GPU-hours")
    gpu_hours.set_xlabel("day (UTC)")
    if not days:
        jobs.text(0.5, 0.5, "nothing finished in this window", ha="center", transform=jobs.transAxes)
    figure.autofmt_xdate()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
