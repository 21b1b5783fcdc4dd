"""`trainctl curve ID`: any run's losses and metric as a PNG, with axes that do not exaggerate, and a sentence,
never a traceback, for a run with nothing to draw (issue 44, point 5)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import matplotlib.pyplot as plt
import pytest

import functions.cloud.gcs
import trainctl.context
from trainctl import curve
from trainctl.cli import main
from trainctl.loss_chart import loss_figure, metric_limits

PNG = b"\x89PNG\r\n\x1a\n"
# What the demo's champion showed: accuracy 0.930 → 0.955, drawn as cliffs on a 0.930–0.955 axis.
HISTORY = [
    {"epoch": e, "step": 4 * e, "train_loss": 0.5 / e, "val_loss": 0.4 / e, "val_accuracy": 0.93 + e * 0.005,
     "baseline_accuracy": 0.63}
    for e in range(1, 6)
]  # fmt: skip


def test_accuracy_gets_at_least_a_fifth_of_its_range_and_an_error_metric_starts_at_zero():
    assert metric_limits("val_accuracy", [0.930, 0.955]) == (0.8, 1.0)
    assert metric_limits("val_accuracy", [0.40, 0.45]) == pytest.approx((0.325, 0.525))
    assert metric_limits("val_accuracy", [0.2, 0.9]) == pytest.approx((0.165, 0.935))
    assert metric_limits("val_rmse", [3.1, 3.2]) == pytest.approx((0, 3.52))
    assert metric_limits("loss", [0.1, 0.5]) == pytest.approx((0, 0.55))


def test_the_curve_shows_small_moves_as_small_with_whole_epochs_and_the_baseline():
    """Guards issue 44, point 5: the demo's accuracy axis ran 0.930–0.955, so 0.005 looked like a cliff."""
    figure = loss_figure(HISTORY, {"best_epoch": 5}, "run r1 · model churn v3 · val accuracy")
    try:
        losses, score = figure.axes
        low, high = score.get_ylim()
        assert low < 0.63 and 0.955 < high <= 1  # the baseline 0.63 in view, the moves small
        assert high - low >= 0.2
        assert losses.get_ylim()[0] == 0
        assert losses.get_xlim() == (0.5, 5.5)
        assert all(float(t).is_integer() for t in losses.get_xticks())
        labels = [t.get_text() for t in figure.legends[0].get_texts()]
        assert "val accuracy: 0.935 → 0.955" in labels
        assert losses.get_title() == "run r1 · model churn v3 · val accuracy"
    finally:
        plt.close(figure)
    no_baseline = [{k: v for k, v in h.items() if k != "baseline_accuracy"} for h in HISTORY]
    figure = loss_figure(no_baseline, {}, "a run")
    try:
        assert figure.axes[1].get_ylim() == (0.8, 1.0)
    finally:
        plt.close(figure)


def test_a_run_of_one_epoch_is_drawn_as_points():
    figure = loss_figure(HISTORY[:1], {}, "one")
    try:
        losses, _ = figure.axes
        assert [line.get_marker() for line in losses.lines[:2]] == ["o", "o"]
        assert losses.get_xlim() == (0.5, 1.5)
    finally:
        plt.close(figure)


def test_metrics_jsonl_is_read_as_untrusted_numbers():
    content = (
        b'{"epoch": 2, "val_loss": 0.3, "note": "x", "bad": true}\nnot json\n[1]\n{"epoch": 1, "val_loss": 0.5}\n{"ep'
    )
    assert curve.parse_history(content) == [{"epoch": 1, "val_loss": 0.5}, {"epoch": 2, "val_loss": 0.3}]
    assert curve.parse_final(b'{"best_epoch": 3, "stopped_early": true}') == {"best_epoch": 3, "stopped_early": True}
    assert curve.parse_final(b"[]") == {} and curve.parse_final(b"{") == {} and curve.parse_final(None) == {}


class FakeGcs:
    objects: ClassVar[dict[str, bytes]] = {}

    def __init__(self, project):
        pass

    def read(self, bucket, name, generation=None, max_bytes=None):
        found = self.objects.get(f"gs://{bucket}/{name}")
        return None if found is None else (found, 1)


