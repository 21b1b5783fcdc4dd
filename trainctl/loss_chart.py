"""The loss curve of a built-in trainer run (metrics.jsonl, one record per evaluation, and metrics.json): training
and validation loss, the validation metric on its own axis, the epoch whose model was kept and where training
stopped early — what a person looks at to judge a run. `trainctl demo` and `trainctl curve ID` draw it here.

The axes are chosen so that the picture does not exaggerate (issue 44, point 5): losses and error metrics (RMSE)
start at zero; a score bounded by 1 (accuracy) gets at least a fifth of its 0–1 range, with the majority-class
baseline in view, so 0.930 → 0.955 reads as the small move it is; epochs are whole numbers."""

from __future__ import annotations

import math
from typing import Any

# Scores on 0–1: the axis shows at least this much of that range.
MIN_SCORE_SPAN = 0.2
# Every point marked up to this many evaluations (one evaluation alone is a point, not a line).
MARKED_POINTS = 40


def history_metric(history: list[dict[str, Any]]) -> str | None:
    """The validation metric the history holds (val_accuracy for classification, val_rmse for regression)."""
    return next((name for name in ("val_accuracy", "val_rmse") if history and name in history[0]), None)


def metric_limits(name: str, values: list[float]) -> tuple[float, float]:
    """The metric axis for these values (the metric's own, and its baseline's): a score on 0–1 spans at least
    MIN_SCORE_SPAN, inside 0–1, with a margin; an error (RMSE) starts at zero; anything else gets a tenth of its
    range either side."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    if name.endswith("accuracy") and 0 <= low and high <= 1:
        span = min(1.0, max((high - low) * 1.1, MIN_SCORE_SPAN))
        middle = (low + high) / 2
        bottom = min(max(0.0, middle - span / 2), 1 - span)
        return round(bottom, 6), round(bottom + span, 6)
    if name.endswith(("rmse", "loss")) and low >= 0:
        return 0.0, high * 1.1 if high > 0 else 1.0
    pad = (high - low) / 10 or abs(high) / 10 or 1.0
    return low - pad, high + pad


def epoch_limits(xs: list[int]) -> tuple[float, float]:
    """The x axis: the evaluations' span, half an epoch either side so that the first and last points show."""
    return (xs[0] - 0.5, xs[-1] + 0.5) if xs else (0.5, 1.5)


def span_in_words(values: list[float]) -> str:
    """The metric's first and last values, e.g. `0.930 → 0.955`: the move the axis shows, in numbers."""
    return f"{values[0]:.3g} → {values[-1]:.3g}" if len(values) > 1 else f"{values[0]:.3g}"


def loss_figure(history: list[dict[str, Any]], final: dict[str, Any], title: str) -> Any:
    """The figure (matplotlib), not yet saved; `final` is metrics.json (best_epoch, stopped_early, metric)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    points = [h for h in history if "val_loss" in h]
    x_key = "epoch" if points and "epoch" in points[0] else "step"
    xs = [p[x_key] for p in points]
    marker = "o" if len(points) <= MARKED_POINTS else None
    figure, losses = plt.subplots(figsize=(8, 5), dpi=110)
    if points and "train_loss" in points[0]:
        losses.plot(xs, [p["train_loss"] for p in points], color="#1565c0", marker=marker, label="training loss")
    losses.plot(xs, [p["val_loss"] for p in points], color="#ef6c00", marker=marker, label="validation loss")
    losses.set_xlabel(x_key)
    losses.set_ylabel("loss")
    losses.set_ylim(*metric_limits("loss", [p[k] for p in points for k in ("train_loss", "val_loss") if k in p]))
    losses.grid(alpha=0.3)

    handles, labels = losses.get_legend_handles_labels()
    metric = history_metric(points)
    if metric:
        words = metric.replace("_", " ")
        values = [p[metric] for p in points]
        score = losses.twinx()
        score.plot(
            xs, values, color="#2e7d32", linestyle="--", marker=marker, label=f"{words}: {span_in_words(values)}"
        )
        shown = list(values)
        baseline = metric.replace("val_", "baseline_")
        if baseline in points[0]:
            # The same every epoch (the validation rows' majority class or mean): one line across the panel.
            base = points[-1][baseline]
            guess = "always the majority class" if metric.endswith("accuracy") else "always the mean"
            score.axhline(base, color="#9e9e9e", linestyle=":", label=f"{baseline.replace('_', ' ')} ({guess})")
            shown.append(base)
        score.set_ylim(*metric_limits(metric, shown))
        score.set_ylabel(words)
        more = score.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    best = final.get("best_epoch")
    if best is not None and x_key == "epoch":
        handles.append(losses.axvline(best, color="#2e7d32", linewidth=1.5))
        labels.append(f"best epoch {best} (the model kept)")
    if final.get("stopped_early") and xs:
        handles.append(losses.axvline(xs[-1], color="#c62828", linestyle=":", linewidth=1.5))
        labels.append(f"stopped early after {x_key} {xs[-1]}")
    losses.set_title(title)
    losses.set_xlim(*epoch_limits(xs))
    if xs and xs[-1] - xs[0] <= 12:  # every epoch named
        losses.set_xticks(range(int(xs[0]), int(xs[-1]) + 1))
    else:
        losses.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs or steps
    # Below the panel, outside the curves.
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize="small", frameon=False)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    return figure
