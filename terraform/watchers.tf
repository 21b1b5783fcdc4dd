# Event watchers: people and services that follow lifecycle events from the command line (`trainctl watch`,
# `trainctl submit --wait`). Each entry of var.event_watchers gets a pull subscription of its own on the events
# topic and may pull from that subscription and nothing else.
#
# Why not let watchers create their own subscriptions, as the CLI does for an Owner: creating one needs
# pubsub.subscriptions.create on the project and pulling from it pubsub.subscriptions.consume on it, and Pub/Sub
# grants its creator nothing on a new subscription (cloud.google.com/pubsub/docs/access-control). Granted on the
# project, consume would reach every subscription in it (the requests push subscription, the dead letters, the
# history subscription), and delete would too. An IAM Condition on resource.name narrows a grant only for the
# services that recognise resource attributes (cloud.google.com/iam/docs/conditions-resource-attributes), and
# Pub/Sub could not be confirmed among them: a subscription made here, granted on itself, is the way that is
# certain.

resource "google_pubsub_subscription" "watcher" {
  for_each = var.event_watchers

  name                 = "${var.name_prefix}-watch-${each.key}"
  topic                = google_pubsub_topic.events.id
  labels               = local.labels
  ack_deadline_seconds = 30

  # Unacknowledged events are kept the least Pub/Sub allows (10 minutes; "cannot be more than 31 days or less
  # than 10 minutes", Subscription.messageRetentionDuration). The events topic's own 7-day retention may keep
  # older ones available too, so the CLI skips what was published before it started, whatever is left here.
  message_retention_duration = "600s"

  # Idle subscriptions are otherwise deleted after 31 days, and the watcher's grant with them.
  expiration_policy {
    ttl = ""
  }
}

# Pull and acknowledge on its own subscription: roles/pubsub.subscriber holds pubsub.subscriptions.consume, and
# pubsub.topics.attachSubscription, which means nothing on a subscription. No grant on the project or the topic:
# a watcher cannot create, read or delete any other subscription, nor publish anything.
resource "google_pubsub_subscription_iam_member" "watcher_pulls_its_subscription" {
  for_each = var.event_watchers

  subscription = google_pubsub_subscription.watcher[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = each.value
}
