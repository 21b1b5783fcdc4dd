"""Generate the JSON Schema files from the models, and the event history's BigQuery table schema and typed view
from the event schema: `python -m schemas.export` (or `make schemas`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schemas import bigquery
from schemas.events import EVENT_ADAPTER
from schemas.request import TrainingJobRequest

HERE = Path(__file__).parent
REQUEST_SCHEMA = HERE / "training_job.schema.json"
EVENT_SCHEMA = HERE / "job_event.schema.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def request_schema() -> dict[str, Any]:
    return {"$schema": _DIALECT, "$id": "https://trainctl.dev/schemas/trainctl-v1/training_job.schema.json"} | (
        TrainingJobRequest.model_json_schema()
    )


def event_schema() -> dict[str, Any]:
    schema = EVENT_ADAPTER.json_schema()
    return {
        "$schema": _DIALECT,
        "$id": "https://trainctl.dev/schemas/trainctl-v1/job_event.schema.json",
        "title": "JobEvent",
    } | schema


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    for path, schema in ((REQUEST_SCHEMA, request_schema()), (EVENT_SCHEMA, event_schema())):
        path.write_text(render(schema))
        print(f"wrote {path}")
    bigquery.BIGQUERY_SCHEMA.write_text(bigquery.render(bigquery.TABLE_COLUMNS))
    bigquery.UNIQUE_EVENTS_SQL.write_text(bigquery.unique_events_query(bigquery.event_columns(event_schema())))
    for path in (bigquery.BIGQUERY_SCHEMA, bigquery.UNIQUE_EVENTS_SQL):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
