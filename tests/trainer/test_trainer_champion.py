"""The champion scored on the challenger's own validation rows before training (`--champion-model-dir`): both
figures in metrics.json, measured on the same rows, with the champion's skill on them; a champion that cannot
score these rows is reported and the run succeeds; and the champion's file, written by another run, is loaded
only within bounds."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from trainer_runs import output_dirs, process_env, run

import trainer.judging.champion
from trainer.data.preprocess import MAX_CATEGORIES, Combine, Preprocessor
from trainer.data.tables import _split
from trainer.judging.champion import MAX_ERROR_CHARS, score_champion
from trainer.model.network import BUILTIN_MLP, build_model
from trainer.outputs.model_folder import load_model, model_from_bytes, write_outputs
from trainer.predict import predict_rows
from trainer.storage.folders import gcs_client

FACTORIES = {BUILTIN_MLP}
CPU = torch.device("cpu")


def test_a_two_process_run_scores_the_champion_on_its_own_validation_rows(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 26, step 1 (evaluate on the same rows): the figures equal the champion's score on exactly the rows the
    run validates on, computed here independently; the run reads fewer columns (--features) than the champion
    needs, and every rank holds the whole file (each scores its own slice), so both are exercised."""
    data = breast_cancer_csv_shards / "part-00001.csv"
    columns = [c for c in pa_csv.read_csv(data).column_names if c != "target"]
    out = tmp_path / "out"
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(data), "--target", "target", "--features", ",".join(columns[:10]),
         "--epochs", "3", "--batch-size", "16", "--seed", "2", "--champion-model-dir", str(trained_breast_cancer_model),
         *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    metrics = json.loads((out / "model" / "metrics.json").read_text())

    # The run's validation rows, as the trainer splits them: one shard, its seeded split.
    _, validation = _split(pa_csv.read_csv(data), 0, seed=2, validation_fraction=0.2)
    model, prep = load_model(str(trained_breast_cancer_model))
    with torch.no_grad():
        outputs = model(prep.features(validation))
    targets = prep.targets(validation)
    assert metrics["validation_rows"] == metrics["champion_validation_rows"] == validation.num_rows == 38
    assert metrics["champion_scored_on_same_rows"] is True
    assert metrics["champion_model_dir"] == str(trained_breast_cancer_model)
    assert metrics["champion_val_accuracy"] == (outputs.argmax(dim=1) == targets).sum().item() / 38
    assert metrics["champion_val_loss"] == pytest.approx(F.cross_entropy(outputs, targets).item(), rel=1e-6)
    assert "val_accuracy" in metrics and "champion_error" not in metrics
    assert len(finished.messages("the champion was scored on this run's validation rows")) == 1  # rank 0 only
    # issue 38: its skill on these rows, against the share of their most frequent class (summed over both ranks).
    majority = max(targets.bincount().tolist()) / 38
    assert metrics["champion_skill_baseline"] == pytest.approx(majority)
    assert metrics["champion_skill"] == pytest.approx((metrics["champion_val_accuracy"] - majority) / (1 - majority))
    assert metrics["label_check"] == "passed"


