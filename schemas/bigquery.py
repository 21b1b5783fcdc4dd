"""The BigQuery table that event history lands in, derived from schemas/job_event.schema.json.

A Pub/Sub BigQuery subscription with `use_table_schema` writes each event's JSON fields into the columns of
the same name, so the table needs one column for every field of every event model: the union of the ten
models, all NULLABLE (each event has only its own). Free-form objects (metrics, labels) become JSON columns.
`write_metadata` adds the subscription's own columns (subscription_name, message_id, publish_time, and the
attributes — ce-type, ordering key … — as JSON; cloud.google.com/pubsub/docs/bigquery).

`python -m schemas.export` (`make schemas`) rewrites terraform/bigquery_events_schema.json; a test fails when
the checked-in file is stale, so a new event field cannot be silently dropped from history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BIGQUERY_SCHEMA = Path(__file__).resolve().parents[1] / "terraform" / "bigquery_events_schema.json"

# The columns write_metadata fills (cloud.google.com/pubsub/docs/bigquery, "Write metadata").
METADATA_COLUMNS: list[dict[str, Any]] = [
    {"name": "subscription_name", "type": "STRING", "mode": "NULLABLE", "description": "Pub/Sub subscription."},
    {"name": "message_id", "type": "STRING", "mode": "NULLABLE", "description": "Pub/Sub message id."},
    {"name": "publish_time", "type": "TIMESTAMP", "mode": "NULLABLE", "description": "When Pub/Sub got it."},
    {
        "name": "attributes",
        "type": "JSON",
        "mode": "NULLABLE",
        "description": "The message attributes (ce-id, ce-type, state …) and its ordering key.",
    },
]


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


def table_schema(event_schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The columns for every field of every event in the union, then the subscription's metadata columns."""
    defs = event_schema["$defs"]
    columns: dict[str, dict[str, Any]] = {}
    for option in event_schema["oneOf"]:
        for name, node in _resolve(option, defs)["properties"].items():
            found = column(name, node, defs)
            columns[name] = _merge(columns[name], found) if name in columns else found
    clash = set(columns) & {c["name"] for c in METADATA_COLUMNS}
    if clash:
        raise UnmappableField(f"event fields {sorted(clash)} collide with the subscription's metadata columns")
    return list(columns.values()) + METADATA_COLUMNS


def _without_empty_descriptions(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: _without_empty_descriptions(v) if k == "fields" else v for k, v in c.items() if v != ""} for c in columns
    ]


def render(columns: list[dict[str, Any]]) -> str:
    return json.dumps(_without_empty_descriptions(columns), indent=2, ensure_ascii=False) + "\n"
