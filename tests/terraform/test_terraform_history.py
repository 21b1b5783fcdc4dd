"""Event history in BigQuery, read off the HCL: the subscription writes the table, the table has the
generated schema, partitioning and retention, and the views read columns that unique_events has."""

from __future__ import annotations

import json
import re

import sqlglot
from tfconfig import TERRAFORM_DIR, block

from schemas import bigquery
from schemas.export import event_schema

VIEWS = ("jobs_by_state_per_day", "failures_by_reason", "time_to_start", "gpu_hours_by_label")


def _columns() -> dict[str, dict]:
    """What the table holds."""
    return {c["name"]: c for c in json.loads((TERRAFORM_DIR / "bigquery_events_schema.json").read_text())}


def _view_columns() -> dict[str, dict]:
    """What the view unique_events gives the other views: every event field, and the table's own columns."""
    return {c["name"]: c for c in [*bigquery.event_columns(event_schema()), *bigquery.TABLE_COLUMNS]}


def test_the_events_topic_subscription_writes_the_events_table(tf):
    """Guards issue 15 item 1: every event on the events topic lands in the history table."""
    subscription = tf.resource("google_pubsub_subscription", "events_to_history")
    assert subscription["topic"] == "${google_pubsub_topic.events.id}"
    config = block(subscription, "bigquery_config")
    assert config["table"] == "${local.events_table}"
    assert tf.locals["events_table"] == (
        "${var.project}.${google_bigquery_dataset.history.dataset_id}.${google_bigquery_table.events.table_id}"
    )
    # The event whole in `data`: no schema option, so nothing of an event can be refused or dropped.
    assert (config["write_metadata"], config.get("use_table_schema", False)) == (True, False)
    assert not {"use_topic_schema", "drop_unknown_fields"} & set(config)
    assert "push_config" not in subscription
    # The writer's grant exists before the subscription starts writing.
    assert "${google_bigquery_table_iam_member.pubsub_agent_writes_history}" in subscription["depends_on"]


def test_the_subscription_writes_whole_events_and_the_view_types_them(tf):
    """Guards issue 25, point 8: use_table_schema fills a JSON column only from a field holding JSON in an
    escaped string (cloud.google.com/pubsub/docs/create-bigquery-subscription), so the events' metrics and
    labels, which are objects, would keep those events out of the table; the subscription writes the event whole
    to `data` and the view unique_events, generated from the event schema, reads typed columns out of it."""
    config = block(tf.resource("google_pubsub_subscription", "events_to_history"), "bigquery_config")
    assert "use_table_schema" not in config
    assert _columns()["data"]["type"] == "JSON"
    view = block(tf.resource("google_bigquery_table", "unique_events"), "view")
    assert view["query"] == (
        '${templatefile("${path.module}/bigquery_unique_events.sql", {events_table = local.events_table})}'
    )
    assert "FROM `${events_table}`" in (TERRAFORM_DIR / "bigquery_unique_events.sql").read_text()


def test_the_events_table_has_the_generated_schema_partitioned_by_publish_time(tf):
    """Guards issue 15 item 1 and issue 25 point 8: the table's columns are the generated file's, partitioned
    by a TIMESTAMP column of its own: publish_time (the event's `time` is inside `data`)."""
    table = tf.resource("google_bigquery_table", "events")
    assert table["schema"] == '${file("${path.module}/bigquery_events_schema.json")}'
    partitioning = block(table, "time_partitioning")
    assert (partitioning["type"], partitioning["field"]) == ("DAY", "publish_time")
    assert _columns()["publish_time"]["type"] == "TIMESTAMP"
    assert partitioning["expiration_ms"] == "${local.history_retention_ms}"
    assert "clustering" not in table  # JSON columns cannot cluster, and the typed ones are in the view


def test_history_retention_is_a_dataset_level_variable(tf):
    """Guards issue 15 item 1: one variable sets how long history is kept, on the dataset."""
    dataset = tf.resource("google_bigquery_dataset", "history")
    assert dataset["default_partition_expiration_ms"] == "${local.history_retention_ms}"
    assert "var.history_retention_days" in tf.locals["history_retention_ms"]
    assert "history_retention_days" in tf.variables


def test_each_saved_query_is_a_view_over_deduplicated_events(tf):
    """Guards issue 15 item 1: the four questions are answered by views that count each event once, and
    every `alias.column` they read is a column of unique_events; each parses as BigQuery SQL (issue 25,
    point 8: no BigQuery runs here)."""
    columns = _view_columns()
    for name in VIEWS:
        query = block(tf.resource("google_bigquery_table", name), "view")["query"]
        assert "${local.unique_events}" in query, f"{name} must read the deduplicated view"
        read = set(re.findall(r"\b(?:accepted|running|ended)\.([a-z_]+)", query))
        assert read <= set(columns), f"{name} reads {sorted(read - set(columns))}, not in unique_events"
        unquoted = re.sub(r"\$\{[^}]*\}", "team", query.replace("${local.unique_events}", "p.d.unique_events"))
        sqlglot.parse_one(unquoted, read="bigquery")
    dedupe = (TERRAFORM_DIR / "bigquery_unique_events.sql").read_text()
    assert "${events_table}" in dedupe and "ce-id" in dedupe
