"""The champion's data contract (issue 27, point 2): schema.json read as untrusted input, and a new header compared
with it — one error per column, in words a requester can act on; new columns allowed and named."""

from __future__ import annotations

import json

import pytest

from functions.cloud.gcs import StorageError
from functions.data.admission import DataCheck, check_dataset, first_data_file
from functions.data.contract import MAX_ERRORS, MAX_SCHEMA_BYTES, compare_header, parse_schema
from functions.data.header import Column
from functions.untrusted.job_outputs import Unreadable
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_request


def schema_json(**changes) -> dict:
    """A schema.json as the built-in trainer writes it (the contract in functions/data/contract.py)."""
    document = {
        "schema_version": 1,
        "format": "csv",
        "target": "churned",
        "task": "classification",
        "rows": 1000,
        "columns": [
            {"name": "age", "type": "number", "physical": "int64", "role": "feature", "missing_rate": 0.0,
             "stats": {"mean": 41.2, "std": 9.1, "min": 18, "max": 90, "quantiles": [30, 40, 50]}},
            {"name": "city", "type": "string", "physical": "string", "role": "feature", "missing_rate": 0.01,
             "stats": {"top": {"Oslo": 0.4, "Lima": 0.3}}},
            {"name": "member", "type": "boolean", "physical": "bool", "role": "feature", "missing_rate": 0.0,
             "stats": {}},
            {"name": "id", "type": "number", "physical": "int64", "role": "unused", "missing_rate": 0.0, "stats": {}},
            {"name": "churned", "type": "number", "physical": "int64", "role": "target", "missing_rate": 0.0,
             "stats": {}},
        ],
    }  # fmt: skip
    return document | changes


CHAMPION = parse_schema(json.dumps(schema_json()).encode())
HEADER = [Column("id", "number"), Column("age", "number"), Column("city", "string"), Column("member", "boolean")]
HEADER += [Column("churned", "number")]


def test_the_trainers_schema_is_read():
    assert CHAMPION.target == "churned" and CHAMPION.features == ["age", "city", "member"]
    assert CHAMPION.summary() == (
        "1,000 rows, csv; target 'churned' (classification); 3 features: 1 number, 1 string, 1 boolean"
    )


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (schema_json(schema_version=2), "schema_version: Input should be 1"),
        (schema_json(columns="age"), "columns: Input should be a valid list"),
        (schema_json(columns=[{"name": "age", "role": "label"}]), "columns.0.role"),
        ({k: v for k, v in schema_json().items() if k != "target"}, "target: Field required"),
        ([1, 2], "valid dictionary"),
    ],
)
def test_a_schema_that_is_not_the_contracts_is_unreadable(document, problem):
    """schema.json is what a job wrote: anything that is not the contract's is refused with the reason."""
    with pytest.raises(Unreadable, match=problem):
        parse_schema(json.dumps(document).encode())


def test_a_schema_past_its_bound_is_unreadable():
    with pytest.raises(Unreadable, match="the limit is"):
        parse_schema(b" " * (MAX_SCHEMA_BYTES + 1))


def test_the_same_header_passes():
    check = compare_header(CHAMPION, HEADER, "churned", None)
    assert check.errors == [] and check.new_columns == []


def test_a_dropped_feature_is_named():
    """Issue 27, point 2: a missing feature is an error naming the column."""
    check = compare_header(CHAMPION, [c for c in HEADER if c.name != "city"], "churned", None)
    assert check.errors == ["dataset: column 'city' is missing (a feature of the champion)"]


def test_a_renamed_target_is_named():
    """Issue 27, point 2: the target the request names is gone from the data (renamed to `label`)."""
    header = [c for c in HEADER if c.name != "churned"] + [Column("label", "number")]
    check = compare_header(CHAMPION, header, "churned", None)
    assert check.errors == ["dataset: column 'churned' is missing (the target)"]
    assert check.new_columns == ["label"]


def test_a_request_predicting_another_target_than_the_champion_is_refused():
    check = compare_header(CHAMPION, [*HEADER, Column("label", "number")], "label", None)
    assert check.errors == [
        "dataset.target: the champion predicts 'churned', this request 'label'; the versions of one model predict "
        "one target: name another model"
    ]


def test_a_changed_type_is_named_with_both_types():
    """Issue 27, point 2: `dataset: column 'age' was number, is string` — one error per column."""
    header = [Column("age", "string"), Column("city", "string"), Column("member", "number"), Column("churned", None)]
    check = compare_header(CHAMPION, header, "churned", None)
    assert check.errors == [
        "dataset: column 'age' was number, is string",
        "dataset: column 'member' was boolean, is number",
    ]


def test_extra_columns_are_allowed_and_named():
    """Issue 27, point 2: new columns do not stop a run; `accepted` names them."""
    check = compare_header(CHAMPION, [*HEADER, Column("tenure", "number"), Column("plan", "string")], "churned", None)
    assert check.errors == [] and check.new_columns == ["tenure", "plan"]


def test_unused_columns_may_go_and_unknown_types_are_not_compared():
    header = [Column("age", None), Column("city", "string"), Column("member", "boolean"), Column("churned", "number")]
    assert compare_header(CHAMPION, header, "churned", None).errors == []


