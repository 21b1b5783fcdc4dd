# Completion path, fast half: Vertex AI writes a log line with the job's terminal state; a sink routes those
# lines to the job-state topic, which feeds on_job_state. reconcile is the half that never misses.
# Also: a log bucket of this deployment's own, so its logs outlive the _Default bucket's 30 days.

locals {
  # reference/vertex.md §5.3. The label is not a documented contract, hence reconcile.
  job_state_log_filter = "resource.type=\"ml_job\" AND labels.\"ml.googleapis.com/job_state\"=(\"SUCCEEDED\" OR \"FAILED\" OR \"CANCELLED\")"

  function_services   = [for name in sort(keys(local.functions)) : "\"${var.name_prefix}-${replace(name, "_", "-")}\""]
  retained_log_filter = "(resource.type=\"cloud_run_revision\" AND resource.labels.service_name=(${join(" OR ", local.function_services)})) OR resource.type=\"ml_job\""
}

resource "google_logging_project_sink" "job_state" {
  name                   = "${var.name_prefix}-job-state"
  description            = "Vertex AI CustomJob terminal states, for on_job_state."
  destination            = "pubsub.googleapis.com/${google_pubsub_topic.job_state.id}"
  filter                 = local.job_state_log_filter
  unique_writer_identity = true

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic_iam_member" "sink_publishes_job_states" {
  topic  = google_pubsub_topic.job_state.id
  role   = "roles/pubsub.publisher"
  member = google_logging_project_sink.job_state.writer_identity
}

resource "google_logging_project_bucket_config" "logs" {
  project        = var.project
  location       = "global"
  bucket_id      = "${var.name_prefix}-logs"
  retention_days = var.log_retention_days
  description    = "trainctl functions' logs and Vertex AI training job logs."

  depends_on = [google_project_service.enabled]
}

# A sink into a log bucket of the same project needs no writer grant.
resource "google_logging_project_sink" "retained_logs" {
  name        = "${var.name_prefix}-logs"
  description = "Copies trainctl's logs into its own log bucket, kept for var.log_retention_days."
  destination = "logging.googleapis.com/${google_logging_project_bucket_config.logs.id}"
  filter      = local.retained_log_filter

  depends_on = [google_project_service.enabled]
}
