# The web console in the cloud (issue 45, point 3): `trainctl console` as a Cloud Run service behind IAP, off unless
# var.console.enabled. Read-only: its account may read the control bucket (the ledger, the runs' metrics and curves)
# and the output buckets, Vertex AI (the Model Registry, endpoints) and the GPU quotas, and pull from a subscription of
# its own on the events topic; nothing else.
#
# IAP on the Cloud Run service itself (cloud.google.com/run/docs/securing/identity-aware-proxy-cloud-run): IAP lets
# through only the members granted roles/iap.httpsResourceAccessor below, then calls the service as its own service
# agent, the only member with roles/run.invoker: no allUsers, and no way around IAP by the run.app URL. The app then
# verifies IAP's signed header itself and shows each viewer only the teams it may watch (trainctl/console/identity.py).
# `iap_enabled` is in the google-beta provider only (magic-modules mmv1/products/cloudrunv2/Service.yaml: iapEnabled,
# min_version beta; local/FIDELITY.md, "The console behind IAP"), hence that provider for the service and its IAP
# resources, and hashicorp/google for the rest.

locals {
  console_enabled = var.console.enabled
  console_name    = "${var.name_prefix}-console"
  console_image   = coalesce(var.console.image, "${local.trainer_repository}/console:latest")
  # Everyone IAP lets through: the console's admins and viewers, and every team's watchers that name a person, a
  # service account or a domain. A group: watcher cannot be told from the signed header (it names a person), so it
  # is not let through: its people are listed in var.console.viewers instead.
  console_watchers = flatten([for team in values(local.teams) : [for member in values(try(team.watchers, {})) : member if !startswith(member, "group:")]])
  console_members  = local.console_enabled ? toset(concat(var.console.admins, keys(var.console.viewers), local.console_watchers)) : toset([])
  # The audience IAP writes in its signed header for a Cloud Run service it guards (cloud.google.com/iap/docs/
  # signed-headers-howto); identity.py's cloud_run_audience, which a test compares.
  console_audience = "/projects/${data.google_project.this.number}/locations/${var.region}/services/${local.console_name}"
  # The console's own settings beside the controller's (trainctl/console/identity.py reads them; a test compares).
  console_settings = {
    TRAINCTL_EVENTS_SUBSCRIPTION  = local.console_enabled ? google_pubsub_subscription.console[0].name : ""
    TRAINCTL_CONSOLE_IAP_AUDIENCE = local.console_audience
    TRAINCTL_CONSOLE_ADMINS       = join(",", var.console.admins)
    TRAINCTL_CONSOLE_VIEWERS      = jsonencode(var.console.viewers)
  }
  console_env = merge(local.controller_env, { for name, value in local.console_settings : name => value if value != "" })
}

resource "google_project_service" "console" {
  for_each = local.console_enabled ? toset(["iap.googleapis.com"]) : toset([])

  service            = each.value
  disable_on_destroy = false
}

# IAP's service agent, created if the project has none yet; it is the one caller of the service.
resource "google_project_service_identity" "iap" {
  count    = local.console_enabled ? 1 : 0
  provider = google-beta

  project = var.project
  service = "iap.googleapis.com"

  depends_on = [google_project_service.console]
}

resource "google_service_account" "console" {
  count = local.console_enabled ? 1 : 0

  account_id   = "${var.name_prefix}-console"
  display_name = "trainctl console"
  description  = "Runs the read-only web console: reads the control bucket and Vertex AI, pulls its own events subscription."

  depends_on = [google_project_service.enabled]
}

# The live view's events: a pull subscription of its own, as a watcher's (watchers.tf). One instance pulls it
# (max_instance_count below): instances sharing a subscription would split its events between them.
resource "google_pubsub_subscription" "console" {
  count = local.console_enabled ? 1 : 0

  name                       = local.console_name
  topic                      = google_pubsub_topic.events.id
  labels                     = local.labels
  ack_deadline_seconds       = 30
  message_retention_duration = "600s"

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription_iam_member" "console_pulls_its_subscription" {
  count = local.console_enabled ? 1 : 0

  subscription = google_pubsub_subscription.console[0].id
  role         = "roles/pubsub.subscriber"
  member       = google_service_account.console[0].member
}

