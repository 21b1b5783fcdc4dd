# Lifecycle events pushed to systems outside the project: one push subscription on the events topic per entry
# of var.event_webhooks, each with its own filter, delivering each request's events in order (the controller
# publishes them with the request id as ordering key) and signing every push with an OIDC token of a service
# account of their own, which the receiver verifies (README.md, "Webhooks").

resource "google_service_account" "webhook_signer" {
  count = length(var.event_webhooks) > 0 ? 1 : 0

  account_id   = "${var.name_prefix}-webhooks"
  display_name = "trainctl webhooks: signs the event pushes to var.event_webhooks"
  description  = "Holds no role: Pub/Sub mints its OIDC tokens so receivers can check who sent an event."
}

resource "google_pubsub_subscription" "webhook" {
  for_each = var.event_webhooks

  name   = "${var.name_prefix}-webhook-${each.key}"
  topic  = google_pubsub_topic.events.id
  labels = local.labels
  # Immutable in Pub/Sub: changing a filter replaces the subscription.
  filter = each.value.filter
  # Each request's events in the order they were published (one at a time per request id).
  enable_message_ordering = true
  ack_deadline_seconds    = 30

  push_config {
    push_endpoint = each.value.url
    oidc_token {
      service_account_email = google_service_account.webhook_signer[0].email
      audience              = coalesce(each.value.audience, each.value.url)
    }
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  expiration_policy {
    ttl = ""
  }
}
