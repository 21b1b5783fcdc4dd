"""How events reach the functions: ingress, triggers, retries, dead letters, the sweep, the sink."""

from __future__ import annotations

import re

from tfconfig import TERRAFORM_DIR, block, dynamic_block

import functions.main
from bench.function_tiers import VCPU_OF_MEMORY

FUNCTIONS = set(functions.main.__all__)


def test_the_four_entry_points_are_deployed_by_one_resource(tf):
    assert set(tf.locals["functions"]) == FUNCTIONS
    assert list(tf.of_kind("google_cloudfunctions2_function")) == ["function"]
    assert tf.of_kind("google_cloudfunctions_function") == {}


def test_every_function_has_internal_ingress(tf):
    service = block(tf.resource("google_cloudfunctions2_function", "function"), "service_config")
    assert service["ingress_settings"] == "ALLOW_INTERNAL_ONLY"


def function_memory_defaults(tf) -> dict[str, str]:
    """The per-function defaults of var.function_memory: optional(string, "<size>") attributes of its type."""
    return dict(re.findall(r'(\w+) = optional\(string, "([^"]+)"\)', tf.variables["function_memory"]["type"]))


def test_each_function_gets_a_documented_memory_tier_and_the_submitters_one_that_meets_the_cold_goal(tf):
    """Guards issue 12 point 14: 256 MiB is 0.167 vCPU; the tier of the functions that submit comes from the
    CPU seconds bench/cold_start.py measured (bench/RESULTS.md), the others from the documented table."""
    service = block(tf.resource("google_cloudfunctions2_function", "function"), "service_config")
    assert service["available_memory"] == "${var.function_memory[each.key]}"
    assert "available_cpu" not in service  # the tier's documented vCPU, not a combination to validate
    defaults = function_memory_defaults(tf)
    assert set(defaults) == set(tf.locals["functions"])
    assert set(defaults.values()) <= set(VCPU_OF_MEMORY)
    results = (TERRAFORM_DIR.parent / "bench" / "RESULTS.md").read_text()
    chosen = re.findall(r"\| \(c\) submitting marker: smallest tier within the goal \| (\S+) \|", results)
    assert chosen, "bench/RESULTS.md records no tier for the cold submission: run bench/cold_start.py"
    for submitter in ("on_dataset_upload", "on_job_request"):
        assert VCPU_OF_MEMORY[defaults[submitter]] >= VCPU_OF_MEMORY[chosen[-1]]


def test_storage_trigger_watches_the_data_bucket_and_retries(tf):
    """Issue 40, point 6: the data bucket's notifications go to a topic of this configuration (so the Cloud Storage
    agent publishes there alone), whose Eventarc trigger calls on_dataset_upload and retries."""
    trigger = tf.locals["functions"]["on_dataset_upload"]["trigger"]
    assert trigger["event_type"] == "google.cloud.pubsub.topic.v1.messagePublished"
    assert (trigger["pubsub_topic"], trigger["bucket"]) == ("${google_pubsub_topic.data_uploads.id}", None)
    notification = tf.resource("google_storage_notification", "data_uploads")
    assert notification["bucket"] == "${google_storage_bucket.data.name}"
    assert notification["topic"] == "${google_pubsub_topic.data_uploads.id}"
    # The handler reads the object resource from the message (functions/handlers.py _uploaded_object).
    assert (notification["payload_format"], notification["event_types"]) == ("JSON_API_V1", ["OBJECT_FINALIZE"])
    assert notification["depends_on"] == ["${google_pubsub_topic_iam_member.gcs_agent_publishes_uploads}"]

    event_trigger = dynamic_block(tf.resource("google_cloudfunctions2_function", "function"), "event_trigger")
    assert event_trigger["for_each"] == "${each.value.trigger == null ? [] : [each.value.trigger]}"
    content = event_trigger["content"]
    assert content["event_type"] == "${event_trigger.value.event_type}"
    assert content["retry_policy"] == "RETRY_POLICY_RETRY"
    assert content["service_account_email"] == "${google_service_account.eventarc.email}"
    assert content["trigger_region"] == "${var.region}"
    assert tf.resource("google_storage_bucket", "data")["location"] == "${var.region}"
    bucket_filter = dynamic_block(content, "event_filters")
    assert bucket_filter["for_each"] == "${event_trigger.value.bucket == null ? [] : [event_trigger.value.bucket]}"
    assert bucket_filter["content"] == {"attribute": "bucket", "value": "${event_filters.value}"}


def test_job_state_function_is_fed_by_the_job_state_topic(tf):
    trigger = tf.locals["functions"]["on_job_state"]["trigger"]
    assert trigger["event_type"] == "google.cloud.pubsub.topic.v1.messagePublished"
    assert trigger["pubsub_topic"] == "${google_pubsub_topic.job_state.id}"


