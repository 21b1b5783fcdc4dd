"""Drift from the champion's data measured before training (issue 27, point 3): the population stability index per
feature in the champion's own bins — small for the same distribution, large for a shifted one, not fooled by
values that repeat — reported in metrics.json, and past `--max-drift` a stop of every rank before the first epoch
with failure.json's reason `data`."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pytest
import torch.distributed as dist
from trainer_runs import output_dirs, process_env, run

from functions.untrusted import job_outputs
from trainer.data.preprocess import Combine
from trainer.data.schema import describe, schema_bytes
from trainer.flags import parse_args
from trainer.judging import drift
from trainer.judging.drift import DataDrift, drift_against_champion, measure, psi
from trainer.outputs import model_folder

ALONE = Combine(across_ranks=False)


def champion_of(table: pa.Table, target: str = "y") -> dict:
    return json.loads(schema_bytes(describe(table, target, None, "csv", ALONE, seed=0).document(task="regression")))


def drift_of(champion_table: pa.Table, new_table: pa.Table) -> tuple[dict, dict]:
    return measure(champion_of(champion_table), new_table, describe(new_table, "y", None, "csv", ALONE, 0), ALONE)


def sample(seed: int, rows: int = 5000, shift: float = 0.0, ones: float = 0.3, blue: float = 0.5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "x": rng.normal(loc=shift, size=rows),
        "binary": (rng.random(rows) < ones).astype(np.int64),
        "count": rng.poisson(2.0, size=rows),
        "colour": rng.choice(["blue", "red", "green"], p=[blue, (1 - blue) / 2, (1 - blue) / 2], size=rows),
        "flag": rng.random(rows) < 0.5,
        "y": rng.normal(size=rows),
    })  # fmt: skip


def test_psi_follows_its_definition():
    expected, actual = np.array([0.5, 0.3, 0.2]), np.array([0.3, 0.3, 0.4])
    assert psi(expected, actual) == pytest.approx(0.2 * np.log(0.3 / 0.5) * -1 + 0.2 * np.log(0.4 / 0.2))
    assert psi(expected, expected) == 0.0
    assert psi(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(2 * (1 - 1e-4) * np.log(1e4))  # bounded


def test_the_same_distribution_drifts_little_and_a_shifted_one_far():
    """issue 27, point 3: two samples of one distribution stay well below 0.1 on every feature; a number shifted by
    one standard deviation, and categories whose shares changed, go past 0.25."""
    same, not_measured = drift_of(sample(1), sample(2))
    assert not_measured == {} and set(same) == {"x", "binary", "count", "colour", "flag"}
    assert max(same.values()) < 0.02, same

    shifted, _ = drift_of(sample(1), sample(2, shift=1.0, ones=0.7, blue=0.1))
    assert shifted["x"] > 0.25 and shifted["binary"] > 0.25 and shifted["colour"] > 0.25, shifted
    assert shifted["count"] < 0.02 and shifted["flag"] < 0.02


def test_a_feature_of_repeated_values_is_not_flagged_for_what_its_quantiles_cannot_tell():
    """issue 27, point 3: the quantiles of a column of small counts repeat values, so its share at or below each
    is known only within a range; the same distribution must not read as a shift (quantile bins taken at face
    value give about 0.2 for a 70/30 column of zeros and ones). A 0/1 column's share is exact (its mean), so a move
    from 30% to 50% ones still shows."""
    champion, again = sample(1, rows=20_000), sample(2, rows=20_000)
    figures, _ = drift_of(champion, again)
    assert figures["binary"] < 0.01 and figures["count"] < 0.01, figures
    moved, _ = drift_of(champion, sample(2, rows=20_000, ones=0.5))
    assert moved["binary"] == pytest.approx(0.2 * np.log(0.5 / 0.3) + 0.2 * np.log(0.7 / 0.5), abs=0.02), moved


def test_a_feature_turning_mostly_missing_drifts():
    """issue 27, point 3: missing values are a bin of their own."""
    new = sample(2)
    x = new["x"].to_numpy()
    new = new.set_column(0, "x", pa.array(np.where(np.arange(len(x)) % 2 == 0, np.nan, x)))
    figures, _ = drift_of(sample(1), new)
    assert figures["x"] > 0.25


def test_features_gone_or_of_another_type_are_named_not_measured():
    """issue 27, point 3: only what can be compared is compared (the controller rejects such data at admission)."""
    new = sample(2).drop_columns(["count"])
    new = new.set_column(0, "x", pc.cast(new["x"], pa.string()))
    figures, not_measured = drift_of(sample(1), new)
    assert not_measured == {"count": "not in this run's data", "x": "was number, is string"}
    assert "x" not in figures and "colour" in figures


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def against(champion_dir, table: pa.Table, max_drift: float | None) -> dict:
    return drift_against_champion(
        str(champion_dir), table, describe(table, "y", None, "csv", ALONE, 0), ALONE, max_drift
    )


def test_a_champion_without_schema_json_is_reported_and_never_stops_the_run(world_of_one, tmp_path):
    """issue 27, point 3: a champion registered before this change has no schema.json: no drift, said so; an
    unusable file is said so too; --max-drift cannot stop a run on figures that do not exist."""
    metrics = against(tmp_path, sample(2), max_drift=0.1)
    assert metrics["drift"] is None and metrics["drift_measure"] == "psi" and metrics["drift_threshold"] == 0.1
    assert metrics["drift_error"].endswith("has no schema.json: it was trained before the trainer recorded its data, "
                                           "so drift was not measured")  # fmt: skip
    (tmp_path / "schema.json").write_text('{"schema_version": 1, "columns": {}}')
    assert against(tmp_path, sample(2), max_drift=0.1)["drift_error"] == (
        "the champion's schema.json could not be used, so drift was not measured: "
        f"{tmp_path}/schema.json is not a schema this trainer writes: `columns` is not a list"
    )


def test_drift_past_max_drift_is_refused_naming_the_features(world_of_one, tmp_path):
    """issue 27, point 3: above --max-drift a DataDrift (reason `data`) names each feature past it with its figure;
    at or below it, and without it, the figures are only reported."""
    (tmp_path / "schema.json").write_bytes(schema_bytes(champion_of(sample(1))))
    new = sample(2, shift=1.0, blue=0.1)
    with pytest.raises(DataDrift) as refused:
        against(tmp_path, new, max_drift=0.25)
    assert refused.value.reason == "data"
    message = str(refused.value)
    assert message.startswith("the data drifted from the champion's past --max-drift 0.25 (PSI, population ")
    assert "'x' " in message and "'colour' " in message and "'flag'" not in message
    assert refused.value.details["max_drift_feature"] in ("x", "colour")

    metrics = against(tmp_path, new, max_drift=None)
    assert metrics["max_drift_feature"] == max(metrics["drift"], key=metrics["drift"].get)
    assert metrics["drift_features"] == 5 and "drift_not_measured" not in metrics
    assert against(tmp_path, new, max_drift=1000.0)["drift_threshold"] == 1000.0


def test_max_drift_must_be_a_positive_number(capsys):
    for value in ("0", "-1", "nan", "inf"):
        with pytest.raises(SystemExit):
            parse_args(["--data", "d", "--target", "y", "--max-drift", value])
    assert "--max-drift must be a number above 0" in capsys.readouterr().err
    assert parse_args(["--data", "d", "--target", "y", "--max-drift", "0.2"]).max_drift == 0.2


def test_what_the_trainer_writes_fits_what_the_controller_reads():
    """issue 27, point 3: metrics.json's `drift` keeps no more entries than the controller reads of a nested
    metric, and the note's error is clipped where the controller clips it."""
    assert drift.REPORTED_FEATURES <= job_outputs.MAX_NESTED_ENTRIES
    assert model_folder.MAX_FAILURE_CHARS == job_outputs.MAX_FAILURE_CHARS