def test_a_request_naming_its_features_needs_only_those():
    check = compare_header(CHAMPION, [Column("age", "number"), Column("churned", "number")], "churned", ["age"])
    assert check.errors == []
    check = compare_header(CHAMPION, [Column("churned", "number")], "churned", ["age", "tenure"])
    assert check.errors == [
        "dataset: column 'age' is missing (named in dataset.features)",
        "dataset: column 'tenure' is missing (named in dataset.features)",
    ]


def test_a_dataset_that_lost_hundreds_of_columns_lists_a_bounded_number():
    wide = parse_schema(
        json.dumps(
            schema_json(columns=[{"name": f"f{i}", "type": "number", "role": "feature"} for i in range(300)])
        ).encode()
    )
    check = compare_header(wide, [Column("churned", "number")], "churned", None)
    assert len(check.errors) == MAX_ERRORS and check.errors[-1] == "dataset: and 251 more columns"


def test_the_first_data_file_is_the_one_the_trainer_reads_first():
    """trainer/data/tables.py reads every CSV or Parquet object below the folder by name, leaving out markers and hidden
    files; the header comes from the first."""
    request = make_request(dataset={"uri": "gs://data-bucket/churn/day=1/", "target": "churned"})
    listing = [
        ("churn/day=1/_SUCCESS", 0),
        ("churn/day=1/.hidden.csv", 10),
        ("churn/day=1/README.txt", 10),
        ("churn/day=1/empty.csv", 0),
        ("churn/day=1/part-1.parquet", 10),
        ("churn/day=1/part-2.csv", 10),
    ]
    assert first_data_file(request, listing) == ("churn/day=1/part-1.parquet", 10, "parquet")
    forced = make_request(dataset={"uri": "gs://data-bucket/churn/day=1/", "target": "churned", "format": "csv"})
    assert first_data_file(forced, listing) == ("churn/day=1/README.txt", 10, "csv")
    one_file = make_request(dataset={"uri": "gs://data-bucket/churn/all.csv", "target": "churned"})
    assert first_data_file(one_file, [("churn/all.csv", 5), ("churn/all.csv.bak", 5)]) == ("churn/all.csv", 5, "csv")
    assert first_data_file(request, [("churn/day=10/a.csv", 5)]) is None


class _Refusing(MemoryGcs):
    """Storage whose data objects the functions' account may list but not read (403)."""

    def read_range(self, bucket: str, name: str, start: int, length: int) -> bytes | None:
        raise StorageError("refused", 403)


def _check(gcs: MemoryGcs, data: dict[str, bytes], champion_uri: str = "gs://control/runs/r1/model/") -> DataCheck:
    for name, content in data.items():
        gcs.write("data", f"churn/day=1/{name}", content, 0)
    request = make_request(dataset={"uri": "gs://data/churn/day=1/", "target": "churned"}, model={"name": "churn"})
    return check_dataset(gcs, "control", request, champion_uri, "3")


def _with_schema(gcs: MemoryGcs) -> MemoryGcs:
    gcs.write("control", "runs/r1/model/schema.json", json.dumps(schema_json()).encode(), 0)
    return gcs


def test_the_check_reads_the_first_data_file_and_rejects_what_breaks_the_schema():
    """Issue 27, point 2: the first CSV under the folder is read (a marker and hidden files left out), compared,
    and a file named .parquet that is not one is refused: the trainer could not read it either."""
    good = b"id,age,city,member,churned\n1,30,Oslo,true,0\n"
    check = _check(_with_schema(MemoryGcs()), {"_SUCCESS": b"", "part-0.csv": good.replace(b",city", b",town")})
    assert check.checked and check.errors == ["dataset: column 'city' is missing (a feature of the champion)"]
    assert check.new_columns == ["town"]
    check = _check(_with_schema(MemoryGcs()), {"part-0.parquet": b"not parquet at all"})
    assert check.errors == [
        "dataset: gs://data/churn/day=1/part-0.parquet is not a Parquet file: it does not end in PAR1"
    ]


@pytest.mark.parametrize(
    "case",
    ["no schema.json", "champion outside the control bucket", "unreadable schema", "data refused", "no data file"],
)
def test_what_cannot_be_checked_is_admitted_unchecked(case):
    """Issue 27, point 2: the check stops bad data, never good data — whatever it cannot read leaves the request
    unchecked (and says why), never rejected."""
    gcs = _Refusing() if case == "data refused" else MemoryGcs()
    if case == "unreadable schema":
        gcs.write("control", "runs/r1/model/schema.json", b'{"schema_version": 2}', 0)
    elif case != "no schema.json":
        _with_schema(gcs)
    uri = (
        "gs://elsewhere/runs/r1/model/"
        if case == "champion outside the control bucket"
        else "gs://control/runs/r1/model/"
    )
    data = {} if case == "no data file" else {"part-0.csv": b"id,churned\n1,0\n"}
    check = _check(gcs, data, uri)
    assert not check.checked and check.errors == [] and check.summary.startswith("not checked: ")
