"""The loss curve of a built-in trainer run (metrics.jsonl, one record per evaluation, and metrics.json): training
and validation loss, the validation metric on its own axis, the epoch whose model was kept and where training
stopped early — what a person looks at to judge a run."""

from __future__ import annotations

from typing import Any


def loss_figure(history: list[dict[str, Any]], final: dict[str, Any], title: str) -> Any:
    """The figure (matplotlib), not yet saved; `final` is metrics.json (best_epoch, stopped_early, metric)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt
    from matplotlib.ticker import AutoLocator

    points = [h for h in history if "val_loss" in h]
    x_key = "epoch" if points and "epoch" in points[0] else "step"
    xs = [p[x_key] for p in points]
    figure, losses = plt.subplots(figsize=(8, 5), dpi=110)
    if points and "train_loss" in points[0]:
        losses.plot(xs, [p["train_loss"] for p in points], color="#1565c0", label="training loss")
    losses.plot(xs, [p["val_loss"] for p in points], color="#ef6c00", label="validation loss")
    losses.set_xlabel(x_key)
    losses.set_ylabel("loss")
    losses.grid(alpha=0.3)

    handles, labels = losses.get_legend_handles_labels()
    metric = next((name for name in ("val_accuracy", "val_rmse") if points and name in points[0]), None)
    if metric:
        score = losses.twinx()
        score.plot(xs, [p[metric] for p in points], color="#2e7d32", linestyle="--", label=metric.replace("_", " "))
        score.set_ylabel(metric.replace("_", " "))
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
    # matplotlib's default locator, held to whole epochs or steps.
    whole = AutoLocator()
    whole.set_params(integer=True)
    losses.xaxis.set_major_locator(whole)
    # Below the panel, outside the curves.
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize="small", frameon=False)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    return figure
