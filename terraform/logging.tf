# Completion path, fast half: Vertex AI writes "service" log lines as a job moves (provisioning, running,
# completed); a sink routes those lines to the job-state topic, which feeds on_job_state, which reads the
# job's state from Vertex. reconcile is the half that never misses.
# Also: a log bucket of this deployment's own, so its logs outlive the _Default bucket's 30 days.

locals {
  # Only documented fields (reference/vertex.md §5.3): the ml_job resource and its service task. The same
  # file is the local announcer's filter (local/jobservice/log_filter.py), so both route the same lines.
  job_state_log_filter = trimspace(file("${path.module}/job_state_log_filter.txt"))

  function_services   = [for name in sort(keys(local.functions)) : "\"${var.name_prefix}-${replace(name, "_", "-")}\""]
  retained_log_filter = "(resource.type=\"cloud_run_revision\" AND resource.labels.service_name=(${join(" OR ", local.function_services)})) OR resource.type=\"ml_job\""
}

resource "google_logging_project_sink" "job_state" {
  name                   = "${var.name_prefix}-job-state"
  description            = "Vertex AI CustomJob service log lines (state changes), for on_job_state."
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
