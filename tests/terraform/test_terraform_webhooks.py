"""Webhooks, read off the HCL: each entry of var.event_webhooks is an ordered push subscription on the events
topic with its own filter, signed with an OIDC token of an account that holds no role."""

from __future__ import annotations

from tfconfig import block, strings


def test_each_webhook_is_an_ordered_signed_push_subscription_with_its_filter(tf):
    """Guards issue 15 item 5: URL + subscription filter become a push subscription with an OIDC token, and
    each request's events arrive in order (the ordering key is the request id)."""
    hook = tf.resource("google_pubsub_subscription", "webhook")
    assert hook["for_each"] == "${var.event_webhooks}"
    assert hook["topic"] == "${google_pubsub_topic.events.id}"
    assert hook["filter"] == "${each.value.filter}"
    assert hook["enable_message_ordering"] is True
    push = block(hook, "push_config")
    assert push["push_endpoint"] == "${each.value.url}"
    token = block(push, "oidc_token")
    assert token["service_account_email"] == "${google_service_account.webhook_signer[0].email}"
    assert token["audience"] == "${coalesce(each.value.audience, each.value.url)}"
    variable = tf.variables["event_webhooks"]
    assert "https://" in variable["validation"][0]["condition"] and "256" in variable["validation"][0]["condition"]


def test_the_webhook_signer_holds_no_role_and_old_projects_may_mint_its_tokens(tf):
    """Guards issue 15 item 5: the signing account only identifies the sender; in projects from before
    2021-04-08 the Pub/Sub agent is granted token creation on it, as on the other push identities."""
    signer = "google_service_account.webhook_signer"
    holders = [
        f"{kind}.{name}"
        for (kind, name), body in tf.resources.items()
        if kind.endswith("_iam_member") and any(signer in text for text in strings(body.get("member", "")))
    ]
    assert holders == []
    tokens = tf.resource("google_service_account_iam_member", "pubsub_agent_mints_tokens")
    assert "webhook_signer" in tokens["for_each"] and "if var.legacy_pubsub_push_auth" in tokens["for_each"]
