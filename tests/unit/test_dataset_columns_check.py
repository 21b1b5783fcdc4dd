"""Without a champion, admission still reads the dataset's header (functions/data/admission.py check_columns): a
built-in run whose target or named features are not columns of its data is refused before any claim, naming the
column and showing the columns there are — instead of a job that fails a minute in with "exited with a non-zero
status" (a marker without a target on a CSV with no `target` column did just that)."""

from __future__ import annotations

from functions.data.admission import check_columns
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_request

URI = "gs://data-bucket/churn/day-1/"


def dataset_with(header: str) -> MemoryGcs:
    gcs = MemoryGcs()
    gcs.write("data-bucket", "churn/day-1/part-0.csv", f"{header}\n1,2,3\n", 0)
    gcs.write("data-bucket", "churn/day-1/_SUCCESS", "", 0)
    return gcs


def test_a_target_that_is_not_a_column_is_refused_naming_it_and_the_columns_there_are():
    check = check_columns(dataset_with("age,plan,churned"), make_request(dataset={"uri": URI, "target": "target"}))
    assert check.errors == [
        "dataset.target: column 'target' (the column to predict) is not in the header of "
        f"{URI}part-0.csv (its columns: 'age', 'plan', 'churned')"
    ]


def test_named_features_must_be_columns_too_and_a_matching_request_passes():
    gcs = dataset_with("age,plan,churned")
    missing = make_request(dataset={"uri": URI, "target": "churned", "features": ["age", "tenure"]})
    assert [e.split(" (")[0] for e in check_columns(gcs, missing).errors] == ["dataset.features: column 'tenure'"]
    fine = make_request(dataset={"uri": URI, "target": "churned", "features": ["age", "plan"]})
    assert check_columns(gcs, fine).errors == []
    assert check_columns(gcs, make_request(dataset={"uri": URI, "target": "churned"})).errors == []


def test_what_cannot_be_read_here_is_left_to_the_trainer():
    empty = MemoryGcs()
    assert check_columns(empty, make_request(dataset={"uri": URI, "target": "churned"})).errors == []
