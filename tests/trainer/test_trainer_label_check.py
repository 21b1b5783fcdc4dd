"""The label check before training (issue 38, point 2): a champion that has skill on its reference set but none on
this run's rows, or a target that drifted past `--max-target-drift`, stops every rank before the first epoch with
failure.json's reason `data` and one line naming the figures; a champion that cannot score never stops a run."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from trainer_runs import output_dirs, process_env, run

from trainer.data.preprocess import Combine
from trainer.data.schema import describe, read_schema, schema_bytes, schema_problem
from trainer.flags import parse_args
from trainer.judging.drift import measure_target
from trainer.judging.label_check import LabelsChanged, check_labels

ALONE = Combine(across_ranks=False)
CHAMPION = {"champion_val_accuracy": 0.03, "champion_skill": -1.8, "champion_skill_baseline": 0.52,
            "champion_reference_val_accuracy": 0.95, "champion_reference_skill": 0.9}  # fmt: skip


def test_a_champion_skilled_on_its_reference_set_and_not_on_these_rows_stops_the_run():
    with pytest.raises(LabelsChanged) as refused:
        check_labels(CHAMPION, "classification", -0.1, None, reference_given=True)
    assert refused.value.reason == "data"
    assert str(refused.value) == (
        "the champion scores 0.03 (val_accuracy) on these rows against 0.95 on its reference set, where predicting "
        "the most frequent class scores 0.52, so its skill -1.8 is below --min-champion-skill -0.1: the labels or "
        "their meaning changed; the run stopped before training"
    )
    assert refused.value.details["champion_skill"] == -1.8 and refused.value.details["min_champion_skill"] == -0.1


def test_without_a_reference_set_low_skill_alone_stops_the_run():
    with pytest.raises(LabelsChanged, match=r"0.03 \(val_accuracy\) on these rows \(no reference set given\)"):
        check_labels(CHAMPION, "classification", -0.1, None, reference_given=False)


def test_a_champion_without_skill_on_its_reference_set_either_says_nothing_about_the_labels():
    """Its low figure here is the champion's own weakness, not a change of the labels."""
    weak = {**CHAMPION, "champion_reference_skill": -0.2}
    assert check_labels(weak, "classification", -0.1, None, reference_given=True) == "passed"
    unscored = {k: v for k, v in CHAMPION.items() if not k.startswith("champion_reference")}
    assert check_labels(unscored | {"champion_reference_error": "x"}, "classification", -0.1, None, True) == "passed"
    assert check_labels({**CHAMPION, "champion_skill": 0.0}, "classification", -0.1, None, True) == "passed"


def test_a_champion_that_cannot_score_never_stops_the_run():
    """champion_error: the check is skipped, target drift included, and said so."""
    broken = {"champion_error": "the champion cannot read this run's validation rows", "target_drift": 3.0}
    assert check_labels(broken, "classification", -0.1, 0.1, True) == (
        "skipped: the champion could not be scored on these rows"
    )


def test_a_target_drifted_past_the_limit_stops_the_run_and_regression_names_the_mean():
    figures = {"champion_val_rmse": 3.2, "champion_skill": 0.4, "champion_skill_baseline": 1.1, "target_drift": 0.41}
    assert check_labels(figures, "regression", -0.1, None, False) == "passed"  # reported only
    assert check_labels(figures, "regression", -0.1, 0.5, False) == "passed"
    with pytest.raises(LabelsChanged) as refused:
        check_labels(figures, "regression", -0.1, 0.25, False)
    assert str(refused.value).startswith(
        "the target drifted from the champion's data by 0.41 (PSI), past --max-target-drift 0.25: the labels"
    )
    with pytest.raises(LabelsChanged, match=r"where predicting their mean scores 1.1, so its skill -3 is below"):
        check_labels({**figures, "champion_skill": -3.0}, "regression", -0.1, None, False)


def test_the_new_flags_are_checked():
    base = ["--data", "d", "--target", "y"]
    args = parse_args(base)
    assert (args.reference_data, args.confidence, args.min_champion_skill, args.max_target_drift) == (
        None, 0.95, -0.1, None)  # fmt: skip
    for flag, value in [("--confidence", "0.5"), ("--confidence", "1"), ("--confidence", "nan"),
                        ("--min-champion-skill", "1.5"), ("--min-champion-skill=-inf", None),
                        ("--max-target-drift", "0"), ("--max-target-drift", "inf")]:  # fmt: skip
        with pytest.raises(SystemExit):
            parse_args([*base, flag] + ([value] if value else []))
    args = parse_args([*base, "--confidence", "0.9", "--min-champion-skill", "-0.5", "--max-target-drift", "0.2"])
    assert (args.confidence, args.min_champion_skill, args.max_target_drift) == (0.9, -0.5, 0.2)


# Target drift, measured against the champion's schema.json.


def labelled(rows: int, ones: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"x": rng.normal(size=rows), "y": (rng.random(rows) < ones).astype(np.int64)})


def schema_of(table: pa.Table, task: str, class_counts: dict | None) -> dict:
    description = describe(table, "y", None, "csv", ALONE, seed=0)
    return json.loads(schema_bytes(description.document(task=task, class_counts=class_counts)))