def record(state: str = "succeeded", trainer: dict | None = None):
    return SimpleNamespace(
        request_id="r1",
        state=state,
        request={"trainer": trainer or {"builtin": "tabular"}, "model": {"name": "churn"}},
        model_steps=SimpleNamespace(version="3"),
        artifacts=SimpleNamespace(model_dir="gs://control/runs/r1/model/"),
    )


@pytest.fixture
def ledger(monkeypatch):
    """curve's reads: the ledger's record (`found`), the model folder's objects (`FakeGcs.objects`)."""
    found = {"record": record()}
    monkeypatch.setattr(curve, "find_record", lambda request_id, team: found["record"])
    monkeypatch.setattr(functions.cloud.gcs, "Gcs", FakeGcs)
    monkeypatch.setattr(trainctl.context, "cli_settings", lambda: SimpleNamespace(project="p"))
    monkeypatch.setattr(FakeGcs, "objects", {})
    return found


def test_curve_writes_a_png_of_the_run(ledger, tmp_path: Path, capsys):
    FakeGcs.objects["gs://control/runs/r1/model/metrics.jsonl"] = "".join(
        json.dumps(h) + "\n" for h in HISTORY
    ).encode()
    FakeGcs.objects["gs://control/runs/r1/model/metrics.json"] = b'{"best_epoch": 5, "stopped_early": false}'
    out = tmp_path / "pics" / "r1.png"
    assert main(["curve", "r1", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)
    assert f"curve: {out} (5 evaluations, epoch 1–5)" in capsys.readouterr().out


def test_one_epoch_is_drawn_and_said(ledger, tmp_path: Path, capsys):
    FakeGcs.objects["gs://control/runs/r1/model/metrics.jsonl"] = json.dumps(HISTORY[0]).encode()
    assert main(["curve", "r1", "--out", str(tmp_path / "c.png")]) == 0
    assert "only one epoch so far: the picture shows points" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("state", "trainer", "said"),
    [
        ("running", None, "r1 has no metrics yet: the trainer writes them at the end of each epoch"),
        ("queued", None, "r1 is queued: it has not trained yet"),
        ("rejected", None, "r1 was rejected: it never ran, so it has no curve"),
        ("succeeded", {"image": "x"}, "r1's program wrote no metrics.jsonl in gs://control/runs/r1/model/: only the"),
        ("failed", None, "r1 (failed) left no metrics.jsonl in gs://control/runs/r1/model/: it stopped before"),
    ],
)
def test_a_run_with_nothing_to_draw_gets_a_sentence_and_exit_3(ledger, tmp_path, capsys, state, trainer, said):
    ledger["record"] = record(state, trainer)
    out = tmp_path / "c.png"
    assert main(["curve", "r1", "--out", str(out)]) == 3
    assert said in capsys.readouterr().out and not out.exists()


def test_no_such_request(ledger, capsys):
    ledger["record"] = None
    assert main(["curve", "nope"]) == 3
    assert "no request 'nope' in the ledger" in capsys.readouterr().out


def test_the_demo_draws_its_champion_the_same_way(monkeypatch, tmp_path: Path):
    from trainctl import demo

    objects = {
        "gs://m/model/metrics.jsonl": "".join(json.dumps(h) + "\n" for h in HISTORY).encode() + b"cut sho",
        "gs://m/model/metrics.json": b'{"best_epoch": 4, "stopped_early": true}',
    }
    monkeypatch.setattr(demo, "_read", objects.__getitem__)
    path = demo._loss_curve("gs://m/model/", tmp_path)
    assert path == tmp_path / "loss-curve.png" and path.read_bytes().startswith(PNG)


def test_a_metrics_jsonl_past_the_bound_is_refused_unread(ledger, monkeypatch, capsys):
    """metrics.jsonl is the job's output: read with a bound, so a huge one cannot exhaust the user's memory."""
    bounds = []

    def read(self, bucket, name, generation=None, max_bytes=None):
        bounds.append(max_bytes)
        raise functions.cloud.gcs.TooLarge(f"gs://{bucket}/{name}", max_bytes)

    monkeypatch.setattr(FakeGcs, "read", read)
    assert main(["curve", "r1"]) == 4
    assert (
        "gs://control/runs/r1/model/metrics.jsonl is larger than 8,192 KiB: too large to draw"
        in capsys.readouterr().out
    )
    assert bounds == [curve.MAX_HISTORY_BYTES]
