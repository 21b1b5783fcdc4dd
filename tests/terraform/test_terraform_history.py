"""Event history in BigQuery, read off the HCL: the subscription writes the table, the table has the
generated schema, partitioning and retention, and the views read columns the table has."""

from __future__ import annotations

import json
import re

from tfconfig import TERRAFORM_DIR, block

VIEWS = ("jobs_by_state_per_day", "failures_by_reason", "time_to_start", "gpu_hours_by_label")


def _columns() -> dict[str, dict]:
    return {c["name"]: c for c in json.loads((TERRAFORM_DIR / "bigquery_events_schema.json").read_text())}


def test_the_events_topic_subscription_writes_the_events_table(tf):
    """Guards issue 15 item 1: every event on the events topic lands in the history table."""
    subscription = tf.resource("google_pubsub_subscription", "events_to_history")
    assert subscription["topic"] == "${google_pubsub_topic.events.id}"
    config = block(subscription, "bigquery_config")
    assert config["table"] == "${local.events_table}"
    assert tf.locals["events_table"] == (
        "${var.project}.${google_bigquery_dataset.history.dataset_id}.${google_bigquery_table.events.table_id}"
    )
    # Columns by name from the table's own schema, the message metadata beside them, and nothing dropped.
    assert (config["use_table_schema"], config["write_metadata"], config["drop_unknown_fields"]) == (True, True, False)
    assert "push_config" not in subscription
    # The writer's grant exists before the subscription starts writing.
    assert "${google_bigquery_table_iam_member.pubsub_agent_writes_history}" in subscription["depends_on"]


def test_the_events_table_has_the_generated_schema_partitioned_by_event_time(tf):
    """Guards issue 15 item 1: the table's columns are the generated file's, partitioned by the event's time."""
    table = tf.resource("google_bigquery_table", "events")
    assert table["schema"] == '${file("${path.module}/bigquery_events_schema.json")}'
    partitioning = block(table, "time_partitioning")
    assert (partitioning["type"], partitioning["field"]) == ("DAY", "time")
    assert _columns()["time"]["type"] == "TIMESTAMP"
    assert partitioning["expiration_ms"] == "${local.history_retention_ms}"


def test_history_retention_is_a_dataset_level_variable(tf):
    """Guards issue 15 item 1: one variable sets how long history is kept, on the dataset."""
    dataset = tf.resource("google_bigquery_dataset", "history")
    assert dataset["default_partition_expiration_ms"] == "${local.history_retention_ms}"
    assert "var.history_retention_days" in tf.locals["history_retention_ms"]
    assert "history_retention_days" in tf.variables


def test_each_saved_query_is_a_view_over_deduplicated_events(tf):
    """Guards issue 15 item 1: the four questions are answered by views that count each event once, and
    every `alias.column` they read is a column of the events table."""
    columns = _columns()
    for name in VIEWS:
        query = block(tf.resource("google_bigquery_table", name), "view")["query"]
        assert "${local.unique_events}" in query, f"{name} must read the deduplicated view"
        read = set(re.findall(r"\b(?:accepted|running|ended)\.([a-z_]+)", query))
        assert read <= set(columns), f"{name} reads {sorted(read - set(columns))}, not in the table"
    dedupe = block(tf.resource("google_bigquery_table", "unique_events"), "view")["query"]
    assert "${local.events_table}" in dedupe and "ce-id" in dedupe
