# Event history in BigQuery: a BigQuery subscription on the events topic writes every lifecycle event, whole, as
# one row of a table partitioned by the time Pub/Sub received it; the view unique_events gives every event field
# a typed column (its SQL is generated from schemas/job_event.schema.json by schemas/bigquery.py, `make schemas`)
# and the other views answer the questions operators ask of it.

locals {
  history_dataset = "${replace(var.name_prefix, "-", "_")}_history"
  # Partition expiry in milliseconds: a partition (one day of events) is deleted this long after its day.
  history_retention_ms = var.history_retention_days * 86400000
  events_table         = "${var.project}.${google_bigquery_dataset.history.dataset_id}.${google_bigquery_table.events.table_id}"
  # The views read this one: Pub/Sub delivers at least once, so a copy of an event (same ce-id) counts once.
  unique_events = "${var.project}.${google_bigquery_dataset.history.dataset_id}.${google_bigquery_table.unique_events.table_id}"
}

resource "google_bigquery_dataset" "history" {
  # checkov:skip=CKV_GCP_81: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  dataset_id  = local.history_dataset
  location    = var.region
  description = "trainctl lifecycle events, one row per published event (the events topic's BigQuery subscription)."
  labels      = local.labels

  # Applies to the tables created in it; the events table also sets it itself (below).
  default_partition_expiration_ms = local.history_retention_ms
  delete_contents_on_destroy      = var.force_destroy

  depends_on = [google_project_service.enabled]
}

resource "google_bigquery_table" "events" {
  # checkov:skip=CKV_GCP_80: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  # checkov:skip=CKV_GCP_121: deletion protection is on unless var.force_destroy says to tear history down; checkov cannot read the expression.
  dataset_id          = google_bigquery_dataset.history.dataset_id
  table_id            = "events"
  description         = "Every lifecycle event as published: the event in `data` (JSON), Pub/Sub's metadata beside it. Query the view unique_events for typed columns."
  labels              = local.labels
  schema              = file("${path.module}/bigquery_events_schema.json")
  deletion_protection = !var.force_destroy

  # publish_time is within moments of the event's own time (events are published as they happen), and unlike
  # it is a column of the table itself.
  time_partitioning {
    type          = "DAY"
    field         = "publish_time"
    expiration_ms = local.history_retention_ms
  }
}

# The Pub/Sub service agent writes the rows (cloud.google.com/pubsub/docs/create-bigquery-subscription):
# data editor on this table only.
resource "google_bigquery_table_iam_member" "pubsub_agent_writes_history" {
  dataset_id = google_bigquery_table.events.dataset_id
  table_id   = google_bigquery_table.events.table_id
  role       = "roles/bigquery.dataEditor"
  member     = local.pubsub_service_agent
}

resource "google_pubsub_subscription" "events_to_history" {
  name   = "${var.name_prefix}-events-to-bigquery"
  topic  = google_pubsub_topic.events.id
  labels = local.labels

  # No schema option: the event goes whole into the JSON column `data` ("If the field is of type JSON, then the
  # message body must be valid JSON"), and no event field can be refused or dropped. use_table_schema would fill
  # a JSON column only from a field holding JSON in an escaped string, and an event's metrics and labels are
  # objects (cloud.google.com/pubsub/docs/create-bigquery-subscription, "Use table schema").
  bigquery_config {
    table          = local.events_table
    write_metadata = true
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_bigquery_table_iam_member.pubsub_agent_writes_history]
}

# ---- saved queries, as views ---------------------------------------------------------------------------

resource "google_bigquery_table" "unique_events" {
  # checkov:skip=CKV_GCP_80: a view holds no data of its own to encrypt.
  # checkov:skip=CKV_GCP_121: a view holds no data; dropping it loses nothing the next apply does not restore.
  dataset_id          = google_bigquery_dataset.history.dataset_id
  table_id            = "unique_events"
  description         = "Every event once (Pub/Sub's redelivered copies dropped by ce-id), each event field a typed column."
  labels              = local.labels
  deletion_protection = false

  view {
    use_legacy_sql = false
    query          = templatefile("${path.module}/bigquery_unique_events.sql", { events_table = local.events_table })
  }
}