def two_class_psi(before: pa.Table, after: pa.Table) -> float:
    """The textbook PSI of a 0/1 target's two shares."""
    expected, actual = ([1 - t["y"].to_numpy().mean(), t["y"].to_numpy().mean()] for t in (before, after))
    return float(np.sum((np.array(actual) - expected) * np.log(np.array(actual) / expected)))


def class_counts(table: pa.Table) -> dict[str, float]:
    values, counts = np.unique(table["y"].to_numpy(), return_counts=True)
    return {str(v): float(c) for v, c in zip(values, counts, strict=True)}


def target_drift(champion: dict, table: pa.Table) -> tuple[float | None, str]:
    return measure_target(champion, table, "y", describe(table, "y", None, "csv", ALONE, 0), ALONE)


def test_a_classification_targets_classes_are_recorded_and_compared_by_share():
    """issue 38: schema.json's target gains `classes`; inverted 0/1 labels of a 30/70 split drift by the PSI of
    0.3 ↔ 0.7, the same shares do not."""
    before = labelled(5000, 0.7, 1)
    champion = schema_of(before, "classification", {"0": 1500.0, "1": 3500.0})
    target = next(c for c in champion["columns"] if c["role"] == "target")
    assert target["stats"]["classes"] == {"0": 0.3, "1": 0.7} and schema_problem(champion) is None
    champion = schema_of(before, "classification", class_counts(before))
    same, _ = target_drift(champion, labelled(5000, 0.7, 2))
    after = labelled(5000, 0.3, 2)
    inverted, _ = target_drift(champion, after)
    assert same < 0.01
    assert inverted == pytest.approx(two_class_psi(before, after), abs=1e-6) and inverted > 0.5


def test_a_three_class_target_of_numbers_is_compared_by_class_not_by_quantile():
    """Quantiles cannot tell labels 0/1/2 apart where they repeat; the recorded classes can."""
    rng = np.random.default_rng(4)
    before = pa.table({"y": rng.choice([0, 1, 2], p=[0.2, 0.3, 0.5], size=6000)})
    after = pa.table({"y": rng.choice([0, 1, 2], p=[0.2, 0.5, 0.3], size=6000)})
    figure, _ = target_drift(schema_of(before, "classification", class_counts(before)), after)
    assert figure == pytest.approx(0.2 * np.log(0.5 / 0.3) * 2, abs=0.03)
    by_quantiles, _ = target_drift(schema_of(before, "classification", None), after)
    assert by_quantiles < figure / 2  # what seven quantiles of 0, 1, 2 could not tell


def test_an_old_schema_without_classes_stays_readable_and_its_target_is_compared_by_quantiles(tmp_path):
    """schema.json written before issue 38: a 0/1 target's two quantile values still give its exact shares."""
    before, after = labelled(5000, 0.7, 1), labelled(5000, 0.3, 2)
    champion = schema_of(before, "classification", None)
    (tmp_path / "schema.json").write_bytes(schema_bytes(champion))
    assert "classes" not in next(c for c in read_schema(str(tmp_path))["columns"] if c["role"] == "target")["stats"]
    inverted, _ = target_drift(champion, after)
    assert inverted == pytest.approx(two_class_psi(before, after), abs=1e-6)


def test_unlabelled_rows_are_no_part_of_the_targets_drift_and_another_target_is_not_compared():
    """The champion's data had a third of their rows unlabelled, this run's half or none: the labels' shares are
    what they were, whatever the missing_rate of the column."""

    def unlabelled(table: pa.Table, every: int) -> pa.Table:
        y = table["y"].to_numpy()
        return table.set_column(1, "y", pa.array(y, mask=np.arange(len(y)) % every == 0))

    before = labelled(6000, 0.7, 1)
    for classes in (class_counts(before), None):  # by class, and by quantile (a schema.json before issue 38)
        champion = schema_of(unlabelled(before, 3), "classification", classes)
        assert next(c for c in champion["columns"] if c["role"] == "target")["missing_rate"] > 0.3
        assert target_drift(champion, unlabelled(labelled(6000, 0.7, 2), 2))[0] < 0.01
        assert target_drift(champion, labelled(6000, 0.7, 2))[0] < 0.01
    champion = schema_of(labelled(5000, 0.7, 1), "classification", {"0": 1500.0, "1": 3500.0})
    as_text = labelled(500, 0.7, 2)
    as_text = as_text.set_column(1, "y", pc.cast(as_text["y"], pa.string()))
    assert target_drift(champion, as_text) == (None, "was number, is string")
    renamed = {**champion, "columns": [{**c, "name": "z"} if c["role"] == "target" else c for c in champion["columns"]]}
    assert target_drift(renamed, labelled(500, 0.7, 2)) == (None, "the champion's schema.json describes no target 'y'")


def test_a_broken_classes_entry_makes_the_schema_unusable():
    champion = schema_of(labelled(100, 0.7, 1), "classification", {"0": 30.0, "1": 70.0})
    target = next(c for c in champion["columns"] if c["role"] == "target")
    target["stats"]["classes"] = {"0": 1.5}
    assert "`stats.classes`" in schema_problem(champion)


