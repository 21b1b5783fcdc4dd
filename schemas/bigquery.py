"""Event history in BigQuery: the table the events topic's BigQuery subscription writes, and the typed view of it,
both derived from here and the second from schemas/job_event.schema.json.

The subscription writes each message whole into a JSON column `data`, beside the metadata `write_metadata`
adds (cloud.google.com/pubsub/docs/create-bigquery-subscription, "Use table schema" and "Write metadata"). It
does not spread the event over typed columns (`use_table_schema`): that option fills a JSON column only from a
field that holds JSON *in an escaped string* ("myData": "{\\"key\\":\\"value\\"}"), and an event's free-form
objects (metrics, labels) are objects, so those events would stay in the backlog. Typed columns come from the
view `unique_events` instead: one column for every field of every event model (the union of the ten, each
NULLABLE), each read out of `data` with its type, Pub/Sub's redelivered copies dropped.

`python -m schemas.export` (`make schemas`) rewrites terraform/bigquery_events_schema.json and
terraform/bigquery_unique_events.sql; a test fails when either is stale, so a new event field cannot be
silently left out of history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TERRAFORM = Path(__file__).resolve().parents[1] / "terraform"
BIGQUERY_SCHEMA = TERRAFORM / "bigquery_events_schema.json"
UNIQUE_EVENTS_SQL = TERRAFORM / "bigquery_unique_events.sql"

# What a BigQuery subscription with write_metadata and no schema option writes, with the types the page
# names: data "BYTES, STRING, or JSON", attributes "STRING or JSON" (a JSON object of the message's attributes
# and its ordering key), publish_time TIMESTAMP.
TABLE_COLUMNS: list[dict[str, Any]] = [
    {"name": "subscription_name", "type": "STRING", "mode": "NULLABLE", "description": "Pub/Sub subscription."},
    {"name": "message_id", "type": "STRING", "mode": "NULLABLE", "description": "Pub/Sub message id."},
    {"name": "publish_time", "type": "TIMESTAMP", "mode": "NULLABLE", "description": "When Pub/Sub got it."},
    {
        "name": "data",
        "type": "JSON",
        "mode": "NULLABLE",
        "description": "The event as published; the view unique_events gives every field a typed column.",
    },
    {
        "name": "attributes",
        "type": "JSON",
        "mode": "NULLABLE",
        "description": "The message attributes (ce-id, ce-type, state …) and its ordering key.",
    },
]
METADATA_COLUMNS = [c for c in TABLE_COLUMNS if c["name"] != "data"]


class UnmappableField(ValueError):
    """An event field whose JSON Schema has no BigQuery column type (the generator must learn it)."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _non_null(name: str, node: dict[str, Any]) -> dict[str, Any]:
    """`X | None` is anyOf [X, null] in JSON Schema: the column is X, NULLABLE."""
    options = [o for o in node.get("anyOf", [node]) if o.get("type") != "null"]
    if len(options) != 1:
        raise UnmappableField(f"{name}: a union of {len(options)} types has no single column type")
    return options[0]