def test_a_champion_that_needs_a_dropped_column_is_reported_and_the_run_succeeds(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 26, step 1: the new data has lost a column the champion reads; metrics.json says so and the run still
    writes its model and _SUCCESS."""
    data = tmp_path / "data"
    data.mkdir()
    for shard in sorted(breast_cancer_csv_shards.glob("*.csv")):
        pa_csv.write_csv(pa_csv.read_csv(shard).drop_columns(["mean radius"]), data / shard.name)
    out = tmp_path / "out"
    finished = run(
        "trainer.train",
        ["--data", str(data), "--target", "target", "--epochs", "2", "--champion-model-dir",
         str(trained_breast_cancer_model), *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["champion_error"] == (
        "the champion cannot read this run's validation rows: "
        "the data lacks feature columns ['mean radius'] that the model was trained on"
    )
    assert metrics["champion_scored_on_same_rows"] is False
    assert "champion_val_accuracy" not in metrics and "val_accuracy" in metrics
    assert (out / "model" / "_SUCCESS").exists() and (out / "model" / "model.pt").exists()
    assert finished.messages("the champion could not be scored on this run's validation rows")


# The rest call score_champion in this process, as a world of one rank.


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def rows(breast_cancer_csv_shards) -> pa.Table:
    return pa_csv.read_csv(breast_cancer_csv_shards / "part-00000.csv")


@pytest.fixture
def champion(trained_breast_cancer_model) -> dict:
    """The champion's model.pt as the dict torch.save wrote, to alter and save again."""
    return torch.load(trained_breast_cancer_model / "model.pt", weights_only=True)


def save(package: dict, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(package, folder / "model.pt")
    return str(folder)


def run_prep(package: dict) -> Preprocessor:
    return Preprocessor.from_state_dict(package["preprocessing"])


def test_the_champion_is_scored_in_one_process(world_of_one, rows, champion, trained_breast_cancer_model):
    scored = score_champion(str(trained_breast_cancer_model), rows, run_prep(champion), FACTORIES, CPU).metrics
    assert scored["champion_scored_on_same_rows"] is True and scored["champion_validation_rows"] == rows.num_rows
    assert 0.5 < scored["champion_val_accuracy"] <= 1.0


def test_a_regression_champions_skill_is_one_minus_its_mse_over_the_rows_variance(world_of_one, tmp_path):
    """issue 38: from the all-reduced sums in the champion's standardised units, the same figure as its predictions
    in the target's own units give; its baseline is the rows' standard deviation (predicting their mean)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=400)
    table = pa.table({"x": x, "y": 20 + 5 * x + rng.normal(size=400)})
    prep = Preprocessor.fit(table.slice(0, 200), "y", "regression", Combine(across_ranks=False))
    torch.manual_seed(0)
    spec = {"factory": BUILTIN_MLP, "kwargs": {"hidden_sizes": [3], "dropout": 0.0}}
    model = build_model(BUILTIN_MLP, prep.num_features, 1, spec["kwargs"]).eval()
    write_outputs(str(tmp_path), model, spec, prep, {}, [], b"{}")
    rows = table.slice(200)
    scored = score_champion(str(tmp_path), rows, prep, FACTORIES, CPU).metrics
    errors = predict_rows(model, prep, rows)["prediction"].to_numpy() - rows["y"].to_numpy()
    assert scored["champion_skill"] == pytest.approx(1 - (errors**2).mean() / rows["y"].to_numpy().var(), rel=1e-5)
    assert scored["champion_skill_baseline"] == pytest.approx(rows["y"].to_numpy().std(), rel=1e-5)
    assert scored["champion_val_rmse"] == pytest.approx(np.sqrt((errors**2).mean()), rel=1e-5)


def test_a_champion_of_another_target_or_task_is_reported_not_scored(world_of_one, rows, champion, tmp_path):
    """issue 26, step 1: a different target or task cannot be compared."""
    other_target = {**champion, "preprocessing": {**champion["preprocessing"], "target": "mean area"}}
    scored = score_champion(save(other_target, tmp_path / "target"), rows, run_prep(champion), FACTORIES, CPU).metrics
    assert scored["champion_error"] == "the champion predicts 'mean area', this run predicts 'target'"

    regression_run = Preprocessor.from_state_dict({**champion["preprocessing"], "task": "regression", "classes": []})
    scored = score_champion(save(champion, tmp_path / "task"), rows, regression_run, FACTORIES, CPU).metrics
    assert scored["champion_error"] == "the champion is a classification model, this run trains regression"
    assert "champion_val_accuracy" not in scored and scored["champion_scored_on_same_rows"] is False


def test_a_label_the_champion_never_saw_is_reported(world_of_one, rows, champion, tmp_path):
    """issue 26, step 1: a category it cannot encode (here a new class of the target)."""
    relabelled = rows.set_column(rows.schema.get_field_index("target"), "target", pa.array([7] * rows.num_rows))
    scored = score_champion(save(champion, tmp_path / "c"), relabelled, run_prep(champion), FACTORIES, CPU).metrics
    assert scored["champion_error"] == (
        "the champion cannot read this run's validation rows: "
        "target values ['7'] were not seen when the classes were fitted"
    )


def test_a_champion_built_by_other_code_is_refused_before_that_code_runs(
    world_of_one, rows, champion, tmp_path, monkeypatch
):
    """issue 26, step 1 (load it safely): building a module calls the factory model.pt names — code — so a file
    another run wrote may name only the built-in MLP or this run's own --model."""
    ran = tmp_path / "factory-ran"
    (tmp_path / "champion_probe.py").write_text(
        f"from pathlib import Path\ndef factory(**kwargs):\n    Path({str(ran)!r}).write_text('ran')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = {**champion, "model": {"factory": "champion_probe:factory", "kwargs": {}}}
    scored = score_champion(save(probe, tmp_path / "m"), rows, run_prep(champion), FACTORIES, CPU).metrics
    assert "is built by 'champion_probe:factory'" in scored["champion_error"]
    assert not ran.exists()


def test_weights_that_do_not_match_their_settings_are_refused_before_the_module_is_built(
    world_of_one, rows, champion, tmp_path
):
    """issue 26, step 1: the settings would build a far larger module than the weights the file holds; it is built
    on the meta device first, so no memory is taken for it."""
    huge = {**champion, "model": {"factory": BUILTIN_MLP, "kwargs": {"hidden_sizes": [4096, 4096], "dropout": 0.1}}}
    scored = score_champion(save(huge, tmp_path / "m"), rows, run_prep(champion), FACTORIES, CPU).metrics
    assert scored["champion_error"].endswith("its weights do not match the module its settings describe")


def test_a_champion_file_over_the_bound_is_not_read(world_of_one, rows, champion, tmp_path, monkeypatch):
    """issue 26, step 1 (bound what you read)."""
    monkeypatch.setattr(trainer.judging.champion, "MAX_CHAMPION_BYTES", 1000)
    scored = score_champion(save(champion, tmp_path / "m"), rows, run_prep(champion), FACTORIES, CPU).metrics
    assert "is larger than the 1,000 bytes this reader accepts" in scored["champion_error"]


def test_a_missing_champion_and_long_errors_are_reported_within_bounds(world_of_one, rows, champion, tmp_path):
    scored = score_champion(str(tmp_path / "nothing"), rows, run_prep(champion), FACTORIES, CPU).metrics
    assert scored["champion_error"].startswith(f"cannot read {tmp_path / 'nothing'}/model.pt: FileNotFoundError")
    assert len(trainer.judging.champion._unscored("d", "x" * 5000)["champion_error"]) == MAX_ERROR_CHARS


def test_preprocessing_beyond_what_fit_makes_is_refused(champion):
    """issue 26, step 1: one-hot encoding gives every category an input column, so a vocabulary of a million
    strings (a few megabytes of file) would cost memory out of all proportion; fit never keeps more than
    MAX_CATEGORIES."""
    state = champion["preprocessing"]
    wide = {**state, "categories": {"colour": [f"c{i}" for i in range(MAX_CATEGORIES + 1)]}}
    with pytest.raises(ValueError, match="string columns"):
        Preprocessor.from_state_dict(wide)
    with pytest.raises(ValueError, match="numeric columns"):
        Preprocessor.from_state_dict({**state, "means": state["means"][:-1]})
    with pytest.raises(ValueError, match="expected the fields"):
        Preprocessor.from_state_dict({**state, "extra": 1})
    assert Preprocessor.from_state_dict(state).state_dict() == state


def test_a_compressed_model_file_is_refused(trained_breast_cancer_model):
    """torch.save never compresses, so a compressed entry could only unpack to more than the bytes read."""
    original = (trained_breast_cancer_model / "model.pt").read_bytes()
    deflated = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(deflated, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(ValueError, match="compressed entries"):
        model_from_bytes(deflated.getvalue(), "champion/model.pt", FACTORIES)


def test_a_champion_in_cloud_storage_is_read_with_a_bounded_read(
    world_of_one, rows, champion, trained_breast_cancer_model, gcs_bucket, monkeypatch
):
    """issue 26, step 1: the registry's artifact URI is gs://; the read asks for one byte more than the bound."""
    bucket = gcs_client().bucket(gcs_bucket)
    bucket.blob("runs/r1/model/model.pt").upload_from_filename(str(trained_breast_cancer_model / "model.pt"))
    uri = f"gs://{gcs_bucket}/runs/r1/model"
    assert score_champion(uri, rows, run_prep(champion), FACTORIES, CPU).metrics["champion_scored_on_same_rows"] is True
    monkeypatch.setattr(trainer.judging.champion, "MAX_CHAMPION_BYTES", 1000)
    scored = score_champion(uri, rows, run_prep(champion), FACTORIES, CPU).metrics
    assert f"gs://{gcs_bucket}/runs/r1/model/model.pt is larger than the 1,000 bytes" in scored["champion_error"]