def test_requests_and_sweeps_do_not_come_through_eventarc(tf):
    # A second, Eventarc, subscription would deliver every request twice and without a dead-letter topic.
    functions = tf.locals["functions"]
    assert functions["on_job_request"]["trigger"] is None
    assert functions["reconcile"]["trigger"] is None


def test_requests_subscription_has_a_dead_letter_policy(tf):
    subscription = tf.resource("google_pubsub_subscription", "on_job_request")
    assert subscription["topic"] == "${each.value.topic}"
    assert tf.locals["shared_requests"]["topic"] == "${google_pubsub_topic.requests.id}"
    dead_letter = block(subscription, "dead_letter_policy")
    assert dead_letter["dead_letter_topic"] == "${google_pubsub_topic.dead_letter.id}"
    assert dead_letter["max_delivery_attempts"] == "${var.request_max_delivery_attempts}"
    assert set(block(subscription, "retry_policy")) == {"minimum_backoff", "maximum_backoff"}
    assert block(subscription, "expiration_policy")["ttl"] == ""


def test_requests_are_pushed_to_on_job_request_with_an_oidc_token(tf):
    push = block(tf.resource("google_pubsub_subscription", "on_job_request"), "push_config")
    uri = '${google_cloudfunctions2_function.function["on_job_request"].service_config[0].uri}'
    assert push["push_endpoint"] == uri[:-1] + "}/${each.value.topic}"
    token = block(push, "oidc_token")
    assert token == {"service_account_email": "${google_service_account.push.email}", "audience": uri}


def test_the_shared_topic_and_every_teams_topic_are_delivered_by_one_subscription_resource(tf):
    """Issue 39: the teams' push subscriptions were a second copy of the shared one's (teams.tf beside triggers.tf);
    one resource now delivers every requests topic, so that their deadline, retries and dead letters cannot drift."""
    subscription = tf.resource("google_pubsub_subscription", "on_job_request")
    assert subscription["for_each"] == "${local.request_topics}"
    assert tf.locals["request_topics"] == '${merge({"(shared)" = local.shared_requests}, local.team_requests)}'
    assert "for name, topic in google_pubsub_topic.team_requests" in tf.locals["team_requests"]
    assert (subscription["name"], subscription["labels"]) == ("${each.value.subscription}", "${each.value.labels}")
    to_requests = [n for n, body in tf.of_kind("google_pubsub_subscription").items() if "on_job_request" in str(body)]
    assert to_requests == ["on_job_request"]


def test_dead_letters_wait_in_a_pull_subscription_that_never_expires(tf):
    subscription = tf.resource("google_pubsub_subscription", "dead_letter")
    assert subscription["topic"] == "${google_pubsub_topic.dead_letter.id}"
    assert "push_config" not in subscription
    assert block(subscription, "expiration_policy")["ttl"] == ""


def test_scheduler_calls_reconcile_with_an_oidc_token(tf):
    job = tf.resource("google_cloud_scheduler_job", "reconcile")
    assert job["schedule"] == "${var.reconcile_schedule}"
    target = block(job, "http_target")
    uri = '${google_cloudfunctions2_function.function["reconcile"].service_config[0].uri}'
    assert target["uri"] == uri
    assert block(target, "oidc_token") == {
        "service_account_email": "${google_service_account.scheduler.email}",
        "audience": uri,
    }
    assert tf.variables["reconcile_schedule"]["default"] == "*/5 * * * *"


def test_job_state_sink_routes_vertex_service_lines_to_the_job_state_topic(tf):
    """Guards issue 12 point 9: the sink's filter is the one file's text, and that text uses only the
    documented ml_job fields, not the undocumented ml.googleapis.com/job_state label."""
    sink = tf.resource("google_logging_project_sink", "job_state")
    assert sink["destination"] == "pubsub.googleapis.com/${google_pubsub_topic.job_state.id}"
    assert sink["filter"] == "${local.job_state_log_filter}"
    assert tf.locals["job_state_log_filter"] == '${trimspace(file("${path.module}/job_state_log_filter.txt"))}'
    text = (TERRAFORM_DIR / "job_state_log_filter.txt").read_text().strip()
    assert text == 'resource.type="ml_job" AND resource.labels.task_name="service"'
    assert "job_state" not in text


def test_the_deploy_guide_quotes_the_sink_filter_that_is_deployed(tf):
    """Guards issue 25 point 6: terraform/README.md showed an older filter (the undocumented
    ml.googleapis.com/job_state label) after the deployed one had changed; it quotes the file now, and this
    keeps the two equal."""
    deployed = (TERRAFORM_DIR / "job_state_log_filter.txt").read_text().strip()
    guide = (TERRAFORM_DIR / "README.md").read_text()
    quoted = re.findall(r"```\n(resource\.type=[^\n]*)\n```", guide)
    assert quoted == [deployed]
    assert "ml.googleapis.com/job_state" not in guide
