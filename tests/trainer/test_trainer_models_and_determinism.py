"""A user's own nn.Module trains on the same pipeline and `trainer.predict` rebuilds it; runs are deterministic
for a given seed and world size; gradient accumulation over micro-batches equals one large batch."""

from __future__ import annotations

import json

import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
import torch
from trainer_runs import assert_bitwise_equal, model_weights, output_dirs, process_env, run, signal_table

pytestmark = pytest.mark.slow


def test_user_model_trains_without_torchrun_and_predict_rebuilds_it(breast_cancer_csv_shards, tmp_path):
    out = tmp_path / "out"
    trained = run(
        "trainer.train",  # no torchrun: a world of one process
        ["--data", str(breast_cancer_csv_shards), "--target", "target", "--epochs", "15", "--batch-size", "32",
         "--model", "trainer_fixture_models:tiny_residual", "--model-kwargs", '{"width": 16}', *output_dirs(out)],
        process_env(),
        tmp_path / "train.log",
    )  # fmt: skip
    assert trained.returncode == 0, trained.output[-4000:]
    package = torch.load(out / "model" / "model.pt", weights_only=True)
    assert package["model"] == {"factory": "trainer_fixture_models:tiny_residual", "kwargs": {"width": 16}}
    assert set(package["state_dict"]) >= {"project.weight", "head.weight"}
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["world_size"] == 1 and metrics["val_accuracy"] > metrics["baseline_accuracy"] + 0.25

    predicted = run(
        "trainer.predict",
        ["--model-dir", str(out / "model"), "--data", str(breast_cancer_csv_shards / "part-00001.csv"),
         "--out", str(tmp_path / "predictions.parquet")],
        process_env(),
        tmp_path / "predict.log",
    )  # fmt: skip
    assert predicted.returncode == 0, predicted.output[-4000:]
    table = pq.read_table(tmp_path / "predictions.parquet")
    assert table.num_rows == 190
    assert table.schema.field("prediction").type == table.schema.field("target").type  # labels, not indices
    assert all(0.5 <= c <= 1.0 for c in table["confidence"].to_pylist())


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "signal.csv"
    pa_csv.write_csv(signal_table(rows=3000), path)
    return path


def train_two_processes(data, out, *extra: str) -> dict[str, torch.Tensor]:
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(data), "--target", "y", "--epochs", "3", "--seed", "11",
         "--dropout", "0", *extra, *output_dirs(out)],
        process_env(),
        out.parent / f"{out.name}.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    return model_weights(out / "model")


@pytest.fixture(scope="module")
def batch_of_32(data, tmp_path_factory):
    return train_two_processes(data, tmp_path_factory.mktemp("batch32") / "out", "--batch-size", "32")


def test_same_seed_and_world_size_give_bitwise_identical_weights(data, tmp_path, batch_of_32):
    again = train_two_processes(data, tmp_path / "out", "--batch-size", "32")
    assert_bitwise_equal(again, batch_of_32)


def test_two_accumulated_micro_batches_of_16_match_one_batch_of_32(data, tmp_path, batch_of_32):
    accumulated = train_two_processes(data, tmp_path / "out", "--batch-size", "16", "--grad-accum-steps", "2")
    assert accumulated.keys() == batch_of_32.keys()
    for name, weight in accumulated.items():
        # Same rows per step, same mean loss; only float rounding differs.
        torch.testing.assert_close(weight, batch_of_32[name], rtol=0, atol=1e-4)
