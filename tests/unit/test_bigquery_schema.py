"""The event history table: a column of the right type for every field of every event."""

from __future__ import annotations

import json
import types
import typing
from datetime import datetime
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel

from schemas import bigquery
from schemas.events import JobEvent
from schemas.export import event_schema


def _columns() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(bigquery.BIGQUERY_SCHEMA.read_text())}


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
    """Guards issue 15 item 1: a field without a column (or in a column of another type) would be lost or
    refused by the BigQuery subscription; the expected types come from the pydantic models themselves."""
    _check_model(model, _columns(), f"{model.__name__}.")


def test_checked_in_table_schema_is_current() -> None:
    """Guards issue 15 item 1: the table Terraform creates follows every change of the event schema
    (`make schemas` regenerates it)."""
    assert bigquery.BIGQUERY_SCHEMA.read_text() == bigquery.render(bigquery.table_schema(event_schema())), (
        "terraform/bigquery_events_schema.json is stale: run `make schemas`"
    )


def test_subscription_metadata_columns_are_in_the_table() -> None:
    """Guards issue 15 item 1: write_metadata needs these columns, or the subscription cannot write."""
    columns = _columns()
    for meta in bigquery.METADATA_COLUMNS:
        assert columns[meta["name"]]["type"] == meta["type"]


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
        bigquery.table_schema(clash)
