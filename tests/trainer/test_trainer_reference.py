"""The reference set (issue 38, points 3 and 4): read within bounds, the champion and this run's model scored on its
rows, and the paired bootstrap interval of the improvement in metrics.json — exactly [0, 0] for a challenger
identical to the champion, above 0 for a clearly better one, with seed 0 whatever the run's --seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from test_trainer_skill_and_bootstrap import reference_interval
from trainer_runs import output_dirs, process_env, run

import trainer.judging.reference_set
from functions.untrusted import job_outputs
from trainer.data.preprocess import Combine, Preprocessor
from trainer.judging import bootstrap
from trainer.judging.evidence import Evidence, after_training
from trainer.judging.reference_set import (
    ReferenceUnusable,
    read_reference_set,
    reference_on_rank_zero,
    validation_sample,
)
from trainer.judging.row_scores import score_rows
from trainer.model.network import BUILTIN_MLP, build_model
from trainer.outputs.model_folder import load_model
from trainer.predict import predict_rows
from trainer.storage.folders import gcs_client


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def rows(count: int) -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({"x": rng.normal(size=count), "colour": rng.choice(["a", "b"], size=count),
                     "y": rng.normal(size=count)})  # fmt: skip


def test_a_reference_file_or_folder_is_read_with_its_labelled_rows_only(tmp_path):
    table = rows(10).set_column(2, "y", pa.array([1.0, None, float("nan"), *range(7)]))
    pq.write_table(table, tmp_path / "reference.parquet")
    assert read_reference_set(str(tmp_path / "reference.parquet"), "y").num_rows == 8  # null and NaN left out
    folder = tmp_path / "csv"
    folder.mkdir()
    pa_csv.write_csv(rows(5), folder / "a.csv")
    pa_csv.write_csv(rows(4), folder / "b.csv")
    (folder / "_SUCCESS").write_bytes(b"")
    read = read_reference_set(str(folder), "y")
    assert read.num_rows == 9 and read.column_names == ["x", "colour", "y"]


def test_a_reference_set_beyond_its_bounds_or_without_the_target_is_refused(tmp_path, monkeypatch):
    """Bound what you read: rows (from a Parquet file's footer before it is decoded, else once read) and bytes."""
    pq.write_table(rows(50), tmp_path / "reference.parquet")
    pa_csv.write_csv(rows(50), tmp_path / "reference.csv")
    monkeypatch.setattr(trainer.judging.reference_set, "MAX_REFERENCE_ROWS", 49)
    for name in ("reference.parquet", "reference.csv"):
        with pytest.raises(ValueError, match="it holds more than 49 rows"):
            read_reference_set(str(tmp_path / name), "y")
    monkeypatch.setattr(trainer.judging.reference_set, "MAX_REFERENCE_ROWS", 50)
    monkeypatch.setattr(trainer.judging.reference_set, "MAX_REFERENCE_BYTES", 100)
    with pytest.raises(ValueError, match="its files hold more than 100 bytes"):
        read_reference_set(str(tmp_path / "reference.parquet"), "y")
    monkeypatch.setattr(trainer.judging.reference_set, "MAX_REFERENCE_BYTES", 1 << 20)
    with pytest.raises(ValueError, match=r"it has no column 'target' \(the target\)"):
        read_reference_set(str(tmp_path / "reference.parquet"), "target")


def test_an_unusable_reference_set_stops_the_run_before_training(world_of_one, tmp_path):
    """Every rank learns it from rank 0 and raises together; the note's reason is `data`."""
    with pytest.raises(ReferenceUnusable) as refused:
        reference_on_rank_zero(str(tmp_path / "missing.parquet"), "y")
    assert refused.value.reason == "data"
    assert str(refused.value).startswith(f"--reference-data {tmp_path / 'missing.parquet'} cannot be used: ")
    assert str(refused.value).endswith("; the run stopped before training")


def test_a_reference_set_in_cloud_storage_is_read(world_of_one, gcs_bucket):
    bucket = gcs_client().bucket(gcs_bucket)
    bucket.blob("models/m/reference/reference.parquet").upload_from_string(
        trainer.judging.reference_set.parquet_bytes(rows(8))
    )
    read = reference_on_rank_zero(f"gs://{gcs_bucket}/models/m/reference/reference.parquet", "y")
    assert read is not None and read.num_rows == 8


def test_the_validation_sample_is_seeded_bounded_and_keeps_every_column(world_of_one):
    table = rows(1000)
    sample = validation_sample(table, sample_rows=100)
    assert sample is not None and sample.num_rows == 100 and sample.column_names == table.column_names
    assert sample.equals(validation_sample(table, sample_rows=100))  # the same rows every time
    assert set(sample["x"].to_pylist()) <= set(table["x"].to_pylist())
    assert sorted(sample["x"].to_pylist()) != sorted(table["x"].to_pylist()[:100])  # spread, not the first rows
    everything = validation_sample(table, sample_rows=5000)
    assert everything is not None and everything.equals(table)


def regression_model(table: pa.Table, seed: int) -> tuple[torch.nn.Module, Preprocessor]:
    prep = Preprocessor.fit(table, "y", "regression", Combine(across_ranks=False))
    torch.manual_seed(seed)
    model = build_model(BUILTIN_MLP, prep.num_features, 1, {"hidden_sizes": [4], "dropout": 0.0})
    return model.eval(), prep


def test_regression_models_are_compared_in_the_targets_own_units(world_of_one):
    """issue 38, point 3: each model's outputs are un-standardised with its own preprocessing — here their target
    means and spreads differ tenfold — so RMSE and its improvement are in the target's units, as `trainer.predict`
    gives predictions; both losses are in this run's standardised units, as its `val_loss` is."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=600)
    reference = pa.table({"x": x[:200], "y": 100 + 50 * x[:200]})
    champion, champion_prep = regression_model(pa.table({"x": x[200:400], "y": 1000 + 500 * x[200:400]}), 1)
    challenger, challenger_prep = regression_model(pa.table({"x": x[400:], "y": 100 + 50 * x[400:]}), 2)
    assert champion_prep.target_std > 5 * challenger_prep.target_std
    champion_scores = score_rows(champion, champion_prep, reference, challenger_prep.target_std, torch.device("cpu"))
    evidence = Evidence(reference=reference, champion_scores=champion_scores)
    entries = after_training(evidence, challenger, challenger_prep, 0.95, torch.device("cpu"))

    def squared_errors(model, prep) -> np.ndarray:
        predicted = predict_rows(model, prep, reference)["prediction"].to_numpy()
        return (predicted - reference["y"].to_numpy()) ** 2

    mine, theirs = squared_errors(challenger, challenger_prep), squared_errors(champion, champion_prep)
    assert entries["reference_val_rmse"] == pytest.approx(np.sqrt(mine.mean()))
    assert entries["reference_val_loss"] == pytest.approx(mine.mean() / challenger_prep.target_std**2)
    assert champion_scores.figures()["val_rmse"] == pytest.approx(np.sqrt(theirs.mean()))
    rmse = entries["reference_improvement_val_rmse"]
    assert rmse["point"] == pytest.approx(np.sqrt(theirs.mean()) - np.sqrt(mine.mean()))
    assert rmse["low"] <= rmse["point"] <= rmse["high"]
    loss = entries["reference_improvement_val_loss"]
    assert loss["point"] == pytest.approx((theirs.mean() - mine.mean()) / challenger_prep.target_std**2)
    assert champion_scores.skill.value == pytest.approx(1 - theirs.mean() / reference["y"].to_numpy().var())


# Whole runs on the breast cancer data, with part of it as the reference set.


@pytest.fixture(scope="module")
def reference_file(breast_cancer_csv_shards, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reference") / "reference.parquet"
    pq.write_table(pa_csv.read_csv(breast_cancer_csv_shards / "part-00002.csv"), path)
    return path


def train(data: Path, out: Path, *flags: str) -> dict:
    finished = run("trainer.train", ["--data", str(data), "--target", "target", *flags, *output_dirs(out)],
                   process_env(), out.parent / f"{out.name}.log")  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    return json.loads((out / "model" / "metrics.json").read_text())


def per_row(model_dir: Path, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each row's loss and hit for the model in `model_dir`, through its own preprocessing."""
    model, prep = load_model(str(model_dir))
    targets = prep.targets(table)
    with torch.no_grad():
        outputs = model(prep.features(table))
    loss = F.cross_entropy(outputs, targets, reduction="none").double().numpy()
    return loss, (outputs.argmax(dim=1) == targets).double().numpy()


def test_a_clearly_better_challenger_gets_an_interval_above_zero_with_seed_0(
    breast_cancer_csv_shards, reference_file, tmp_path
):
    """issue 38, point 3: a champion barely trained against one trained properly; both scored on the reference
    rows; the interval of every metric's improvement (here at --confidence 0.9) is the paired bootstrap of their
    per-row scores with seed 0 — the run's --seed is 3."""
    data = breast_cancer_csv_shards
    train(data, tmp_path / "weak", "--epochs", "1", "--learning-rate", "1e-5", "--hidden-sizes", "4", "--seed", "1")
    champion = tmp_path / "weak" / "model"
    metrics = train(data, tmp_path / "good", "--epochs", "8", "--batch-size", "32", "--seed", "3",
                    "--champion-model-dir", str(champion), "--reference-data", str(reference_file),
                    "--confidence", "0.9", "--min-champion-skill=-100")  # fmt: skip
    reference = pq.read_table(reference_file)
    assert metrics["reference_rows"] == reference.num_rows == 189
    assert metrics["reference_confidence"] == 0.9
    assert metrics["reference_method"] == "paired bootstrap, 2000 resamples"
    challenger_loss, challenger_hits = per_row(tmp_path / "good" / "model", reference)
    champion_loss, champion_hits = per_row(champion, reference)
    assert metrics["reference_val_accuracy"] == pytest.approx(challenger_hits.mean())
    assert metrics["reference_val_loss"] == pytest.approx(challenger_loss.mean(), rel=1e-5)
    assert metrics["champion_reference_val_accuracy"] == pytest.approx(champion_hits.mean())
    assert metrics["champion_reference_skill"] is not None and "champion_reference_error" not in metrics

    accuracy = metrics["reference_improvement_val_accuracy"]
    assert accuracy == pytest.approx(reference_interval(challenger_hits, champion_hits, bootstrap.mean, True, 0.9))
    assert 0 < accuracy["low"] < accuracy["point"] < accuracy["high"]
    loss = metrics["reference_improvement_val_loss"]
    expected = reference_interval(challenger_loss, champion_loss, bootstrap.mean, False, 0.9)
    assert loss == pytest.approx(expected, rel=1e-4) and loss["low"] > 0
    # Every entry fits what the controller reads of metrics.json (at most 100, nested once, finite numbers).
    read = job_outputs.parse_metrics((tmp_path / "good" / "model" / "metrics.json").read_bytes())
    assert read.note == "" and read.values["reference_improvement_val_accuracy"] == accuracy


def test_a_challenger_identical_to_the_champion_improves_by_exactly_nothing(
    trained_breast_cancer_model, breast_cancer_csv_shards, reference_file, tmp_path
):
    """issue 38, point 3: the same data and settings as the session's champion give the same weights; paired on the
    same rows, every resample's improvement is 0, so the interval is [0, 0] (unpaired it would be about ±0.03)."""
    metrics = train(breast_cancer_csv_shards, tmp_path / "same", "--epochs", "3", "--batch-size", "32", "--seed", "5",
                    "--champion-model-dir", str(trained_breast_cancer_model), "--reference-data",
                    str(reference_file))  # fmt: skip
    assert metrics["reference_val_accuracy"] == metrics["champion_reference_val_accuracy"]
    for metric in ("val_accuracy", "val_loss"):
        assert metrics[f"reference_improvement_{metric}"] == {"point": 0.0, "low": 0.0, "high": 0.0}
    assert metrics["label_check"] == "passed" and metrics["champion_reference_skill"] > 0.5
    assert not (tmp_path / "same" / "model" / "reference.parquet").exists()  # a reference set was given
