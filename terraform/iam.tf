# Who runs as whom, and the least each identity needs at run time. terraform/README.md traces every grant
# here to the call that needs it. Grants to the callers of the functions (Eventarc, Pub/Sub push, Cloud
# Scheduler) are in triggers.tf and scheduler.tf; grants to Google's service agents sit beside the resource
# they act on (pubsub.tf, triggers.tf, logging.tf).

# ---------------------------------------------------------------------------------------------------
# The controller: one service account per function

resource "google_service_account" "function" {
  for_each = local.functions

  account_id   = "${var.name_prefix}-${each.value.account}"
  display_name = "trainctl ${each.key}"
  description  = "Runs the ${each.key} function. ${each.value.description}"

  depends_on = [google_project_service.enabled]
}

# The Vertex AI calls each function can reach, and nothing else (issue 40, point 6: roles/aiplatform.user held every
# Vertex permission a user has). A custom role per function, its permissions from local.functions' vertex_permissions,
# which tests/terraform/test_terraform_reachable_calls.py derives from the code, each method's permission from its
# REST reference ("IAM Permissions") and the Vertex AI IAM permissions page (cloud.google.com/vertex-ai/docs/general/
# iam-permissions: a long-running operation's GET needs the resource's `.get`). The intake functions create CustomJobs
# (after listing by label: adopt, never duplicate) and read the champion model; on_job_state and reconcile also get,
# list and cancel jobs, and register, evaluate and promote versions. Vertex has no narrower scope than the project.
# The same role holds compute.reservations.get (issue 43): admission reads a reserved rung's reservation (its shape,
# count and VMs in use), nothing else of Compute Engine; a shared reservation's owner project grants it on its own.
# reconcile's role holds aiplatform.persistentResources.create/get/delete for the teams' warm pools (issue 43); a job
# on one needs only aiplatform.customJobs.create (cloud.google.com/vertex-ai/docs/training/persistent-resource-train,
# "Required roles").
resource "google_project_iam_custom_role" "function_vertex" {
  for_each = local.functions

  project     = var.project
  role_id     = replace("${var.name_prefix}_${each.value.account}_vertex", "-", "_")
  title       = "trainctl ${each.key} Vertex AI calls"
  description = "The Vertex AI (and its Cloud Monitoring metrics, Compute Engine reservations) calls the ${each.key} function makes: ${join(", ", each.value.vertex_permissions)}."
  permissions = each.value.vertex_permissions

  depends_on = [google_project_service.enabled]
}

resource "google_project_iam_member" "function_uses_vertex" {
  for_each = local.functions

  project = var.project
  role    = google_project_iam_custom_role.function_vertex[each.key].id
  member  = google_service_account.function[each.key].member

  depends_on = [google_project_service.enabled]
}

# Reading the project's Vertex GPU limits (Cloud Quotas quotaInfos.get needs cloudquotas.quotas.get on the
# project) before admitting a request. Every function may admit: the intake functions, and on_job_state and
# reconcile when they resubmit or release a request queued for quota.
resource "google_project_iam_member" "function_reads_quotas" {
  for_each = local.functions

  project = var.project
  role    = "roles/cloudquotas.viewer"
  member  = google_service_account.function[each.key].member

  depends_on = [google_project_service.enabled]
}

# A CustomJob that runs as the trainer account may only be created by callers allowed to act as it.
resource "google_service_account_iam_member" "function_acts_as_trainer" {
  for_each = local.functions

  service_account_id = google_service_account.trainer.name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.function[each.key].member
}

# The same for the custom images' account, which jobs of custom images run as.
resource "google_service_account_iam_member" "function_acts_as_custom_trainer" {
  for_each = local.functions

  service_account_id = google_service_account.custom.name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.function[each.key].member
}

# Dataset markers and dataset objects (overrides in the marker, existence checks at admission).
resource "google_storage_bucket_iam_member" "function_reads_data" {
  for_each = local.data_readers

  bucket = each.value.bucket
  role   = "roles/storage.objectViewer"
  member = google_service_account.function[each.value.function].member
}

