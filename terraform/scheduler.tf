# The reconcile sweep: Cloud Scheduler calls the HTTP function with an OIDC token every few minutes.

resource "google_service_account" "scheduler" {
  account_id   = "${var.name_prefix}-scheduler"
  display_name = "trainctl reconcile schedule"
  description  = "OIDC identity Cloud Scheduler uses to call reconcile."

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_run_v2_service_iam_member" "scheduler_invokes_reconcile" {
  location = google_cloudfunctions2_function.function["reconcile"].location
  name     = google_cloudfunctions2_function.function["reconcile"].name
  role     = "roles/run.invoker"
  member   = google_service_account.scheduler.member
}

resource "google_cloud_scheduler_job" "reconcile" {
  name        = "${var.name_prefix}-reconcile"
  region      = var.region
  description = "Calls reconcile: missed state changes, stuck jobs, resubmissions."
  schedule    = var.reconcile_schedule
  time_zone   = var.reconcile_time_zone
  # The sweep may run as long as the function's timeout; give the call a little more.
  attempt_deadline = "${var.function_timeout_seconds + 30}s"

  # A failed sweep is not retried: the next tick is a few minutes away and does the same work.
  retry_config {
    retry_count = 0
  }

  http_target {
    uri         = google_cloudfunctions2_function.function["reconcile"].service_config[0].uri
    http_method = "POST"
    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = google_cloudfunctions2_function.function["reconcile"].service_config[0].uri
    }
  }

  depends_on = [google_cloud_run_v2_service_iam_member.scheduler_invokes_reconcile]
}
