# Buckets: data (watched for dataset markers), control (ledger, templates, run artifacts) and the
# functions' source archives. All private: uniform bucket-level access, public access prevention enforced.

resource "google_storage_bucket" "data" {
  # checkov:skip=CKV_GCP_62: Access is audited with Cloud Audit Logs (Data Access) where required; usage-log objects in another bucket add cost and no control.
  name                        = local.names.data_bucket
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels
  force_destroy               = var.force_destroy

  # An overwritten dataset stays recoverable for a while: runs point at a folder, not at a generation.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_version_retention_days
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

# Every object finalized in the data bucket is published to the uploads topic, whose Eventarc trigger calls
# on_dataset_upload (functions.tf); the message's attributes name the object, its data is the object resource
# (JSON_API_V1, cloud.google.com/storage/docs/pubsub-notifications). The service agent must be allowed to publish there
# before the configuration is created.
resource "google_storage_notification" "data_uploads" {
  bucket         = google_storage_bucket.data.name
  topic          = google_pubsub_topic.data_uploads.id
  payload_format = "JSON_API_V1"
  event_types    = ["OBJECT_FINALIZE"]

  depends_on = [google_pubsub_topic_iam_member.gcs_agent_publishes_uploads]
}

resource "google_storage_bucket" "control" {
  # checkov:skip=CKV_GCP_62: Access is audited with Cloud Audit Logs (Data Access) where required; usage-log objects in another bucket add cost and no control.
  name                        = local.names.control_bucket
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels
  force_destroy               = var.force_destroy

  # The ledger is rewritten with generation preconditions; old generations are the audit trail.
  versioning {
    enabled = true
  }

  # Old runs: models, checkpoints and TensorBoard logs under runs/<request_id>/ and custom-runs/<request_id>/.
  lifecycle_rule {
    condition {
      age            = var.run_retention_days
      matches_prefix = [local.artifacts_prefix, local.custom_artifacts_prefix]
    }
    action {
      type = "Delete"
    }
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_version_retention_days
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

# Function source archives (one object per content hash); only the deployer and the build read them.
resource "google_storage_bucket" "source" {
  # checkov:skip=CKV_GCP_62: Holds only build inputs written by Terraform; Cloud Audit Logs cover access.
  name                        = "${var.project}-${var.name_prefix}-source"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = local.labels
  force_destroy               = var.force_destroy

  versioning {
    enabled = true
  }

  # Archives of earlier deployments are never read again once replaced.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 7
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}
