"""Event history in BigQuery: the table the subscription writes holds what a BigQuery subscription without a
schema option writes, with the types Google's page names, and the view unique_events reads a column of the
right type for every field of every event out of it."""

from __future__ import annotations

import json
import re
import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal, get_args, get_origin

import pytest
import sqlglot
from pydantic import BaseModel

from schemas import bigquery
from schemas.events import JobEvent, Timestamps, to_pubsub_message
from schemas.export import event_schema
from tests.unit.test_events import succeeded

# BigQuery's canonical timestamp: date, 'T' or space, time with up to six fractional digits, then 'Z' or an
# offset {+|-}H[H][:M[M]] (google/zetasql docs/data-types.md, "Timestamp type"; the same page as BigQuery's).
CANONICAL_TIMESTAMP = re.compile(
    r"^\d{4}-\d{1,2}-\d{1,2}[Tt ]\d{1,2}:\d{1,2}:\d{1,2}(\.\d{1,6})?([Zz]|[+-]\d{1,2}(:\d{1,2})?)$"
)


def _columns() -> dict[str, dict[str, Any]]:
    """The view's typed columns."""
    return {c["name"]: c for c in bigquery.event_columns(event_schema())}


def _view_sql() -> str:
    return bigquery.UNIQUE_EVENTS_SQL.read_text()


def _expected(annotation: Any) -> tuple[str, str, Any]:
    """(type, mode, nested model) a Python annotation needs, worked out from the models, not the JSON Schema."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is list:
        kind, _, nested = _expected(get_args(annotation)[0])
        return kind, "REPEATED", nested
    if get_origin(annotation) is Literal or annotation is str:
        return "STRING", "NULLABLE", None
    if get_origin(annotation) is dict:
        return "JSON", "NULLABLE", None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "RECORD", "NULLABLE", annotation
    return {int: "INT64", float: "FLOAT64", bool: "BOOL", datetime: "TIMESTAMP"}[annotation], "NULLABLE", None


def _check_model(model: type[BaseModel], columns: dict[str, dict[str, Any]], where: str) -> None:
    for name, field in model.model_fields.items():
        assert name in columns, f"{where}{name} has no column in {bigquery.BIGQUERY_SCHEMA.name}"
        kind, mode, nested = _expected(field.annotation)
        found = columns[name]
        assert (found["type"], found["mode"]) == (kind, mode), f"{where}{name}: column {found}, needs {kind} {mode}"
        if nested is not None:
            _check_model(nested, {c["name"]: c for c in found["fields"]}, f"{where}{name}.")


@pytest.mark.parametrize("model", get_args(get_args(JobEvent)[0]), ids=lambda m: m.__name__)
def test_every_event_field_has_a_column_of_its_type(model: type[BaseModel]) -> None:
    """Guards issue 15 item 1: a field without a typed column (or in a column of another type) would be lost to
    the questions asked of history; the expected types come from the pydantic models themselves."""
    _check_model(model, _columns(), f"{model.__name__}.")
    sql = _view_sql()
    for name in model.model_fields:
        assert f"AS `{name}`," in sql, f"unique_events has no column {name}"


def test_checked_in_table_schema_and_view_are_current() -> None:
    """Guards issue 15 item 1: what Terraform creates follows every change of the event schema (`make schemas`
    regenerates both)."""
    assert bigquery.BIGQUERY_SCHEMA.read_text() == bigquery.render(bigquery.TABLE_COLUMNS), (
        "terraform/bigquery_events_schema.json is stale: run `make schemas`"
    )
    assert _view_sql() == bigquery.unique_events_query(bigquery.event_columns(event_schema())), (
        "terraform/bigquery_unique_events.sql is stale: run `make schemas`"
    )


def test_the_table_is_what_a_subscription_without_a_schema_option_writes() -> None:
    """Guards issue 25, point 8: with use_table_schema a JSON column takes only a field holding JSON in an
    escaped string, and events carry metrics and labels as objects; without a schema option the message goes
    whole into `data` (BYTES, STRING or JSON), beside write_metadata's subscription_name and message_id
    (STRING), publish_time (TIMESTAMP) and attributes (STRING or JSON)
    (cloud.google.com/pubsub/docs/create-bigquery-subscription). The table has those columns and no other."""
    table = {c["name"]: (c["type"], c["mode"]) for c in json.loads(bigquery.BIGQUERY_SCHEMA.read_text())}
    assert table == {
        "subscription_name": ("STRING", "NULLABLE"),
        "message_id": ("STRING", "NULLABLE"),
        "publish_time": ("TIMESTAMP", "NULLABLE"),
        "data": ("JSON", "NULLABLE"),
        "attributes": ("JSON", "NULLABLE"),
    }


def test_each_column_is_read_out_of_the_event_json_with_its_type() -> None:
    """Guards issue 25, point 8: scalars through JSON_VALUE (cast to their type; a timestamp from its string),
    free-form objects as JSON, records as STRUCTs (NULL when absent), arrays element by element in order."""
    sql = _view_sql()
    assert "JSON_VALUE(data, '$.state') AS `state`," in sql
    assert "SAFE_CAST(JSON_VALUE(data, '$.time') AS TIMESTAMP) AS `time`," in sql
    assert "SAFE_CAST(JSON_VALUE(data, '$.duration_seconds') AS FLOAT64) AS `duration_seconds`," in sql
    assert "JSON_QUERY(data, '$.metrics') AS `metrics`," in sql and "JSON_QUERY(data, '$.labels') AS `labels`," in sql
    assert (
        "IF(JSON_TYPE(JSON_QUERY(data, '$.cost')) = 'object', STRUCT(SAFE_CAST(JSON_VALUE(data, "
        "'$.cost.hourly_usd') AS FLOAT64) AS `hourly_usd`" in sql
    )
    assert (
        "ARRAY(SELECT JSON_VALUE(item1, '$') FROM UNNEST(JSON_QUERY_ARRAY(data, '$.errors')) AS item1 "
        "WITH OFFSET AS position1 ORDER BY position1) AS `errors`," in sql
    )
    assert "SAFE_CAST(JSON_VALUE(item1, '$.rung') AS INT64) AS `rung`" in sql


def test_the_view_drops_copies_by_the_ce_id_attribute() -> None:
    """Guards issue 25, point 8: the attributes column is JSON (the page allows STRING or JSON; JSON_VALUE reads
    either), and `ce-id`, whose '-' is not a JSONPath name character, is quoted as BigQuery's JSONPath allows."""
    assert bigquery.TABLE_COLUMNS[-1] == bigquery.TABLE_COLUMNS[-1] | {"name": "attributes", "type": "JSON"}
    assert (
        "QUALIFY ROW_NUMBER() OVER (PARTITION BY JSON_VALUE(attributes, '$.\"ce-id\"') ORDER BY publish_time) = 1"
        in _view_sql()
    )


