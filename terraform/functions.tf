# The four Cloud Functions (2nd gen). One source archive serves all four: functions/, schemas/,
# requirements.txt, and terraform/root_main.py as the root main.py that Cloud Functions imports. That file is
# checked in rather than generated here so that ruff lints it and tests/terraform can compile it and compare
# its names with local.functions and functions/main.py.

locals {
  repo_root = "${path.module}/.."

  # Allow-list, not a deny-list: tests, the trainer, .venv and caches never reach the archive.
  source_files = setunion(
    fileset(local.repo_root, "functions/**/*.{py,json,yaml,yml}"),
    fileset(local.repo_root, "schemas/**/*.{py,json,yaml,yml}"),
    ["requirements.txt"],
  )
}

data "archive_file" "source" {
  type        = "zip"
  output_path = "${path.module}/.build/function-source.zip"

  dynamic "source" {
    for_each = local.source_files
    content {
      content  = file("${local.repo_root}/${source.value}")
      filename = source.value
    }
  }

  source {
    content  = file("${path.module}/root_main.py")
    filename = "main.py"
  }
}

# Named by content hash: a change of source replaces the object, which redeploys the functions.
resource "google_storage_bucket_object" "source" {
  name   = "functions/source-${data.archive_file.source.output_md5}.zip"
  bucket = google_storage_bucket.source.name
  source = data.archive_file.source.output_path
}

# New grants take a while to reach Cloud Build, and on a fresh project Eventarc's service agent (created when
# its API is enabled) and the triggers' grants take a while to reach Eventarc: without the pause the first
# build may fail to fetch its source, or Eventarc may refuse the first trigger. Google documents no bound for
# either; if the first apply still fails on one of them, running apply again finishes it (terraform/README.md).
resource "time_sleep" "grants_propagate" {
  create_duration = "120s"

  depends_on = [
    google_project_service.enabled,
    google_project_iam_member.build_writes_logs,
    google_project_iam_member.build_reads_staged_source,
    google_artifact_registry_repository_iam_member.build_pushes_function_images,
    google_project_iam_member.eventarc_receives_events,
  ]
}

resource "google_cloudfunctions2_function" "function" {
  for_each = local.functions

  name        = "${var.name_prefix}-${replace(each.key, "_", "-")}"
  location    = var.region
  description = each.value.description
  labels      = local.labels

  build_config {
    runtime           = var.python_runtime
    entry_point       = each.key
    service_account   = google_service_account.build.id
    docker_repository = google_artifact_registry_repository.functions.id
    source {
      storage_source {
        bucket = google_storage_bucket_object.source.bucket
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    available_memory      = var.function_memory[each.key]
    timeout_seconds       = var.function_timeout_seconds
    min_instance_count    = var.function_min_instances
    max_instance_count    = var.function_max_instances
    service_account_email = google_service_account.function[each.key].email
    environment_variables = local.controller_env
    # Eventarc, Pub/Sub push and Cloud Scheduler in the same project count as internal callers.
    ingress_settings               = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
  }

  dynamic "event_trigger" {
    for_each = each.value.trigger == null ? [] : [each.value.trigger]
    content {
      event_type            = event_trigger.value.event_type
      pubsub_topic          = event_trigger.value.pubsub_topic
      trigger_region        = var.region
      retry_policy          = "RETRY_POLICY_RETRY"
      service_account_email = google_service_account.eventarc.email

      dynamic "event_filters" {
        for_each = event_trigger.value.bucket == null ? [] : [event_trigger.value.bucket]
        content {
          attribute = "bucket"
          value     = event_filters.value
        }
      }
    }
  }

  depends_on = [
    time_sleep.grants_propagate,
    # Eventarc checks it when it creates the triggers.
    google_project_iam_member.eventarc_receives_events,
  ]
}
