"""Issue 42's retrain topic in Terraform (terraform/retrain.tf): a Cloud Scheduler job per rule with an inline
policy.schedule, publishing the data the controller reads as that rule's tick; a Pub/Sub notification channel that
Monitoring may publish to; on_retrain's Eventarc trigger on the topic. Expressions are evaluated by `terraform console`
(no provider), as the configuration writes them."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tfconfig import TERRAFORM_DIR, block

from functions.intake.rule_triggers import Tick, read_message
from functions.settings import Settings

RULES = {
    "gs://data/churn/": {
        "model": {"name": "churn"},
        "policy": {"schedule": {"cron": "0 2 * * *", "time_zone": "Europe/Paris"}},
    },
    "gs://data/fraud/": {"policy": {"schedule": {"cron": "*/30 * * * MON-FRI"}}},
    "gs://data/plain/": {"trainer": {"builtin": "tabular"}},
    "gs://data/elsewhere/": "gs://control/templates/elsewhere.yaml",
}


def console(tmp_path: Path, rules: Any, expressions: dict[str, str]) -> dict[str, Any]:
    """The values of `expressions` with var.trigger_rules = `rules` (its validations run)."""
    shutil.copy(TERRAFORM_DIR / "variables.tf", tmp_path)
    lines = [f"  probe_{key} = {text}" for key, text in expressions.items()]
    (tmp_path / "eval.tf").write_text("locals {\n" + "\n".join(lines) + "\n}\n")
    probe = "jsonencode({" + ", ".join(f"{key} = local.probe_{key}" for key in expressions) + "})"
    run = subprocess.run(
        ["terraform", "console", "-no-color", "-var=project=proj-1", f"-var=trigger_rules={json.dumps(rules)}"],
        input=f"{probe}\n", cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    printed = run.stdout.strip()
    if not printed.startswith('"'):
        raise AssertionError(" ".join(run.stderr.split()))
    return json.loads(json.loads(printed))


def expression(value: str) -> str:
    assert value.startswith("${") and value.endswith("}")
    return value[2:-1]


def test_each_rule_with_an_inline_schedule_gets_one_scheduler_job_publishing_its_tick(tf, tmp_path):
    job = tf.resource("google_cloud_scheduler_job", "rule_schedule")
    assert job["for_each"] == "${local.rule_schedules}"
    assert job["schedule"] == "${each.value.cron}"
    assert job["time_zone"] == '${try(each.value.time_zone, "Etc/UTC")}'  # Cloud Scheduler's default zone
    target = block(job, "pubsub_target")
    assert target["topic_name"] == "${google_pubsub_topic.retrain.id}"
    data = expression(target["data"]).replace("each.key", "rule")
    schedules = expression(tf.locals["rule_schedules"])
    found = console(
        tmp_path, RULES, {"schedules": schedules, "data": f"{{for rule, s in {schedules} : rule => {data}}}"}
    )
    assert found["schedules"] == {
        "gs://data/churn/": {"cron": "0 2 * * *", "time_zone": "Europe/Paris"},
        "gs://data/fraud/": {"cron": "*/30 * * * MON-FRI"},
    }
    # What each job publishes is read by the controller as that rule's tick.
    settings = Settings("p", "control", "events", "image", trigger_rules=RULES)
    for rule, encoded in found["data"].items():
        assert read_message(base64.b64decode(encoded), settings) == Tick(rule)


@pytest.mark.parametrize(
    "schedule",
    [{"cron": "0 2 * *"}, {"cron": "0 2 * * * *"}, {"time_zone": "Etc/UTC"}, {"cron": "0 2 * * *", "time_zone": "a b"}],
)
def test_a_schedule_terraform_cannot_create_is_refused_at_plan(tmp_path, schedule):
    with pytest.raises(AssertionError, match=r"policy\.schedule must hold cron"):
        console(tmp_path, {"gs://data/x/": {"policy": {"schedule": schedule}}}, {"ok": "true"})


def test_the_notification_channel_publishes_to_the_retrain_topic_as_monitorings_agent(tf):
    channel = tf.resource("google_monitoring_notification_channel", "retrain")
    assert channel["type"] == "pubsub" and channel["labels"] == {"topic": "${google_pubsub_topic.retrain.id}"}
    grant = tf.resource("google_pubsub_topic_iam_member", "monitoring_publishes_retrain")
    assert grant["topic"] == "${google_pubsub_topic.retrain.id}" and grant["role"] == "roles/pubsub.publisher"
    assert grant["member"] == (
        "serviceAccount:service-${data.google_project.this.number}@gcp-sa-monitoring-notification.iam.gserviceaccount.com"
    )
    assert (
        tf.outputs["retrain_notification_channel"]["value"] == "${google_monitoring_notification_channel.retrain.name}"
    )


def test_on_retrain_is_triggered_by_the_retrain_topic_as_on_job_state_is_by_its_own(tf):
    functions = tf.locals["functions"]
    trigger, state = functions["on_retrain"]["trigger"], functions["on_job_state"]["trigger"]
    assert trigger == state | {"pubsub_topic": "${google_pubsub_topic.retrain.id}"}
    assert tf.resource("google_pubsub_topic", "retrain")["name"] == "${local.names.retrain_topic}"


def test_only_monitorings_agent_is_granted_publish_on_the_retrain_topic(tf):
    """Guards SECURITY 38: a message on the retrain topic starts a paid run, so Terraform grants publish there to
    Monitoring's notification agent alone (Cloud Scheduler's agent needs no grant), and publish nowhere project-wide."""
    grants = [
        name
        for kind in (
            "google_pubsub_topic_iam_member",
            "google_pubsub_topic_iam_binding",
            "google_pubsub_topic_iam_policy",
        )
        for name, body in tf.of_kind(kind).items()
        if "retrain" in str(body.get("topic", ""))
    ]
    assert grants == ["monitoring_publishes_retrain"]
    project_roles = [str(body.get("role")) for body in tf.of_kind("google_project_iam_member").values()]
    assert not [
        role for role in project_roles if role.startswith("roles/pubsub.") or role in ("roles/editor", "roles/owner")
    ]