# What custom images wrote in the operator's output buckets: metrics.json, progress.json and failure.json are read,
# and the output folder listed when a failure is diagnosed.
resource "google_storage_bucket_iam_member" "function_reads_outputs" {
  for_each = local.output_readers

  bucket = each.value.bucket
  role   = "roles/storage.objectViewer"
  member = google_service_account.function[each.value.function].member
}

# The ledger (create with if_generation_match=0, compare-and-swap rewrites, the active index), trigger
# templates and run outputs (metrics.json) all live in the control bucket.
resource "google_storage_bucket_iam_member" "function_uses_control_bucket" {
  for_each = local.functions

  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectUser"
  member = google_service_account.function[each.key].member
}

# Lifecycle events go to the events topic and nowhere else.
resource "google_pubsub_topic_iam_member" "function_publishes_events" {
  for_each = local.functions

  topic  = google_pubsub_topic.events.id
  role   = "roles/pubsub.publisher"
  member = google_service_account.function[each.key].member
}

# ---------------------------------------------------------------------------------------------------
# The trainer: what a CustomJob's containers run as

resource "google_service_account" "trainer" {
  account_id   = "${var.name_prefix}-trainer"
  display_name = "trainctl trainer"
  description  = "Runs the built-in DDP trainer inside Vertex AI CustomJobs: reads datasets, writes runs/."

  depends_on = [google_project_service.enabled]
}

resource "google_storage_bucket_iam_member" "trainer_reads_data" {
  for_each = toset(local.data_buckets)

  bucket = each.value
  role   = "roles/storage.objectViewer"
  member = google_service_account.trainer.member
}

# Model, metrics, checkpoints (written, listed, rotated) and TensorBoard logs, only below runs/: the ledger beside
# the runs stays out of reach, and so do custom images' outputs (they run as the custom account below).
resource "google_storage_bucket_iam_member" "trainer_writes_run_outputs" {
  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectUser"
  member = google_service_account.trainer.member

  condition {
    title       = "run-outputs-only"
    description = "Objects below ${local.artifacts_prefix}, and listings of that prefix."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.control.name}/objects/${local.artifacts_prefix}\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.artifacts_prefix}\")"
  }
}

# The champion a run scores and the model's reference rows (issue 38): the controller's copies, read only.
resource "google_storage_bucket_iam_member" "trainer_reads_models" {
  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.trainer.member

  condition {
    title       = "registered-models-only"
    description = "Objects below ${join(" and ", local.model_prefixes)}, and listings of them."
    expression  = local.model_read_condition
  }
}

locals {
  model_read_condition = join(" || ", concat(
    [for prefix in local.model_prefixes : "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.control.name}/objects/${prefix}\")"],
    [for prefix in local.model_prefixes : "api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${prefix}\")"],
  ))
}

# ---------------------------------------------------------------------------------------------------
# Custom images: what a CustomJob of any image but the built-in trainer's runs as. An account of its own, so that
# custom code (all of whose jobs share it) can never write where the built-in trainer's outputs live, nor the
# ledger; the controller refuses a custom image that names the trainer's account (functions/jobs/admission.py).

resource "google_service_account" "custom" {
  account_id   = "${var.name_prefix}-custom"
  display_name = "trainctl custom images"
  description  = "Runs custom trainer images inside Vertex AI CustomJobs: reads datasets, writes custom-runs/ and the output buckets."

  depends_on = [google_project_service.enabled]
}

# With teams, this account runs the default team's own code (every other team's runs as its own, teams.tf): it reads
# only what the default team's requests may name as data (issue 40, point 5). Without teams, every data bucket.
resource "google_storage_bucket_iam_member" "custom_reads_data" {
  for_each = { for bucket in local.data_buckets : bucket => bucket if var.teams == null || length(try(local.team_read_prefixes[var.teams.default_team][bucket], [])) > 0 }

  bucket = each.value
  role   = "roles/storage.objectViewer"
  member = google_service_account.custom.member

  dynamic "condition" {
    for_each = var.teams == null ? [] : [try(local.team_read_conditions[var.teams.default_team][each.value], "false")]
    content {
      title       = "default-team-readable-data"
      description = "Objects below the default team's folders of this bucket, and listings of them."
      expression  = condition.value
    }
  }
}