def test_the_view_is_bigquery_sql() -> None:
    """Guards issue 25, point 8: no BigQuery runs here, so the generated SQL is at least parsed as BigQuery's
    dialect (sqlglot), with every event column and the table's own columns in its SELECT list."""
    sql = _view_sql().replace("${events_table}", "project.dataset.events")
    select = sqlglot.parse_one(sql, read="bigquery")
    names = [e.alias_or_name for e in select.expressions]
    assert names == [*_columns(), *(c["name"] for c in bigquery.TABLE_COLUMNS)]


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 11, 22, 10, 30, tzinfo=UTC),
        datetime(2026, 11, 22, 10, 30, 0, 123456, tzinfo=UTC),
        datetime(2026, 11, 22, 10, 30, 5, tzinfo=timezone(timedelta(hours=-8))),
    ],
    ids=["whole-seconds", "microseconds", "offset"],
)
def test_event_times_are_published_in_bigquerys_canonical_timestamp_format(moment: datetime) -> None:
    """Guards issue 25, point 8: the view casts each date-time string to TIMESTAMP, which BigQuery does only for
    its canonical format (at most six fractional digits; 'Z' or an offset); the events are published so."""
    event = succeeded(time=moment, timestamps=Timestamps(created=moment, started=moment, ended=moment))
    data = json.loads(to_pubsub_message(event, "//tests").data)
    for written in (data["time"], *data["timestamps"].values()):
        assert CANONICAL_TIMESTAMP.match(written), written
        assert datetime.fromisoformat(written.replace("Z", "+00:00")) == moment


def test_a_field_no_column_type_can_hold_is_refused() -> None:
    """Guards issue 15 item 1: the generator stops instead of leaving a field out."""
    with pytest.raises(bigquery.UnmappableField, match="weird"):
        bigquery.column("weird", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    clash = {
        "$defs": {
            "E": {"properties": {"reason": {"type": "string"}}},
            "F": {"properties": {"reason": {"type": "integer"}}},
        },
        "oneOf": [{"$ref": "#/$defs/E"}, {"$ref": "#/$defs/F"}],
    }
    with pytest.raises(bigquery.UnmappableField, match="reason"):
        bigquery.event_columns(clash)
