# Teams (issue 32): each team's own request topic, delivered to on_job_request by a push subscription whose path
# names the topic — the controller knows a request's team from that path, which no publisher can change — and
# publishers per team. A team's uploaders may create objects only under its data prefixes and packages/<team>/ (an
# IAM condition on the object's name, cloud.google.com/storage/docs/samples/storage-add-bucket-conditional-iam-binding);
# its markers' trigger rules name the team in their template (`team`).

resource "google_pubsub_topic" "team_requests" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  for_each = local.teams

  name   = "${var.name_prefix}-requests-${each.key}"
  labels = merge(local.labels, { team = each.key })

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic_iam_member" "team_publisher" {
  for_each = { for pair in flatten([for name, team in local.teams : [for member in try(team.publishers, []) : { team = name, member = member }]]) : "${pair.team} ${pair.member}" => pair }

  topic  = google_pubsub_topic.team_requests[each.value.team].id
  role   = "roles/pubsub.publisher"
  member = each.value.member
}

# Where each team's uploaders may create objects: its data prefixes, and its own packages/<team>/ folder, where
# `trainctl submit --source` puts the team's code (issue 38: no other team can plant an object under a digest of
# this team's code; the trailing '/' keeps team "red" out of "red-ops"'s folder). objectCreator cannot overwrite or
# delete (replacing an object needs storage.objects.delete, cloud.google.com/storage/docs/access-control/iam-json).
locals {
  packages_prefix      = "packages/"
  team_upload_prefixes = { for name, team in local.teams : name => concat(try(team.data_prefixes, []), ["${local.packages_prefix}${name}/"]) }
}

resource "google_storage_bucket_iam_member" "team_uploader" {
  for_each = { for pair in flatten([for name, team in local.teams : [for member in try(team.uploaders, []) : { team = name, member = member }]]) : "${pair.team} ${pair.member}" => pair }

  bucket = google_storage_bucket.data.name
  role   = "roles/storage.objectCreator"
  member = each.value.member

  condition {
    title       = "team-${each.value.team}-data"
    description = "Only under team ${each.value.team}'s data prefixes and its packages folder."
    expression  = join(" || ", [for prefix in local.team_upload_prefixes[each.value.team] : "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.data.name}/objects/${prefix}\")"])
  }
}

# The same delivery as the shared requests topic's (triggers.tf): OIDC, retries, dead letters.
resource "google_pubsub_subscription" "team_requests_push" {
  for_each = local.teams

  name   = "${var.name_prefix}-requests-${each.key}-push"
  topic  = google_pubsub_topic.team_requests[each.key].id
  labels = merge(local.labels, { team = each.key })

  ack_deadline_seconds       = var.function_timeout_seconds
  message_retention_duration = "86400s"

  push_config {
    push_endpoint = "${google_cloudfunctions2_function.function["on_job_request"].service_config[0].uri}/${google_pubsub_topic.team_requests[each.key].id}"
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = google_cloudfunctions2_function.function["on_job_request"].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = "${var.request_retry_backoff_seconds.min}s"
    maximum_backoff = "${var.request_retry_backoff_seconds.max}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.request_max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_cloud_run_v2_service_iam_member.push_invokes_on_job_request]
}

resource "google_pubsub_subscription_iam_member" "pubsub_agent_acks_forwarded_team_requests" {
  for_each = local.teams

  subscription = google_pubsub_subscription.team_requests_push[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