def column(name: str, node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The BigQuery column for one JSON Schema property."""
    node = _resolve(_non_null(name, _resolve(node, defs)), defs)
    description = node.get("description", "")
    kind = node.get("type")
    mode = "NULLABLE"
    if kind == "array":
        item = column(name, node.get("items", {}), defs)
        if item["mode"] == "REPEATED":
            raise UnmappableField(f"{name}: BigQuery has no array of arrays")
        return item | {"mode": "REPEATED", "description": description or item.get("description", "")}
    if kind == "object" and "properties" in node:
        fields = [column(key, sub, defs) for key, sub in node["properties"].items()]
        return {"name": name, "type": "RECORD", "mode": mode, "description": description, "fields": fields}
    bigquery_type = {
        "string": "TIMESTAMP" if node.get("format") == "date-time" else "STRING",
        "integer": "INT64",
        "number": "FLOAT64",
        "boolean": "BOOL",
        "object": "JSON",  # free-form (additionalProperties): metrics, labels
    }.get(kind or "")
    if bigquery_type is None:
        raise UnmappableField(f"{name}: JSON Schema type {kind!r} has no BigQuery column type")
    return {"name": name, "type": bigquery_type, "mode": mode, "description": description}


def _merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two events' columns of one name (reason is a different Literal in each): same type, records merged."""
    if (first["type"], first["mode"]) != (second["type"], second["mode"]):
        raise UnmappableField(
            f"{first['name']}: one event makes it {first['type']} {first['mode']}, another "
            f"{second['type']} {second['mode']}; one column cannot hold both"
        )
    if first["type"] != "RECORD":
        return first
    fields = {f["name"]: f for f in first["fields"]}
    for field in second["fields"]:
        fields[field["name"]] = _merge(fields[field["name"]], field) if field["name"] in fields else field
    return first | {"fields": list(fields.values())}


def event_columns(event_schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The typed columns of the view: one for every field of every event in the union."""
    defs = event_schema["$defs"]
    columns: dict[str, dict[str, Any]] = {}
    for option in event_schema["oneOf"]:
        for name, node in _resolve(option, defs)["properties"].items():
            found = column(name, node, defs)
            columns[name] = _merge(columns[name], found) if name in columns else found
    clash = set(columns) & {c["name"] for c in TABLE_COLUMNS}
    if clash:
        raise UnmappableField(f"event fields {sorted(clash)} collide with the table's own columns")
    return list(columns.values())


# ---- the view: each column read out of `data` with its type ------------------------------------------------


def _scalar(kind: str, source: str, path: str) -> str:
    """A JSON scalar as a SQL value: JSON_VALUE gives its text (SQL NULL when absent or null), cast to the column
    type; SAFE_CAST leaves a value of the wrong shape NULL rather than failing the whole query."""
    text = f"JSON_VALUE({source}, '{path}')"
    return text if kind == "STRING" else f"SAFE_CAST({text} AS {kind})"


def _named(column: dict[str, Any], source: str, parent: str, depth: int) -> str:
    """`column` read from the member of the JSON object at `parent` that bears its name, as itself."""
    name = column["name"]
    return f"{_value(column, source, f'{parent}.{name}', depth)} AS `{name}`"


def _fields(columns: list[dict[str, Any]], source: str, parent: str, depth: int) -> str:
    return ", ".join(_named(c, source, parent, depth) for c in columns)


def _value(column: dict[str, Any], source: str, path: str, depth: int) -> str:
    """The SQL expression of `column`, whose JSON value is at `path` in the JSON expression `source`."""
    if column["mode"] == "REPEATED":
        item, position = f"item{depth}", f"position{depth}"
        element = column | {"mode": "NULLABLE"}
        if column["type"] == "RECORD":
            select = f"SELECT AS STRUCT {_fields(column['fields'], item, '$', depth + 1)}"
        else:
            select = f"SELECT {_value(element, item, '$', depth + 1)}"
        return (
            f"ARRAY({select} FROM UNNEST(JSON_QUERY_ARRAY({source}, '{path}')) AS {item} "
            f"WITH OFFSET AS {position} ORDER BY {position})"
        )
    if column["type"] == "RECORD":
        # An absent record is NULL, not a STRUCT of NULLs.
        return (
            f"IF(JSON_TYPE(JSON_QUERY({source}, '{path}')) = 'object', "
            f"STRUCT({_fields(column['fields'], source, path, depth)}), NULL)"
        )
    if column["type"] == "JSON":
        return f"JSON_QUERY({source}, '{path}')"
    return _scalar(column["type"], source, path)


def unique_events_query(columns: list[dict[str, Any]]) -> str:
    """The view's SQL, with `${events_table}` for Terraform's templatefile to fill in."""
    typed = [f"  {_named(c, 'data', '$', 1)}," for c in columns]
    return "\n".join(
        [
            "-- Generated by `make schemas` (schemas/bigquery.py) from schemas/job_event.schema.json: edit those.",
            "-- Every event field as a typed column, read out of the JSON the subscription wrote, and each event",
            "-- once: Pub/Sub delivers at least once, and a redelivered copy has the same ce-id.",
            "SELECT",
            *typed,
            "  " + ", ".join(c["name"] for c in TABLE_COLUMNS),
            "FROM `${events_table}`",
            "WHERE TRUE",
            "QUALIFY ROW_NUMBER() OVER (PARTITION BY JSON_VALUE(attributes, '$.\"ce-id\"') ORDER BY publish_time) = 1",
            "",
        ]
    )


def _without_empty_descriptions(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: _without_empty_descriptions(v) if k == "fields" else v for k, v in c.items() if v != ""} for c in columns
    ]


def render(columns: list[dict[str, Any]]) -> str:
    return json.dumps(_without_empty_descriptions(columns), indent=2, ensure_ascii=False) + "\n"
