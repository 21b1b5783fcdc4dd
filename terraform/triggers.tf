# What calls the event functions, and the least each caller needs.
#  - on_dataset_upload: Eventarc, on messages of the uploads topic, where the data bucket's notification publishes each
#    object finalized (storage.tf, functions.tf).
#  - on_job_state: Eventarc, on messages of the job-state topic (functions.tf).
#  - on_retrain: Eventarc, on messages of the retrain topic: schedule ticks and alerts (retrain.tf).
#  - on_job_request: our own push subscription on the requests topic, because only a subscription we own can
#    carry a dead-letter policy (the one Eventarc creates for a function cannot be given one).
# reconcile is called by Cloud Scheduler (scheduler.tf).

# ---------------------------------------------------------------------------------------------------
# Eventarc

resource "google_service_account" "eventarc" {
  account_id   = "${var.name_prefix}-eventarc"
  display_name = "trainctl Eventarc triggers"
  description  = "Identity of the Eventarc triggers of on_dataset_upload, on_job_state and on_retrain."

  depends_on = [google_project_service.enabled]
}

# Cloud Storage publishes the data bucket's object notifications to the uploads topic (storage.tf) and to no other:
# "If your Cloud Storage service agent is delivering notifications, it must have the Pub/Sub Publisher role
# (roles/pubsub.publisher) on the Pub/Sub topic" (cloud.google.com/storage/docs/reporting-changes). Until issue 40 the
# storage trigger was an Eventarc Cloud Storage trigger, whose topic Eventarc creates and names ("You can set an existing
# topic for triggers of the type google.cloud.pubsub.topic.v1.messagePublished", Eventarc's Pubsub transport), so the
# agent held publisher on the whole project, every topic in it included (issue 40, point 6).
resource "google_pubsub_topic_iam_member" "gcs_agent_publishes_uploads" {
  topic  = google_pubsub_topic.data_uploads.id
  role   = "roles/pubsub.publisher"
  member = local.gcs_service_agent
}

resource "google_project_iam_member" "eventarc_receives_events" {
  project = var.project
  role    = "roles/eventarc.eventReceiver"
  member  = google_service_account.eventarc.member

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_run_v2_service_iam_member" "eventarc_invokes" {
  for_each = toset([for name, f in local.functions : name if f.trigger != null])

  location = google_cloudfunctions2_function.function[each.key].location
  name     = google_cloudfunctions2_function.function[each.key].name
  role     = "roles/run.invoker"
  member   = google_service_account.eventarc.member
}

# ---------------------------------------------------------------------------------------------------
# Job requests: push subscription with OIDC, retries and a dead-letter topic

resource "google_service_account" "push" {
  account_id   = "${var.name_prefix}-push"
  display_name = "trainctl request push"
  description  = "OIDC identity of the requests push subscription that calls on_job_request."

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_run_v2_service_iam_member" "push_invokes_on_job_request" {
  location = google_cloudfunctions2_function.function["on_job_request"].location
  name     = google_cloudfunctions2_function.function["on_job_request"].name
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

# Only projects created before 2021-04-08 need this: their Pub/Sub service agent lacks the token creation
# that newer projects give it, and it mints the OIDC tokens of the push subscription, of the Eventarc
# triggers (which deliver through Pub/Sub too) and of the webhooks (webhooks.tf).
resource "google_service_account_iam_member" "pubsub_agent_mints_tokens" {
  for_each = {
    for caller, account in merge({
      push     = google_service_account.push.name
      eventarc = google_service_account.eventarc.name
    }, { for signer in google_service_account.webhook_signer : "webhooks" => signer.name }) : caller => account if var.legacy_pubsub_push_auth
  }

  service_account_id = each.value
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# Every topic requests arrive on, and how its subscription is named and labelled: the shared one (the default team's,
# or everyone's without teams), under a key no team's name can be, and each team's own (teams.tf).
locals {
  shared_requests = { topic = google_pubsub_topic.requests.id, subscription = local.names.requests_subscription, labels = local.labels }
  team_requests   = { for name, topic in google_pubsub_topic.team_requests : name => { topic = topic.id, subscription = "${var.name_prefix}-requests-${name}-push", labels = merge(local.labels, { team = name }) } }
  request_topics  = merge({ "(shared)" = local.shared_requests }, local.team_requests)
}

# One delivery for every requests topic: the same deadline, OIDC, retries and dead letters.
resource "google_pubsub_subscription" "on_job_request" {
  for_each = local.request_topics

  name   = each.value.subscription
  topic  = each.value.topic
  labels = each.value.labels

  # For a push subscription this is how long Pub/Sub waits for the function's answer.
  ack_deadline_seconds = var.function_timeout_seconds
  # Matches the controller's default max_event_age: older requests would be dropped anyway.
  message_retention_duration = "86400s"

  push_config {
    # The path names the topic: functions-framework turns it into the CloudEvent's source
    # (//pubsub.googleapis.com/projects/P/topics/T), as Eventarc would, and as the local stack does. The controller
    # knows a request's team from it (teams.tf), which no publisher can change.
    push_endpoint = "${google_cloudfunctions2_function.function["on_job_request"].service_config[0].uri}/${each.value.topic}"
    oidc_token {
      service_account_email = google_service_account.push.email
      # Cloud Run checks the audience against the service URL, not the path above.
      audience = google_cloudfunctions2_function.function["on_job_request"].service_config[0].uri
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

  # An idle subscription would otherwise be deleted after 31 days, and requests would go nowhere.
  expiration_policy {
    ttl = ""
  }

  depends_on = [google_cloud_run_v2_service_iam_member.push_invokes_on_job_request]
}

# Until issue 39 the shared topic's subscription and the teams' were two resources: the same objects, moved.
moved {
  from = google_pubsub_subscription.requests_push
  to   = google_pubsub_subscription.on_job_request["(shared)"]
}

moved {
  from = google_pubsub_subscription.team_requests_push
  to   = google_pubsub_subscription.on_job_request
}