def test_a_run_past_max_drift_stops_before_its_first_epoch(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 27, point 3: two ranks measure the same figures and stop together before training: failure.json's
    reason is `data` and its error names the feature and its figure; no checkpoint and no model are written.
    torchrun restarts the failed group once, and the restarted group stops on the note without reading the data."""
    data = tmp_path / "data"
    data.mkdir()
    for shard in sorted(breast_cancer_csv_shards.glob("*.csv")):
        table = pa_csv.read_csv(shard)
        pa_csv.write_csv(table.set_column(0, "mean radius", pc.add(table["mean radius"], 5.0)), data / shard.name)
    out = tmp_path / "out"
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(data), "--target", "target", "--epochs", "2", "--champion-model-dir",
         str(trained_breast_cancer_model), "--max-drift", "0.25", *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 1, finished.output[-4000:]
    note = json.loads((out / "model" / "failure.json").read_text())
    assert note["reason"] == "data" and note["max_drift_feature"] == "mean radius"
    assert note["error"].startswith("DataDrift: the data drifted from the champion's past --max-drift 0.25")
    assert f"'mean radius' {note['drift']['mean radius']:.3f}" in note["error"]
    assert not finished.messages("training loop starts")
    assert not (out / "checkpoints").exists() and not (out / "model" / "model.pt").exists()
    assert len(finished.messages("data drift measured against the champion")) == 1  # rank 0, first attempt only
    assert len(finished.messages("the data were refused by this run's previous attempt: not read again")) == 1
    assert len(finished.messages("dataset loaded")) == 2  # both ranks of the first attempt, none after