# Whole runs: a champion trained on good data (the session's breast cancer model), then runs against it.


def relabelled(source, folder, change):
    folder.mkdir()
    for shard in sorted(source.glob("*.csv")):
        table = pa_csv.read_csv(shard)
        pa_csv.write_csv(change(table), folder / shard.name)
    return folder


def inverted(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index("target"), "target", pc.subtract(1, table["target"]))


def test_inverted_labels_stop_every_rank_before_the_first_epoch(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 38, point 2: the same rows with 0 and 1 swapped; the champion scores near 0 where the majority class
    scores about 0.63. Two ranks stop together: failure.json's reason is `data`, its error names the figures, no
    epoch ran and nothing was written but the note; torchrun's restarted group stops on the note unread."""
    data = relabelled(breast_cancer_csv_shards, tmp_path / "data", inverted)
    out = tmp_path / "out"
    finished = run(
        "trainer.launch",
        ["--nproc-per-node", "2", "--data", str(data), "--target", "target", "--epochs", "2", "--champion-model-dir",
         str(trained_breast_cancer_model), *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 1, finished.output[-4000:]
    note = json.loads((out / "model" / "failure.json").read_text())
    assert note["reason"] == "data" and note["champion_skill"] < -1
    assert note["error"].startswith(
        f"LabelsChanged: the champion scores {note['champion_val_accuracy']:.4g} (val_accuracy) on these rows (no "
        f"reference set given), where predicting the most frequent class scores {note['champion_skill_baseline']:.4g},"
        f" so its skill {note['champion_skill']:.4g} is below --min-champion-skill -0.1: the labels or their meaning "
        "changed"
    )
    assert 0.55 < note["champion_skill_baseline"] < 0.7 and note["champion_val_accuracy"] < 0.2
    accuracy, majority = note["champion_val_accuracy"], note["champion_skill_baseline"]
    assert note["champion_skill"] == pytest.approx((accuracy - majority) / (1 - majority))
    assert not finished.messages("training loop starts") and not finished.messages("evaluation")
    assert not (out / "checkpoints").exists() and not (out / "model" / "model.pt").exists()
    assert len(finished.messages("the data were refused by this run's previous attempt: not read again")) == 1


def test_the_same_labels_pass_the_check_and_the_run_writes_its_reference_sample(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 38, points 2 and 4: unchanged labels pass (the champion keeps its skill), and asked for them
    (--write-reference-rows: the model has no reference set yet) the model folder gets reference.parquet: the
    validation rows (fewer than 20,000), every column, before _SUCCESS."""
    out = tmp_path / "out"
    finished = run(
        "trainer.train",
        ["--data", str(breast_cancer_csv_shards), "--target", "target", "--epochs", "2", "--max-target-drift", "0.1",
         "--champion-model-dir", str(trained_breast_cancer_model), "--write-reference-rows", *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 0, finished.output[-4000:]
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["label_check"] == "passed" and metrics["champion_skill"] > 0.5
    assert metrics["target_drift"] < 0.1 and metrics["epochs_trained"] == 2
    assert "reference_val_accuracy" not in metrics  # no reference set given
    reference = pq.read_table(out / "model" / "reference.parquet")
    columns = pa_csv.read_csv(breast_cancer_csv_shards / "part-00000.csv").column_names
    assert reference.column_names == columns and reference.num_rows == metrics["validation_rows"]


def test_a_target_drifted_past_max_target_drift_stops_the_run(
    trained_breast_cancer_model, breast_cancer_csv_shards, tmp_path
):
    """issue 38, point 2: the minority class cut to an eighth of its rows moves the target's shares far; the skill
    floor is set out of the way, so only the drift can stop it."""

    def fewer_zeros(table: pa.Table) -> pa.Table:
        keep = pc.or_(pc.equal(table["target"], 1), pc.equal(pc.bit_wise_and(pa.array(range(table.num_rows)), 7), 0))
        return table.filter(keep)

    data = relabelled(breast_cancer_csv_shards, tmp_path / "data", fewer_zeros)
    out = tmp_path / "out"
    finished = run(
        "trainer.train",
        ["--data", str(data), "--target", "target", "--epochs", "2", "--max-target-drift", "0.25",
         "--min-champion-skill=-100", "--champion-model-dir", str(trained_breast_cancer_model), *output_dirs(out)],
        process_env(),
        tmp_path / "run.log",
    )  # fmt: skip
    assert finished.returncode == 1, finished.output[-4000:]
    note = json.loads((out / "model" / "failure.json").read_text())
    assert note["reason"] == "data" and note["target_drift"] > 0.25 and note["max_target_drift"] == 0.25
    assert note["error"] == (
        f"LabelsChanged: the target drifted from the champion's data by {note['target_drift']:.4g} (PSI), past "
        "--max-target-drift 0.25: the labels or their meaning changed; the run stopped before training"
    )
    assert not finished.messages("training loop starts")
