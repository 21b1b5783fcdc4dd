# Artifact Registry: the trainer image that jobs run, and the images Cloud Build makes of the functions.

resource "google_artifact_registry_repository" "trainer" {
  # checkov:skip=CKV_GCP_84: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  repository_id = var.name_prefix
  location      = var.region
  format        = "DOCKER"
  description   = "trainctl DDP trainer images run by Vertex AI CustomJobs."
  labels        = local.labels

  # No cleanup policy: a job being retried must still find the image (or digest) it was submitted with.

  depends_on = [google_project_service.enabled]
}

# Function builds go here instead of the default gcf-artifacts repository, so the build service account
# can be given write access to this repository alone.
resource "google_artifact_registry_repository" "functions" {
  # checkov:skip=CKV_GCP_84: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  repository_id = "${var.name_prefix}-functions"
  location      = var.region
  format        = "DOCKER"
  description   = "Images Cloud Build makes of the trainctl functions."
  labels        = local.labels

  cleanup_policy_dry_run = false

  cleanup_policies {
    id     = "keep-recent-builds"
    action = "KEEP"
    most_recent_versions {
      keep_count = 5
    }
  }

  cleanup_policies {
    id     = "delete-old-builds"
    action = "DELETE"
    condition {
      tag_state  = "ANY"
      older_than = "2592000s" # 30 days
    }
  }

  depends_on = [google_project_service.enabled]
}
