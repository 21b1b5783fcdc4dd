# Retraining without a marker (issue 42): a trigger rule's schedule and alerts, both delivered to on_retrain through
# the retrain topic (pubsub.tf; its Eventarc trigger: locals.tf, functions.tf). The controller derives each run's
# request id from the tick's rule and scheduled time, or from the alert's model and incident, so that a redelivered
# message runs once (functions/intake/rule_triggers.py).

# One Cloud Scheduler job per rule whose inline template has a policy.schedule. A Pub/Sub target publishes fixed data
# and attributes, nothing of the schedule time (PubsubTarget: topic_name, data, attributes;
# cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs#PubsubTarget): the data names the rule, and
# the controller reads the tick's scheduled time from the message's publishTime and the rule's cron. A rule whose
# template is a gs:// document gets no job (Terraform cannot read it): create its schedule yourself, with this data.
# Cloud Scheduler publishes as its own service agent, which may publish to any topic of the project ("a Cloud
# Scheduler Admin … can create jobs that publish to any Pub/Sub topics within the project",
# cloud.google.com/scheduler/docs/access-control): no grant is needed here.
locals {
  rule_schedules = {
    for rule, template in var.trigger_rules : rule => template.policy.schedule if can(template.policy.schedule.cron)
  }
}

resource "google_cloud_scheduler_job" "rule_schedule" {
  for_each = local.rule_schedules

  # Job names take letters, digits, '-' and '_': the rule's hash; the description names the rule.
  name        = "${var.name_prefix}-schedule-${substr(sha256(each.key), 0, 12)}"
  region      = var.region
  description = "trainctl: runs trigger rule ${each.key} on its newest data (issue 42)."
  schedule    = each.value.cron
  time_zone   = try(each.value.time_zone, "Etc/UTC")

  pubsub_target {
    topic_name = google_pubsub_topic.retrain.id
    data       = base64encode(jsonencode({ rule = each.key }))
  }

  depends_on = [google_project_service.enabled]
}

# Alerts: Cloud Monitoring publishes each incident of an alerting policy that names this channel to the retrain topic,
# as JSON of schema version 1.2 (cloud.google.com/monitoring/support/notification-options, "Pub/Sub": incident_id,
# policy_name, state, policy_user_labels …). The policy's user label trainctl-model (or trainctl_model) names the model
# whose rule runs. Vertex AI model monitoring sends its alerts to such channels too (ModelMonitoringAlertConfig
# notificationChannels).
resource "google_monitoring_notification_channel" "retrain" {
  display_name = "trainctl retrain (${var.name_prefix})"
  description  = "Open incidents of a policy labelled trainctl-model=<model> start the model's trigger rule on its newest data."
  type         = "pubsub"
  labels = {
    topic = google_pubsub_topic.retrain.id
  }
  user_labels = local.labels

  depends_on = [google_project_service.enabled]
}

# Monitoring publishes as its notification service agent, which must hold roles/pubsub.publisher on the topic
# (cloud.google.com/monitoring/support/notification-options, "Pub/Sub": "Authorize service account").
resource "google_pubsub_topic_iam_member" "monitoring_publishes_retrain" {
  topic  = google_pubsub_topic.retrain.id
  role   = "roles/pubsub.publisher"
  member = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-monitoring-notification.iam.gserviceaccount.com"
}
