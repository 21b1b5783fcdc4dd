"""The demo's loss curve: losses, the validation metric, the best epoch and the early stop (issue 28, point 6)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from trainctl.loss_chart import loss_figure

HISTORY = [
    {
        "epoch": e,
        "step": 4 * e,
        "train_loss": 1 / e,
        "val_loss": 1 / e + max(0, e - 5) / 10,
        "val_accuracy": 0.5 + e / 50,
    }
    for e in range(1, 10)
]


def test_the_loss_curve_marks_the_best_epoch_and_the_early_stop_and_shows_the_validation_metric():
    """Guards issue 28, point 6: the loss curve showed two lines and nothing else."""
    figure = loss_figure(HISTORY, {"best_epoch": 5, "stopped_early": True}, "a run")
    try:
        losses, metric = figure.axes
        assert metric.get_ylabel() == "val accuracy"
        assert list(metric.lines[0].get_ydata()) == [h["val_accuracy"] for h in HISTORY]
        marks = {line.get_label(): line.get_xdata()[0] for line in losses.lines if len(set(line.get_xdata())) == 1}
        assert list(marks.values()) == [5, 9], marks
        (legend,) = figure.legends
        texts = [text.get_text() for text in legend.get_texts()]
        assert texts == [
            "training loss", "validation loss", "val accuracy: 0.52 → 0.68",
            "best epoch 5 (the model kept)", "stopped early after epoch 9",
        ]  # fmt: skip
        figure.canvas.draw()
        assert not legend.get_window_extent().overlaps(losses.get_window_extent())
    finally:
        plt.close(figure)


def test_a_run_that_ran_all_its_epochs_has_no_early_stop_mark():
    figure = loss_figure(HISTORY, {"best_epoch": 9, "stopped_early": False}, "a run")
    try:
        texts = [text.get_text() for text in figure.legends[0].get_texts()]
        assert "best epoch 9 (the model kept)" in texts and not any("stopped early" in t for t in texts)
    finally:
        plt.close(figure)
