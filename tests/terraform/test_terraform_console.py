"""The web console in the cloud (issue 45, point 3), read off the HCL: off unless enabled, behind IAP with no other way
in, running as an account that can only read, and told the audience and the access settings the app verifies with."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tfconfig import TERRAFORM_DIR, block, dynamic_block, strings

from trainctl.console import identity

CONSOLE_ACCOUNT = "${google_service_account.console[0].member}"


def _console_resources(tf) -> dict[str, dict]:
    return {
        f"{kind}.{name}": body
        for entry in tf.files["console.tf"].get("resource", [])
        for kind, named in entry.items()
        for name, body in named.items()
    }


def test_the_console_is_off_unless_the_variable_enables_it(tf):
    variable = tf.variables["console"]
    assert variable["default"] == {} and "enabled = optional(bool, false)" in variable["type"]
    assert tf.locals["console_enabled"] == "${var.console.enabled}"
    resources = _console_resources(tf)
    assert len(resources) >= 9
    gated = {
        name: body.get("count", body.get("for_each"))
        for name, body in resources.items()
        if "local.console_enabled" in str(body.get("count", body.get("for_each")))
        or body.get("for_each") == "${local.console_members}"
    }
    assert set(gated) == set(resources)
    # The members IAP lets through are none at all while the console is off.
    assert tf.locals["console_members"].startswith("${local.console_enabled ? ")
    assert tf.locals["console_members"].endswith(": toset([])}")


def test_the_service_is_behind_iap_and_only_iap_may_invoke_it(tf):
    service = tf.resource("google_cloud_run_v2_service", "console")
    assert service["provider"] == "google-beta"
    assert service["iap_enabled"] is True
    assert service["ingress"] == "INGRESS_TRAFFIC_ALL"  # IAP guards every path, run.app included
    assert "invoker_iam_disabled" not in service  # Cloud Run's own IAM check stays on behind IAP
    invokers = {
        name: body
        for (kind, name), body in tf.resources.items()
        if kind.startswith("google_cloud_run") and kind.endswith("_iam_member") and "console" in str(body)
    }
    assert list(invokers) == ["iap_invokes_console"]
    invoker = invokers["iap_invokes_console"]
    assert invoker["role"] == "roles/run.invoker"
    assert invoker["member"] == (
        "serviceAccount:service-${data.google_project.this.number}@gcp-sa-iap.iam.gserviceaccount.com"
    )
    assert not [text for text in strings(tf.files["console.tf"]) if "allUsers" in text or "allAuthenticated" in text]


def test_iap_lets_through_only_the_consoles_members_as_accessors(tf):
    grant = tf.resource("google_iap_web_cloud_run_service_iam_member", "console_viewer")
    assert grant["for_each"] == "${local.console_members}"
    assert (grant["role"], grant["member"]) == ("roles/iap.httpsResourceAccessor", "${each.value}")
    assert grant["cloud_run_service_name"] == "${google_cloud_run_v2_service.console[0].name}"


def test_the_console_account_holds_read_roles_only(tf):
    held = {
        (kind, body["role"], body.get("bucket") or body.get("subscription") or body.get("project"))
        for (kind, _), body in tf.resources.items()
        if kind.endswith("_iam_member") and body.get("member") == CONSOLE_ACCOUNT
    }
    assert held == {
        ("google_storage_bucket_iam_member", "roles/storage.objectViewer", "${google_storage_bucket.control.name}"),
        ("google_storage_bucket_iam_member", "roles/storage.objectViewer", "${each.value}"),
        ("google_project_iam_member", "roles/aiplatform.viewer", "${var.project}"),
        ("google_project_iam_member", "roles/cloudquotas.viewer", "${var.project}"),
        (
            "google_pubsub_subscription_iam_member",
            "roles/pubsub.subscriber",
            "${google_pubsub_subscription.console[0].id}",
        ),
    }
    outputs = tf.resource("google_storage_bucket_iam_member", "console_reads_outputs")
    assert outputs["for_each"] == "${local.console_enabled ? toset(var.output_buckets) : toset([])}"
    # Nothing may act as the console's account, and the account acts as no other.
    assert not [
        name
        for name, body in tf.of_kind("google_service_account_iam_member").items()
        if "service_account.console" in str(body) or body.get("member") == CONSOLE_ACCOUNT
    ]
    service = tf.resource("google_cloud_run_v2_service", "console")
    assert block(service, "template")["service_account"] == "${google_service_account.console[0].email}"


def test_the_consoles_subscription_is_its_own_pull_subscription_pulled_by_one_instance(tf):
    subscription = tf.resource("google_pubsub_subscription", "console")
    assert subscription["topic"] == "${google_pubsub_topic.events.id}"
    assert not {"push_config", "bigquery_config", "cloud_storage_config", "filter"} & set(subscription)
    scaling = block(block(tf.resource("google_cloud_run_v2_service", "console"), "template"), "scaling")
    assert scaling["max_instance_count"] == 1  # instances sharing the subscription would split its events


def test_the_service_runs_the_console_with_the_controllers_settings_and_its_own(tf):
    template = block(tf.resource("google_cloud_run_v2_service", "console"), "template")
    container = block(template, "containers")
    assert container["command"] == ["trainctl", "console", "--host", "0.0.0.0", "--port", "8080"]
    assert block(container, "ports")["container_port"] == 8080
    env = dynamic_block(container, "env")
    assert env["for_each"] == "${local.console_env}"
    assert tf.locals["console_env"].startswith("${merge(local.controller_env, ")
    # Exactly the names the console reads (identity.py) and the events subscription the CLI's watch reads.
    assert set(tf.locals["console_settings"]) == {*identity.CONSOLE_ENV_NAMES, "TRAINCTL_EVENTS_SUBSCRIPTION"}


def test_the_audience_is_the_one_iap_signs_and_the_viewer_verifies(tf):
    assert tf.locals["console_name"] == "${var.name_prefix}-console"
    rendered = (
        tf.locals["console_audience"]
        .replace("${data.google_project.this.number}", "123456789")
        .replace("${var.region}", "europe-west4")
        .replace("${local.console_name}", "trainctl-console")
    )
    assert rendered == identity.cloud_run_audience("123456789", "europe-west4", "trainctl-console")
    assert tf.locals["console_settings"]["TRAINCTL_CONSOLE_IAP_AUDIENCE"] == "${local.console_audience}"


# ---- the variable and the members, evaluated by terraform console ---------------------------------------------------


def _console(tmp_path: Path, tf, console: dict, teams: dict | None, expression: str) -> object:
    shutil.copy(TERRAFORM_DIR / "variables.tf", tmp_path)
    names = ["teams", "console_enabled", "console_watchers", "console_members"]
    lines = [f'  {name} = "{tf.locals[name]}"' for name in names]
    (tmp_path / "eval.tf").write_text("locals {\n" + "\n".join(lines) + "\n}\n")
    run = subprocess.run(
        ["terraform", "console", "-no-color", "-var=project=proj-1", f"-var=console={json.dumps(console)}"]
        + ([f"-var=teams={json.dumps(teams)}"] if teams is not None else []),
        input=f"jsonencode({expression})\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    printed = run.stdout.strip()
    if not printed.startswith('"'):
        raise AssertionError(" ".join(run.stderr.split()))
    return json.loads(json.loads(printed))


TEAMS = {
    "default_team": "vision",
    "teams": {
        "vision": {"watchers": {"ana": "user:ana@example.com", "leads": "group:vision-leads@example.com"}},
        "speech": {"watchers": {"lab": "domain:speech-lab.example"}},
    },
}


def test_iap_lets_through_admins_viewers_and_watchers_but_not_groups(tmp_path, tf):
    console = {
        "enabled": True,
        "admins": ["user:oncall@example.com"],
        "viewers": {"user:lead@example.com": ["vision", "speech"]},
    }
    members = _console(tmp_path, tf, console, TEAMS, "local.console_members")
    assert sorted(members) == [
        "domain:speech-lab.example",
        "user:ana@example.com",
        "user:lead@example.com",
        "user:oncall@example.com",
    ]
    assert _console(tmp_path, tf, {"admins": ["user:oncall@example.com"]}, TEAMS, "local.console_members") == []


@pytest.mark.parametrize(
    ("console", "refusal"),
    [
        ({"admins": ["group:oncall@example.com"]}, "a group: member cannot be resolved"),
        ({"viewers": {"group:leads@example.com": ["vision"]}}, "a group: member cannot be resolved"),
        ({"admins": ["oncall@example.com"]}, "must be user:EMAIL"),
        ({"viewers": {"user:lead@example.com": ["audio"]}}, "must be teams of var.teams"),
    ],
)
def test_the_variable_refuses_what_the_console_could_not_honour(tmp_path, tf, console, refusal):
    with pytest.raises(AssertionError) as refused:
        _console(tmp_path, tf, console, TEAMS, "var.console")
    assert refusal in re.sub(r"\s+", " ", str(refused.value))


def test_without_teams_a_viewer_is_granted_the_one_team_default(tmp_path, tf):
    console = {"enabled": True, "viewers": {"user:ana@example.com": ["default"]}}
    assert _console(tmp_path, tf, console, None, "local.console_members") == ["user:ana@example.com"]


def test_the_console_address_is_an_output(tf):
    assert tf.outputs["console_url"]["value"] == (
        "${local.console_enabled ? google_cloud_run_v2_service.console[0].uri : null}"
    )


# ---- the image the service runs -------------------------------------------------------------------------------------

REPO = TERRAFORM_DIR.parent
DOCKERFILE = REPO / "trainctl" / "console" / "Dockerfile"


def test_the_console_image_passes_hadolint():
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_starts_the_console_as_the_service_does(tf):
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", DOCKERFILE.read_text(), re.M)
    assert entrypoint, "the Dockerfile names no ENTRYPOINT"
    container = block(block(tf.resource("google_cloud_run_v2_service", "console"), "template"), "containers")
    assert json.loads(entrypoint[1]) == container["command"]
    assert re.search(r"^USER 65534$", DOCKERFILE.read_text(), re.M)  # read-only: it runs as nobody


def test_the_images_copy_of_the_repository_imports_the_console(tmp_path):
    """What the COPY lines put in /app is enough for `trainctl console` and the cloud viewer: each module imports
    from the copy alone (a package the console needs and the image leaves out fails here, not on Cloud Run)."""
    app = tmp_path / "app"
    for source, target in re.findall(r"^COPY (\S+(?: \S+)*) (\S+)$", DOCKERFILE.read_text(), re.M):
        for item in source.split():
            destination = app / target / item if target.endswith("/") and not item.endswith("/") else app / target
            if (REPO / item).is_dir():
                shutil.copytree(
                    REPO / item, destination, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True
                )
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / item, destination)
    script = (
        "import sys, trainctl.cli, trainctl.console.app, trainctl.console.identity\n"
        "print(trainctl.console.app.__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=app, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(app))