resource "google_bigquery_table" "jobs_by_state_per_day" {
  # checkov:skip=CKV_GCP_80: a view holds no data of its own to encrypt.
  # checkov:skip=CKV_GCP_121: a view holds no data; dropping it loses nothing the next apply does not restore.
  dataset_id          = google_bigquery_dataset.history.dataset_id
  table_id            = "jobs_by_state_per_day"
  description         = "Requests that reached each state, per day."
  labels              = local.labels
  deletion_protection = false

  view {
    use_legacy_sql = false
    query          = <<-SQL
      SELECT DATE(time) AS day, state, COUNT(DISTINCT request_key) AS requests
      FROM `${local.unique_events}`
      GROUP BY day, state
    SQL
  }
}

resource "google_bigquery_table" "failures_by_reason" {
  # checkov:skip=CKV_GCP_80: a view holds no data of its own to encrypt.
  # checkov:skip=CKV_GCP_121: a view holds no data; dropping it loses nothing the next apply does not restore.
  dataset_id          = google_bigquery_dataset.history.dataset_id
  table_id            = "failures_by_reason"
  description         = "Failed and rejected requests per day, by classified reason (quota, capacity, user …)."
  labels              = local.labels
  deletion_protection = false

  view {
    use_legacy_sql = false
    query          = <<-SQL
      SELECT DATE(time) AS day, state, reason, COUNT(*) AS requests
      FROM `${local.unique_events}`
      WHERE state IN ('failed', 'rejected')
      GROUP BY day, state, reason
    SQL
  }
}

resource "google_bigquery_table" "time_to_start" {
  # checkov:skip=CKV_GCP_80: a view holds no data of its own to encrypt.
  # checkov:skip=CKV_GCP_121: a view holds no data; dropping it loses nothing the next apply does not restore.
  dataset_id          = google_bigquery_dataset.history.dataset_id
  table_id            = "time_to_start"
  description         = "Seconds from `accepted` to the first `running` event, per request."
  labels              = local.labels
  deletion_protection = false

  view {
    use_legacy_sql = false
    query          = <<-SQL
      SELECT accepted.request_id, DATE(accepted.time) AS day,
        TIMESTAMP_DIFF(MIN(running.time), accepted.time, SECOND) AS seconds_to_start
      FROM `${local.unique_events}` AS accepted
      JOIN `${local.unique_events}` AS running USING (request_key)
      WHERE accepted.state = 'accepted' AND running.state = 'running'
      GROUP BY accepted.request_id, accepted.time
    SQL
  }
}

resource "google_bigquery_table" "gpu_hours_by_label" {
  # checkov:skip=CKV_GCP_80: a view holds no data of its own to encrypt.
  # checkov:skip=CKV_GCP_121: a view holds no data; dropping it loses nothing the next apply does not restore.
  dataset_id          = google_bigquery_dataset.history.dataset_id
  table_id            = "gpu_hours_by_label"
  description         = "GPU-hours and estimated cost (catalog list prices) per day, by the request label var.history_cost_label."
  labels              = local.labels
  deletion_protection = false

  # The accepted event carries the request's labels; the final one what every attempt ran (`spent`), or for events
  # from before it did, the last attempt's run time, priced at the accepted event's cost basis.
  view {
    use_legacy_sql = false
    query          = <<-SQL
      SELECT DATE(ended.time) AS day,
        JSON_VALUE(accepted.labels, '$."${var.history_cost_label}"') AS ${replace(var.history_cost_label, "-", "_")},
        COUNT(*) AS requests,
        SUM(IFNULL(ended.spent.gpu_hours, accepted.cost.gpus * IFNULL(ended.duration_seconds, 0) / 3600)) AS gpu_hours,
        SUM(IFNULL(
          ended.spent.estimated_cost_usd, accepted.cost.hourly_usd * IFNULL(ended.duration_seconds, 0) / 3600
        )) AS estimated_cost_usd
      FROM `${local.unique_events}` AS accepted
      JOIN `${local.unique_events}` AS ended USING (request_key)
      WHERE accepted.state = 'accepted' AND ended.state IN ('succeeded', 'failed', 'cancelled')
      GROUP BY day, 2
    SQL
  }
}
