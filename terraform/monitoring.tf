# Cloud Monitoring: log-based metrics counted from the functions' structured log lines (the fields are named in
# functions/ledger/monitoring_fields.py), a dashboard (dashboard.json, kept in the repository), and alert policies
# whose documentation says what to do (docs/operations.md, "Alerts", one entry per alert).

locals {
  # The functions' own lines: Cloud Functions (2nd gen) log under the Cloud Run revision of their service.
  function_log_filter = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=(${join(" OR ", local.function_services)})"
  # Google's metrics of those services (Cloud Run's request_count, request_latencies, instance_count).
  function_metric_filter = "resource.type=\"cloud_run_revision\" AND resource.label.service_name=starts_with(\"${var.name_prefix}-\")"

  log_metrics = {
    events_published = {
      description = "Lifecycle events published, by state and classified reason."
      filter      = "jsonPayload.event_state:*"
      labels = {
        state  = "EXTRACT(jsonPayload.event_state)"
        reason = "EXTRACT(jsonPayload.event_reason)"
      }
    }
    rejected_requests = {
      description = "Requests rejected, by the rule (field path) they broke and the reason."
      filter      = "jsonPayload.event_state=\"rejected\""
      labels = {
        rule   = "EXTRACT(jsonPayload.rule)"
        reason = "EXTRACT(jsonPayload.event_reason)"
      }
    }
    handler_errors = {
      description = "ERROR lines from the functions (a handler that could not finish its work), by service."
      filter      = "severity>=ERROR"
      labels = {
        service = "EXTRACT(resource.labels.service_name)"
      }
    }
    reconcile_failed_ticks = {
      description = "reconcile ticks that failed: the sweep raised, or could not bring a record up to date."
      filter      = "jsonPayload.tick_failed=true"
      labels      = {}
    }
  }

  # One entry per alert: its README entry (the anchor of its heading) and what the documentation says first.
  alert_runbook = {
    failures        = "alert-failed-jobs-above-the-rate"
    stuck           = "alert-a-job-is-stuck"
    dead_letter     = "alert-requests-in-the-dead-letter-subscription"
    reconcile       = "alert-reconcile-failing"
    function_errors = "alert-a-function-answers-with-errors"
  }

  dashboard = templatefile("${path.module}/dashboard.json", {
    prefix                 = var.name_prefix
    events_published       = google_logging_metric.counter["events_published"].name
    rejected_requests      = google_logging_metric.counter["rejected_requests"].name
    handler_errors         = google_logging_metric.counter["handler_errors"].name
    reconcile_failed_ticks = google_logging_metric.counter["reconcile_failed_ticks"].name
    reconcile_duration     = google_logging_metric.reconcile_duration.name
    dead_letter            = google_pubsub_subscription.dead_letter.name
    history                = google_pubsub_subscription.events_to_history.name
  })
}

resource "google_logging_metric" "counter" {
  for_each = local.log_metrics

  name        = "${var.name_prefix}_${each.key}"
  description = each.value.description
  filter      = "${local.function_log_filter} AND ${each.value.filter}"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"

    dynamic "labels" {
      for_each = each.value.labels
      content {
        key        = labels.key
        value_type = "STRING"
      }
    }
  }

  label_extractors = each.value.labels

  depends_on = [google_project_service.enabled]
}

resource "google_logging_metric" "reconcile_duration" {
  name            = "${var.name_prefix}_reconcile_duration"
  description     = "Seconds each reconcile tick took (its `reconciled` line)."
  filter          = "${local.function_log_filter} AND jsonPayload.message=\"reconciled\" AND jsonPayload.duration_s:*"
  value_extractor = "EXTRACT(jsonPayload.duration_s)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "s"
  }

  bucket_options {
    exponential_buckets {
      num_finite_buckets = 16
      growth_factor      = 2
      scale              = 0.1
    }
  }

  depends_on = [google_project_service.enabled]
}

resource "google_monitoring_dashboard" "operations" {
  dashboard_json = local.dashboard

  depends_on = [google_project_service.enabled]
}

# ---- alerts -------------------------------------------------------------------------------------------

