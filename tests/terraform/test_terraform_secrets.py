"""Secrets by reference in Terraform (issue 40, point 7): secretAccessor on each listed secret for the one account
its team's code runs as, nothing project-wide; the launcher package readable by the job accounts; the controller told
the same list."""

from __future__ import annotations

import shutil

import pytest
from test_terraform_iam import _variable_errors, condition_allows
from tfconfig import block

from functions.jobs import secret_env

ACCESSOR = "roles/secretmanager.secretAccessor"


def test_secret_access_is_granted_on_each_listed_secret_to_its_teams_account_and_nowhere_else(tf):
    """Guards the grant: only secret-level members, each for one (team, secret) of job_secrets, the default team's to
    the custom images' account and every other team's to its own; no project, folder or bucket gets the role."""
    custom = tf.resource("google_secret_manager_secret_iam_member", "custom_reads_secret")
    team = tf.resource("google_secret_manager_secret_iam_member", "team_custom_reads_secret")
    assert (custom["role"], custom["member"]) == (ACCESSOR, "${google_service_account.custom.member}")
    assert (team["role"], team["member"]) == (ACCESSOR, "${google_service_account.team_custom[each.value.team].member}")
    assert custom["secret_id"] == team["secret_id"] == "${each.value.secret}"
    assert custom["for_each"] == "${local.custom_secret_grants}"
    assert team["for_each"] == "${local.team_custom_secret_grants}"
    assert "!contains(keys(local.own_code_teams), pair.team)" in tf.locals["custom_secret_grants"]
    assert "contains(keys(local.own_code_teams), pair.team)" in tf.locals["team_custom_secret_grants"]
    holders = [
        f"{kind}.{name}"
        for (kind, name), body in tf.resources.items()
        if kind.endswith("_iam_member") and "secretmanager" in str(body.get("role", ""))
    ]
    assert sorted(holders) == [
        "google_secret_manager_secret_iam_member.custom_reads_secret",
        "google_secret_manager_secret_iam_member.team_custom_reads_secret",
    ]


def test_the_controller_is_told_the_same_list_it_checks_admission_against(tf):
    setting = tf.locals["controller_settings"]["TRAINCTL_JOB_SECRETS"]
    assert setting == '${length(var.job_secrets) > 0 ? jsonencode(var.job_secrets) : ""}'
    assert tf.variables["job_secrets"]["default"] == {}


@pytest.mark.parametrize(
    ("obj", "list_prefix", "allowed"),
    [
        (secret_env.launcher_object("ctl")[1], None, True),
        (None, "launchers/", True),
        ("ledger/abc.json", None, False),
        ("launchers-evil/x.tar.gz", None, False),
        ("custom-runs/r1/model/metrics.json", None, False),
        (None, "", False),
    ],
)
def test_the_job_accounts_read_the_launcher_package_and_nothing_else_of_the_control_bucket_by_it(
    tf, obj, list_prefix, allowed
):
    assert tf.locals["launchers_prefix"] == secret_env.LAUNCHERS_PREFIX
    for grant in ("custom_reads_launchers", "team_custom_reads_launchers"):
        body = tf.resource("google_storage_bucket_iam_member", grant)
        assert body["role"] == "roles/storage.objectViewer"
        assert block(body, "condition")["expression"] == "${local.launcher_read_condition}"
    expression = tf.locals["launcher_read_condition"].replace("${local.launchers_prefix}", "launchers/")
    assert condition_allows(tf, expression, obj, list_prefix) is allowed


def test_no_job_account_may_write_the_launcher_package(tf):
    """Only the controller writes launchers/: a job that could replace it would run its code in every other
    package job with secret_env."""
    writers = [
        name
        for (kind, name), body in tf.resources.items()
        if kind == "google_storage_bucket_iam_member"
        and body.get("bucket") == "${google_storage_bucket.control.name}"
        and body.get("role") != "roles/storage.objectViewer"
        and not name.startswith("function_")
    ]
    assert writers
    for name in writers:
        expression = block(tf.resource("google_storage_bucket_iam_member", name), "condition")["expression"]
        assert not condition_allows(tf, expression, secret_env.launcher_object("ctl")[1], **{"each.key": "red"}), name


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")
@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"job_secrets": {"default": ["projects/my-project/secrets/wandb-key"]}}, None),
        ({"job_secrets": {"default": ["projects/123456789012/secrets/k_1"]}}, None),
        ({"job_secrets": {"default": ["projects/my-project/secrets/k/versions/1"]}}, "no version"),
        ({"job_secrets": {"default": ["projects/*/secrets/k"]}}, "secret's resource name"),
        ({"job_secrets": {"red": ["projects/my-project/secrets/k"]}}, "must be a team of var.teams"),
        (
            {
                "job_secrets": {"red": ["projects/my-project/secrets/k"]},
                "teams": {"default_team": "blue", "teams": {"blue": {}, "red": {}}},
            },
            None,
        ),
        (
            {
                "job_secrets": {"default": ["projects/my-project/secrets/k"]},
                "teams": {"default_team": "blue", "teams": {"blue": {}}},
            },
            "must be a team of var.teams",
        ),
    ],
)
def test_job_secrets_names_secrets_and_teams(tmp_path, values, problem):
    errors = _variable_errors(tmp_path, project="proj-1", **values)
    if problem is None:
        assert errors == ""
    else:
        assert "job_secrets" in errors and problem in " ".join(errors.split())
