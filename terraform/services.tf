# The APIs this configuration uses, and the Google-managed service agents it grants roles to.

resource "google_project_service" "enabled" {
  for_each = toset([
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "bigquery.googleapis.com",
    # The controller reads the project's Vertex GPU limits (QuotaInfos) before it submits.
    "cloudquotas.googleapis.com",
    # The project data source, project-level IAM members and the log sinks call Cloud Resource Manager;
    # it is off in many projects, and the first apply fails there without it.
    "cloudresourcemanager.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudscheduler.googleapis.com",
    "eventarc.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ])
  service = each.value

  # Other workloads in the project may use the same APIs; destroying trainctl must not switch them off.
  disable_on_destroy = false
}

data "google_project" "this" {
  project_id = var.project

  # Read once Cloud Resource Manager is on (above), not at the first plan of a project where it is off.
  depends_on = [google_project_service.enabled]
}

# The data source (rather than a formatted address) also makes Cloud Storage create its agent if needed.
data "google_storage_project_service_account" "gcs" {
  depends_on = [google_project_service.enabled]
}

locals {
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  gcs_service_agent    = "serviceAccount:${data.google_storage_project_service_account.gcs.email_address}"
}
