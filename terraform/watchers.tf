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

# ---------------------------------------------------------------------------------------------------
# Each team's watchers (var.teams' `watchers`, issue 40 point 5): a watcher above sees every team's events, names and
# errors included. A team's watcher gets a pull subscription of its own whose filter keeps only its team's events: the
# controller sets the `team` attribute on every event of a team's request (schemas/events.py), and a subscription
# with a filter never delivers the messages it does not match ("Pub/Sub automatically acknowledges the messages that
# don't match the filter", cloud.google.com/pubsub/docs/filtering). One subscription per watcher,
# not per team: sessions sharing a subscription would split its events between them.
locals {
  team_watchers = { for pair in flatten([for team, body in local.teams : [for name, member in try(body.watchers, {}) : { team = team, name = name, member = member }]]) : "${pair.team}/${pair.name}" => pair }
}

resource "google_pubsub_subscription" "team_watcher" {
  for_each = local.team_watchers

  name                 = "${var.name_prefix}-watch-${each.value.team}-${each.value.name}"
  topic                = google_pubsub_topic.events.id
  labels               = merge(local.labels, { team = each.value.team })
  ack_deadline_seconds = 30
  # The attribute the controller sets; a filter cannot be changed once the subscription exists (Terraform replaces it).
  filter = "attributes.team = \"${each.value.team}\""

  message_retention_duration = "600s"

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription_iam_member" "team_watcher_pulls_its_subscription" {
  for_each = local.team_watchers

  subscription = google_pubsub_subscription.team_watcher[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = each.value.member
}
