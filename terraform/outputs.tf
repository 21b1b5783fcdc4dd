# What operators, the trainctl CLI and other services need to find this deployment.

output "buckets" {
  description = "Bucket names: data (watched for markers), control (ledger, templates, runs/, custom-runs/), source (function archives)."
  value = {
    data    = google_storage_bucket.data.name
    control = google_storage_bucket.control.name
    source  = google_storage_bucket.source.name
  }
}

output "topics" {
  description = "Topic names: publish job requests to requests, subscribe to events; dead_letter holds undeliverable requests."
  value = {
    requests    = google_pubsub_topic.requests.name
    events      = google_pubsub_topic.events.name
    job_state   = google_pubsub_topic.job_state.name
    dead_letter = google_pubsub_topic.dead_letter.name
    retrain     = google_pubsub_topic.retrain.name
  }
}

output "retrain_notification_channel" {
  description = "The Cloud Monitoring notification channel (Pub/Sub, on the retrain topic) to add to an alerting policy labelled trainctl-model=<model> (or a Vertex AI model monitoring job's alert config): its open incidents start the model's rule on its newest data."
  value       = google_monitoring_notification_channel.retrain.name
}

output "subscriptions" {
  description = "Subscription names: the push subscription feeding on_job_request, and the operators' dead-letter pull subscription."
  value = {
    requests_push    = google_pubsub_subscription.on_job_request["(shared)"].name
    dead_letter_pull = google_pubsub_subscription.dead_letter.name
  }
}

output "event_watch_subscriptions" {
  description = "Each event watcher's own pull subscription, by its name in var.event_watchers: what it passes to `trainctl watch --subscription` (or TRAINCTL_EVENTS_SUBSCRIPTION)."
  value       = { for name, s in google_pubsub_subscription.watcher : name => s.name }
}

output "team_event_watch_subscriptions" {
  description = "Each team watcher's own pull subscription, by <team>/<name> of var.teams' watchers: it receives that team's events only (a filter on the `team` attribute); the watcher passes it to `trainctl watch --subscription` (or TRAINCTL_EVENTS_SUBSCRIPTION)."
  value       = { for key, s in google_pubsub_subscription.team_watcher : key => s.name }
}

output "function_uris" {
  description = "URI of each function, by entry point. Ingress is internal-only: these answer only callers inside the project."
  value       = { for name, f in google_cloudfunctions2_function.function : name => f.service_config[0].uri }
}

output "service_accounts" {
  description = "Email of each service account: one per function, the trainer, the custom images' account (custom), the callers (Eventarc, push, scheduler) and the build."
  value = merge(
    { for name, sa in google_service_account.function : name => sa.email },
    {
      trainer   = google_service_account.trainer.email
      custom    = google_service_account.custom.email
      eventarc  = google_service_account.eventarc.email
      push      = google_service_account.push.email
      scheduler = google_service_account.scheduler.email
      build     = google_service_account.build.email
    },
  )
}

output "trainer_repository" {
  description = "Artifact Registry path to push the trainer image to (docker push <this>/trainer:<tag>)."
  value       = local.trainer_repository
}

output "trainer_image" {
  description = "The trainer image the controller submits jobs with."
  value       = local.trainer_image
}

output "console_url" {
  description = "The web console's address (var.console.enabled): open it in a browser; IAP asks who you are, and the console shows the teams you may watch. null while the console is off."
  value       = local.console_enabled ? google_cloud_run_v2_service.console[0].uri : null
}

output "controller_environment" {
  description = "The TRAINCTL_* settings every function runs with."
  value       = local.controller_env
}