# An alert policy on a log-based metric created in the same apply is refused until Monitoring knows the metric:
# 404 "Cannot find metric(s) that match type = logging.googleapis.com/user/… If a metric was created recently, it
# could take up to 10 minutes to become available" (hashicorp/terraform-provider-google#11102, open). The policies
# on those metrics wait out the 10 minutes Monitoring states; nothing else waits (every other resource is created
# meanwhile), and only when the metrics are new: the wait is keyed on their names, so a later apply that keeps
# them does not wait again.
resource "time_sleep" "log_metrics_known_to_monitoring" {
  create_duration = "10m"

  triggers = {
    metrics = join(",", concat([for metric in google_logging_metric.counter : metric.id], [google_logging_metric.reconcile_duration.id]))
  }
}

resource "google_monitoring_alert_policy" "failures" {
  display_name          = "${var.name_prefix}: failed jobs above ${var.alert_failed_jobs_per_hour} an hour"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "failed events in the last hour"
    condition_threshold {
      filter          = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.counter["events_published"].name}\" AND metric.label.state=\"failed\" AND resource.type=\"cloud_run_revision\""
      duration        = "0s"
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_failed_jobs_per_hour
      aggregations {
        alignment_period     = "3600s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "More than ${var.alert_failed_jobs_per_hour} jobs failed in an hour. Run `trainctl report --since 1d` for failures by reason, then follow ${var.runbook_url}#${local.alert_runbook.failures}."
  }

  depends_on = [time_sleep.log_metrics_known_to_monitoring]
}

resource "google_monitoring_alert_policy" "stuck" {
  display_name          = "${var.name_prefix}: a job is stuck"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "stuck events"
    condition_threshold {
      filter          = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.counter["events_published"].name}\" AND metric.label.state=\"stuck\" AND resource.type=\"cloud_run_revision\""
      duration        = "0s"
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A job waited longer than its max_pending (for GPU quota or capacity) and was cancelled. The `stuck` event's reason says which; follow ${var.runbook_url}#${local.alert_runbook.stuck}."
  }

  depends_on = [time_sleep.log_metrics_known_to_monitoring]
}

resource "google_monitoring_alert_policy" "dead_letter" {
  display_name          = "${var.name_prefix}: requests in the dead-letter subscription"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "dead-letter backlog above zero"
    condition_threshold {
      filter          = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=\"${google_pubsub_subscription.dead_letter.name}\""
      duration        = "0s"
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A job request failed every delivery to on_job_request and waits in `${google_pubsub_subscription.dead_letter.name}`. Pull it, fix the cause, republish: ${var.runbook_url}#${local.alert_runbook.dead_letter}."
  }
}

resource "google_monitoring_alert_policy" "reconcile" {
  display_name          = "${var.name_prefix}: reconcile failing"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "two failed reconcile ticks within ${var.alert_reconcile_window}"
    condition_threshold {
      filter          = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.counter["reconcile_failed_ticks"].name}\" AND resource.type=\"cloud_run_revision\""
      duration        = "0s"
      comparison      = "COMPARISON_GT"
      threshold_value = 1
      aggregations {
        alignment_period     = var.alert_reconcile_window
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "reconcile, the sweep that catches missed job state changes, failed two ticks in a row. Its ERROR lines say why; follow ${var.runbook_url}#${local.alert_runbook.reconcile}."
  }

  depends_on = [time_sleep.log_metrics_known_to_monitoring]
}

resource "google_monitoring_alert_policy" "function_errors" {
  display_name          = "${var.name_prefix}: a function answers with errors"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "5xx share of a function's requests above ${var.alert_function_error_ratio}"
    condition_threshold {
      filter             = "metric.type=\"run.googleapis.com/request_count\" AND metric.label.response_code_class=\"5xx\" AND ${local.function_metric_filter}"
      denominator_filter = "metric.type=\"run.googleapis.com/request_count\" AND ${local.function_metric_filter}"
      duration           = "300s"
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alert_function_error_ratio
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
      denominator_aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A function fails more than ${var.alert_function_error_ratio * 100}% of its invocations; its deliveries are being retried. Read its ERROR lines and follow ${var.runbook_url}#${local.alert_runbook.function_errors}."
  }
}
