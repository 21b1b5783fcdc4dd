"""Event watchers, read off the HCL: each member of var.event_watchers pulls from a subscription of its own on
the events topic, and can do nothing else — not create, read or delete another subscription, not publish."""

from __future__ import annotations

import re

from tfconfig import TERRAFORM_DIR, block, strings

from trainctl import eventstream


def _grants_mentioning_watchers(tf) -> dict[str, dict]:
    return {
        f"{kind}.{name}": body
        for (kind, name), body in tf.resources.items()
        if kind.endswith("_iam_member") and "var.event_watchers" in " ".join(strings(body))
    }


def test_each_watcher_pulls_from_its_own_subscription_and_nothing_else(tf):
    """Guards issue 25, point 5: `trainctl submit --wait` and `watch` need a subscription on the events topic;
    the deployment authorises watchers with exactly the right to pull from one made for each of them."""
    granted = _grants_mentioning_watchers(tf)
    assert list(granted) == ["google_pubsub_subscription_iam_member.watcher_pulls_its_subscription"]
    grant = granted["google_pubsub_subscription_iam_member.watcher_pulls_its_subscription"]
    assert grant["for_each"] == "${var.event_watchers}"
    assert grant["subscription"] == "${google_pubsub_subscription.watcher[each.key].id}"
    assert (grant["role"], grant["member"]) == ("roles/pubsub.subscriber", "${each.value}")
    assert "condition" not in grant


def test_no_pubsub_role_is_granted_on_the_project(tf):
    """Guards issue 25, point 5: a project-wide Pub/Sub role (roles/pubsub.editor, or subscriber on the project)
    would let its holder read the dead letters and the requests push subscription, or delete them. Since issue 40
    (point 6) not even Google's Cloud Storage agent holds one: it publishes to the uploads topic alone."""
    on_project = {
        name: body["member"]
        for name, body in tf.of_kind("google_project_iam_member").items()
        if body["role"].startswith("roles/pubsub.")
    }
    assert on_project == {}


def test_the_watchers_subscriptions_are_pull_subscriptions_on_the_events_topic(tf):
    """Guards issue 25, point 5: what a watcher pulls is the events topic, as the CLI's own subscription would
    be; it does not vanish when idle, and keeps unacknowledged events no longer than Pub/Sub must."""
    subscription = tf.resource("google_pubsub_subscription", "watcher")
    assert subscription["for_each"] == "${var.event_watchers}"
    assert subscription["topic"] == "${google_pubsub_topic.events.id}"
    assert subscription["name"] == "${var.name_prefix}-watch-${each.key}"
    assert not {"push_config", "bigquery_config", "cloud_storage_config", "filter"} & set(subscription)
    assert block(subscription, "expiration_policy")["ttl"] == ""
    assert subscription["message_retention_duration"] == "600s"  # Pub/Sub's least: ten minutes
    assert subscription["ack_deadline_seconds"] == 30


def test_the_variable_names_members_and_the_output_names_their_subscriptions(tf):
    """Guards issue 25, point 5: the operator lists watchers by name and IAM member; each learns its
    subscription's name from an output."""
    variable = tf.variables["event_watchers"]
    assert variable["type"] == "${map(string)}" and variable["default"] == {}
    condition = block(variable, "validation")["condition"]
    assert "^[a-z][a-z0-9-]{0,29}$" in condition and "serviceAccount" in condition
    output = tf.outputs["event_watch_subscriptions"]["value"]
    assert "google_pubsub_subscription.watcher" in output


def test_the_deploy_guide_lists_the_watchers_grant():
    """Guards issue 25, point 5: terraform/README.md's grant table names the watchers' role and where."""
    guide = (TERRAFORM_DIR / "README.md").read_text()
    row = next(line for line in guide.splitlines() if line.startswith("| each of `var.event_watchers`"))
    assert "`roles/pubsub.subscriber`" in row and "its own" in row


def test_the_cli_points_at_the_variable_it_needs():
    """Guards issue 25, point 5: the CLI's advice names the Terraform variable that exists."""
    names = re.findall(r"`([a-z_]+)`", eventstream.HOW_TO_WATCH)
    assert "event_watchers" in names
    assert 'variable "event_watchers"' in (TERRAFORM_DIR / "variables.tf").read_text()
