"""Cloud Monitoring, read off the HCL and the dashboard JSON: metrics from the fields the functions log, a
dashboard that shows only metrics that exist, and alerts that notify the channels and say what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tfconfig import TERRAFORM_DIR, block

from functions.ledger import monitoring_fields
from tests.docs import anchors

REPO_ROOT = Path(__file__).resolve().parents[2]
ALERTS = ("failures", "stuck", "dead_letter", "reconcile", "function_errors")
# Google's own metric types the configuration reads (cloud.google.com/monitoring/api/metrics_gcp: Cloud Run's
# `run` and Pub/Sub's `pubsub` sections).
GOOGLE_METRICS = {
    "run.googleapis.com/request_count",
    "run.googleapis.com/request_latencies",
    "run.googleapis.com/container/instance_count",
    "pubsub.googleapis.com/subscription/num_undelivered_messages",
}


def _template_variables(tf) -> set[str]:
    """The names monitoring.tf passes to templatefile("dashboard.json", {...})."""
    call = tf.locals["dashboard"]
    assert 'templatefile("${path.module}/dashboard.json"' in call
    return set(re.findall(r"\b([a-z_]+)\s*=", call))


def _dashboard(tf) -> dict:
    """dashboard.json as Terraform renders it: every ${name} replaced by a value."""
    text = (TERRAFORM_DIR / "dashboard.json").read_text()
    used = set(re.findall(r"\$\{([a-z_]+)\}", text))
    assert used <= _template_variables(tf), f"dashboard.json uses {sorted(used - _template_variables(tf))}, not passed"
    return json.loads(re.sub(r"\$\{([a-z_]+)\}", lambda m: f"rendered_{m.group(1)}", text))


def _defined_metric_names(tf) -> dict[str, str]:
    """The template variable or resource expression naming each log-based metric → its metric key."""
    counters = tf.resource("google_logging_metric", "counter")
    assert "${local.log_metrics}" == counters["for_each"]
    return {key: key for key in tf.locals["log_metrics"]} | {"reconcile_duration": "reconcile_duration"}


def _metric_types(filters: list[str]) -> list[str]:
    # A Terraform expression inside the quotes may hold quotes of its own (counter["events_published"]).
    return [m for f in filters for m in re.findall(r'metric\.type="((?:\$\{[^}]*\}|[^"$])+)"', f)]


def test_the_dashboard_parses_and_shows_only_metrics_that_exist(tf):
    """Guards issue 15 item 2: dashboard.json is valid JSON once rendered, and each chart reads a log-based
    metric this configuration defines or a metric Google provides."""
    dashboard = _dashboard(tf)
    filters = [
        data_set["timeSeriesQuery"]["timeSeriesFilter"]["filter"]
        for widget in dashboard["gridLayout"]["widgets"]
        for data_set in widget["xyChart"]["dataSets"]
    ]
    defined = _defined_metric_names(tf)
    for metric in _metric_types(filters):
        if metric.startswith("logging.googleapis.com/user/rendered_"):
            assert metric.removeprefix("logging.googleapis.com/user/rendered_") in defined, metric
        else:
            assert metric in GOOGLE_METRICS, f"{metric} is neither defined here nor a Google metric"
    # What the issue asks to see: events by state, failures, rejections, errors, reconcile, the dead-letter
    # backlog, and the functions' latency and instances.
    shown = set(_metric_types(filters))
    for key in (*tf.locals["log_metrics"], "reconcile_duration"):
        assert f"logging.googleapis.com/user/rendered_{key}" in shown, f"the dashboard leaves out {key}"
    assert GOOGLE_METRICS - {"run.googleapis.com/request_count"} <= shown
    dashboard_resource = tf.resource("google_monitoring_dashboard", "operations")
    assert dashboard_resource["dashboard_json"] == "${local.dashboard}"


def test_log_metrics_count_the_fields_the_functions_log(tf):
    """Guards issue 15 item 2: each metric's filter and labels name fields functions/ledger/monitoring_fields.py
    writes, so renaming a log field breaks this test, not the dashboard."""
    metrics = tf.locals["log_metrics"]
    assert f"jsonPayload.{monitoring_fields.EVENT_STATE}" in metrics["events_published"]["filter"]
    assert metrics["events_published"]["labels"] == {
        "state": f"EXTRACT(jsonPayload.{monitoring_fields.EVENT_STATE})",
        "reason": f"EXTRACT(jsonPayload.{monitoring_fields.EVENT_REASON})",
    }
    assert metrics["rejected_requests"]["labels"]["rule"] == f"EXTRACT(jsonPayload.{monitoring_fields.REJECTION_RULE})"
    assert f"jsonPayload.{monitoring_fields.RECONCILE_TICK_FAILED}=true" in metrics["reconcile_failed_ticks"]["filter"]
    duration = tf.resource("google_logging_metric", "reconcile_duration")
    assert duration["value_extractor"] == f"EXTRACT(jsonPayload.{monitoring_fields.RECONCILE_DURATION})"
    # Only the functions' own lines are counted.
    for name in ("counter", "reconcile_duration"):
        assert tf.resource("google_logging_metric", name)["filter"].startswith("${local.function_log_filter} AND ")


def test_every_alert_notifies_the_channels_and_says_what_to_do(tf):
    """Guards issue 15 item 3: each alert the issue lists exists, notifies var.notification_channels, and its
    documentation links to an entry of the page runbook_url names by default (docs/operations.md, "Alerts",
    since issue 44 moved README's reference into docs/) that exists."""
    policies = tf.of_kind("google_monitoring_alert_policy")
    assert set(policies) == set(ALERTS)
    runbook = REPO_ROOT / tf.variables["runbook_url"]["default"]
    assert runbook.is_file(), f"runbook_url's default {runbook} is no page of this repository"
    entries = anchors(runbook)
    for name, policy in policies.items():
        assert policy["notification_channels"] == "${var.notification_channels}", name
        documentation = block(policy, "documentation")
        assert documentation["mime_type"] == "text/markdown"
        assert f"${{var.runbook_url}}#${{local.alert_runbook.{name}}}" in documentation["content"], name
        assert tf.locals["alert_runbook"][name] in entries, f"{runbook.name} has no heading for {name}'s runbook"
        for condition in policy["conditions"]:
            threshold = block(condition, "condition_threshold")
            assert "resource.type=" in threshold["filter"] or "function_metric_filter" in threshold["filter"]


def test_alert_filters_read_only_metrics_that_exist(tf):
    """Guards issue 15 item 3: an alert on a metric nobody writes would never fire."""
    for name, policy in tf.of_kind("google_monitoring_alert_policy").items():
        filters = []
        for condition in policy["conditions"]:
            threshold = block(condition, "condition_threshold")
            filters += [threshold["filter"], threshold.get("denominator_filter", "")]
        for metric in _metric_types(filters):
            if metric.startswith("logging.googleapis.com/user/"):
                assert re.fullmatch(r"logging\.googleapis\.com/user/\$\{google_logging_metric\.[^}]+\.name\}", metric)
            else:
                assert metric in GOOGLE_METRICS, f"{name}: {metric}"


def test_alerts_on_log_based_metrics_wait_until_monitoring_knows_the_metrics(tf):
    """Guards issue 25 point 1: Monitoring refuses a policy on a log-based metric created in the same apply
    ("it could take up to 10 minutes to become available", terraform-provider-google#11102), so the first apply
    failed. Every policy whose filter reads a user metric depends on a wait of 10 minutes, and the wait is keyed
    on every log-based metric (created after them, and again only when they change)."""
    wait = tf.resource("time_sleep", "log_metrics_known_to_monitoring")
    assert wait["create_duration"] == "10m"
    keyed_on = wait["triggers"]["metrics"]
    metrics = tf.of_kind("google_logging_metric")
    assert metrics and all(f"google_logging_metric.{name}" in keyed_on for name in metrics)
    on_user_metrics = {
        name
        for name, policy in tf.of_kind("google_monitoring_alert_policy").items()
        if "logging.googleapis.com/user/" in json.dumps(policy["conditions"])
    }
    assert on_user_metrics == {"failures", "stuck", "reconcile"}
    waiting = {
        name
        for name, policy in tf.of_kind("google_monitoring_alert_policy").items()
        if "${time_sleep.log_metrics_known_to_monitoring}" in policy.get("depends_on", [])
    }
    assert on_user_metrics <= waiting