# The ledger, the runs' metrics.json and curves, the registered models' folders: read and list, never write.
resource "google_storage_bucket_iam_member" "console_reads_control" {
  count = local.console_enabled ? 1 : 0

  bucket = google_storage_bucket.control.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.console[0].member
}

# What custom images wrote to var.output_buckets (their metrics.json and curves on a request's page): read only.
resource "google_storage_bucket_iam_member" "console_reads_outputs" {
  for_each = local.console_enabled ? toset(var.output_buckets) : toset([])

  bucket = each.value
  role   = "roles/storage.objectViewer"
  member = google_service_account.console[0].member
}

# The GPU limits the now page sets each team's share against (functions/cloud/quotas.py): Cloud Quotas'
# quotaInfos.get, as the functions read them.
resource "google_project_iam_member" "console_reads_quotas" {
  count = local.console_enabled ? 1 : 0

  project = var.project
  role    = "roles/cloudquotas.viewer"
  member  = google_service_account.console[0].member

  depends_on = [google_project_service.enabled]
}

# The Model Registry (models, versions, aliases, evaluations) and endpoints' traffic: roles/aiplatform.viewer holds
# aiplatform.*.get and .list only. Vertex AI has no scope narrower than the project.
resource "google_project_iam_member" "console_reads_vertex" {
  count = local.console_enabled ? 1 : 0

  project = var.project
  role    = "roles/aiplatform.viewer"
  member  = google_service_account.console[0].member

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_run_v2_service" "console" {
  count    = local.console_enabled ? 1 : 0
  provider = google-beta

  name     = local.console_name
  location = var.region
  labels   = local.labels
  # IAP on a Cloud Run service is a launch-stage-protected feature: the service declares BETA to use it.
  launch_stage = "BETA"
  iap_enabled  = true
  # IAP protects every ingress path, the run.app URL included, so the service needs no load balancer.
  ingress             = "INGRESS_TRAFFIC_ALL"
  deletion_protection = false

  template {
    service_account = google_service_account.console[0].email
    timeout         = "3600s" # the live view is one long server-sent-events response

    scaling {
      min_instance_count = 0
      max_instance_count = 1
    }

    containers {
      image   = local.console_image
      command = ["trainctl", "console", "--host", "0.0.0.0", "--port", "8080"]

      ports {
        container_port = 8080
      }

      dynamic "env" {
        for_each = local.console_env
        content {
          name  = env.key
          value = env.value
        }
      }

      resources {
        limits = {
          cpu    = "1"
          memory = "1Gi"
        }
      }
    }
  }

  depends_on = [
    google_project_service.enabled,
    google_project_service.console,
    google_storage_bucket_iam_member.console_reads_control,
    google_project_iam_member.console_reads_vertex,
    google_project_iam_member.console_reads_quotas,
    google_pubsub_subscription_iam_member.console_pulls_its_subscription,
  ]
}

# IAP calls the service as its service agent: the one member allowed to invoke it.
resource "google_cloud_run_v2_service_iam_member" "iap_invokes_console" {
  count = local.console_enabled ? 1 : 0

  project  = var.project
  location = var.region
  name     = google_cloud_run_v2_service.console[0].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-iap.iam.gserviceaccount.com"

  depends_on = [google_project_service_identity.iap]
}

# Who IAP lets through. The app still decides what each one sees: the teams it watches, or all for an admin.
resource "google_iap_web_cloud_run_service_iam_member" "console_viewer" {
  for_each = local.console_members
  provider = google-beta

  project                = var.project
  location               = var.region
  cloud_run_service_name = google_cloud_run_v2_service.console[0].name
  role                   = "roles/iap.httpsResourceAccessor"
  member                 = each.value
}
