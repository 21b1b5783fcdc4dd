# Topics, the operators' dead-letter subscription, and what the Pub/Sub service agent needs to dead-letter.
# The requests topic's push subscription to on_job_request is in triggers.tf, beside the other triggers.

resource "google_pubsub_topic" "requests" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  name   = local.names.requests_topic
  labels = local.labels

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic" "events" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  name   = local.names.events_topic
  labels = local.labels

  # Consumers that subscribe later (or seek back after a bug) can still read the last week of events.
  message_retention_duration = "604800s"

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic" "job_state" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  name   = local.names.job_state_topic
  labels = local.labels

  depends_on = [google_project_service.enabled]
}

# The data bucket's object notifications (storage.tf), which the Eventarc trigger of on_dataset_upload delivers. Its own
# topic, so that the Cloud Storage service agent publishes here and nowhere else (triggers.tf).
resource "google_pubsub_topic" "data_uploads" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  name   = "${var.name_prefix}-data-uploads"
  labels = local.labels

  depends_on = [google_project_service.enabled]
}

# A trigger rule's schedule ticks (Cloud Scheduler) and alerts (a Monitoring notification channel), for on_retrain
# (retrain.tf; issue 42).
resource "google_pubsub_topic" "retrain" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  name   = local.names.retrain_topic
  labels = local.labels

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic" "dead_letter" {
  # checkov:skip=CKV_GCP_83: Google-managed encryption keys; a CMEK is an organisation decision this configuration does not impose.
  name   = local.names.dead_letter_topic
  labels = local.labels

  depends_on = [google_project_service.enabled]
}

# Operators pull dead-lettered requests from here, fix the cause, and republish them to the requests topic.
resource "google_pubsub_subscription" "dead_letter" {
  name                       = local.names.dead_letter_subscription
  topic                      = google_pubsub_topic.dead_letter.id
  labels                     = local.labels
  ack_deadline_seconds       = 60
  message_retention_duration = "${var.dead_letter_retention_days * 86400}s"

  # An idle subscription would otherwise be deleted after 31 days, and with it the dead letters.
  expiration_policy {
    ttl = ""
  }
}

# The Pub/Sub service agent forwards undeliverable requests: it publishes to the dead-letter topic and
# acknowledges the original on the requests subscription it came from (the shared one, or a team's). Nothing else.
resource "google_pubsub_topic_iam_member" "pubsub_agent_publishes_dead_letters" {
  topic  = google_pubsub_topic.dead_letter.id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "pubsub_agent_acks_undeliverable_requests" {
  for_each = google_pubsub_subscription.on_job_request

  subscription = each.value.id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# Until issue 39 the shared subscription's grant and the teams' were two resources.
moved {
  from = google_pubsub_subscription_iam_member.pubsub_agent_acks_forwarded_requests
  to   = google_pubsub_subscription_iam_member.pubsub_agent_acks_undeliverable_requests["(shared)"]
}

moved {
  from = google_pubsub_subscription_iam_member.pubsub_agent_acks_forwarded_team_requests
  to   = google_pubsub_subscription_iam_member.pubsub_agent_acks_undeliverable_requests
}