# Outputs in the control bucket, only below custom-runs/ and never in a team's folder there (teams.tf: each team's
# own code runs as its own account): not runs/ (the built-in trainer's), not the ledger.
resource "google_storage_bucket_iam_member" "custom_writes_custom_run_outputs" {
  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectUser"
  member = google_service_account.custom.member

  condition {
    title       = "custom-run-outputs-only"
    description = "Objects below ${local.custom_artifacts_prefix} but ${local.team_artifacts_prefix}, and listings of them."
    expression  = "(resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.control.name}/objects/${local.custom_artifacts_prefix}\") && !resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.control.name}/objects/${local.team_artifacts_prefix}\")) || (api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.custom_artifacts_prefix}\") && !api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.team_artifacts_prefix}\"))"
  }
}

# The champion a run scores and the model's reference rows (issue 38): the controller's copies, read only.
resource "google_storage_bucket_iam_member" "custom_reads_models" {
  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.custom.member

  condition {
    title       = "registered-models-only"
    description = "Objects below ${join(" and ", local.model_prefixes)}, and listings of them."
    expression  = local.model_read_condition
  }
}

# The operator's output buckets, whole (var.output_buckets: never the control bucket or a data bucket).
resource "google_storage_bucket_iam_member" "custom_writes_output_buckets" {
  for_each = toset(var.output_buckets)

  bucket = each.value
  role   = "roles/storage.objectUser"
  member = google_service_account.custom.member
}

# ---------------------------------------------------------------------------------------------------
# The functions' build: Cloud Build runs as this account instead of a default one that may hold Editor.

resource "google_service_account" "build" {
  account_id   = "${var.name_prefix}-build"
  display_name = "trainctl function builds"
  description  = "Cloud Build identity that turns the functions' source into images."

  depends_on = [google_project_service.enabled]
}

resource "google_project_iam_member" "build_writes_logs" {
  project = var.project
  role    = "roles/logging.logWriter"
  member  = google_service_account.build.member

  depends_on = [google_project_service.enabled]
}

resource "google_artifact_registry_repository_iam_member" "build_pushes_function_images" {
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.build.member
}

# Cloud Functions copies the uploaded archive to its own gcf-v2-sources-<number>-<region> bucket, and the
# build fetches it from there. In IAM conditions a bucket is named projects/_/buckets/B and its objects
# projects/_/buckets/B/objects/O (cloud.google.com/iam/docs/conditions-resource-attributes#resource-name), so
# the condition names both: the build's listing of the bucket is checked against the bucket's own name.
locals {
  staged_source_bucket = "projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-${var.region}"
}

resource "google_project_iam_member" "build_reads_staged_source" {
  project = var.project
  role    = "roles/storage.objectViewer"
  member  = google_service_account.build.member

  condition {
    title       = "function-sources-only"
    description = "The bucket Cloud Functions stages source archives in, and its objects."
    expression  = "resource.name == \"${local.staged_source_bucket}\" || resource.name.startsWith(\"${local.staged_source_bucket}/objects/\")"
  }

  depends_on = [google_project_service.enabled]
}

# Who may start jobs: publishing a request, or uploading a dataset with its marker. Nobody else.
resource "google_pubsub_topic_iam_member" "request_publisher" {
  for_each = toset(var.request_publishers)

  topic  = google_pubsub_topic.requests.id
  role   = "roles/pubsub.publisher"
  member = each.value
}

# They create and replace objects (teams.tf: the data_uploader role). With teams, never under a team's folder (its data
# prefixes, its packages folder): a marker there would start that team's jobs, on its quota and budget (issue 40,
# point 5). The controller refuses such a marker too (functions/teams.py marker_problem), and a marker these members
# put outside every team's folder counts only where the operator opened shared intake.
resource "google_storage_bucket_iam_member" "data_uploader" {
  for_each = toset(var.data_uploaders)

  bucket = google_storage_bucket.data.name
  role   = google_project_iam_custom_role.data_uploader.id
  member = each.value

  dynamic "condition" {
    for_each = length(local.all_team_upload_prefixes) == 0 ? [] : [local.all_team_upload_prefixes]
    content {
      title       = "outside-team-folders"
      description = "Any object of the data bucket outside every team's folders."
      expression  = "!(${join(" || ", [for prefix in condition.value : "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.data.name}/objects/${prefix}\")"])})"
    }
  }
}
