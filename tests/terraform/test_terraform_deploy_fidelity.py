"""What a first `terraform apply` on a fresh project, and a `terraform destroy`, need from the configuration."""

from __future__ import annotations

import re
import subprocess

import pytest
from tfconfig import TERRAFORM_DIR, block

ENABLED = "${google_project_service.enabled}"


def test_cloud_resource_manager_is_enabled_before_what_calls_it(tf):
    """Guards issue 12 point 12: the project data source, project IAM members and log sinks call Cloud
    Resource Manager, which many projects have off."""
    services = tf.resource("google_project_service", "enabled")["for_each"]
    assert "cloudresourcemanager.googleapis.com" in services
    (project,) = [d["google_project"]["this"] for d in tf.files["services.tf"]["data"] if "google_project" in d]
    assert ENABLED in project["depends_on"]
    callers = {
        **{f"google_project_iam_member.{n}": b for n, b in tf.of_kind("google_project_iam_member").items()},
        **{f"google_logging_project_sink.{n}": b for n, b in tf.of_kind("google_logging_project_sink").items()},
        **{
            f"google_logging_project_bucket_config.{n}": b
            for n, b in tf.of_kind("google_logging_project_bucket_config").items()
        },
    }
    assert len(callers) >= 8
    assert [name for name, body in callers.items() if ENABLED not in body.get("depends_on", [])] == []


def _condition_matches(expression: str, resource_name: str, bucket: str) -> bool:
    """Evaluate the two CEL forms the build's condition uses (== and startsWith) for one resource name."""
    expression = expression.replace("${local.staged_source_bucket}", bucket)
    results = []
    for clause in expression.split("||"):
        clause = clause.strip()
        if match := re.fullmatch(r'resource\.name == "([^"]*)"', clause):
            results.append(resource_name == match[1])
        elif match := re.fullmatch(r'resource\.name\.startsWith\("([^"]*)"\)', clause):
            results.append(resource_name.startswith(match[1]))
        else:
            raise AssertionError(f"unexpected clause {clause!r}")
    return any(results)


@pytest.mark.parametrize(
    ("resource_name", "allowed"),
    [
        ("projects/_/buckets/gcf-v2-sources-123-us-central1", True),  # listing the bucket
        ("projects/_/buckets/gcf-v2-sources-123-us-central1/objects/fn/source.zip", True),
        ("projects/_/buckets/gcf-v2-sources-123-us-central1-other", False),
        ("projects/_/buckets/gcf-v2-sources-123-us-central1-other/objects/x", False),
        ("projects/_/buckets/someone-elses-bucket/objects/x", False),
    ],
)
def test_build_account_reads_the_staged_source_bucket_and_its_objects_only(tf, resource_name, allowed):
    """Guards issue 12 point 13: in IAM conditions a bucket is projects/_/buckets/B and an object
    projects/_/buckets/B/objects/O; a prefix ending in '/' matched the objects but not the bucket."""
    grant = tf.resource("google_project_iam_member", "build_reads_staged_source")
    expression = block(grant, "condition")["expression"]
    bucket = "projects/_/buckets/gcf-v2-sources-123-us-central1"
    assert _condition_matches(expression, resource_name, bucket) is allowed


def test_the_functions_wait_for_eventarc_and_build_grants_to_propagate(tf):
    """Guards issue 12 point 13: on a fresh project Eventarc's service agent appears when its API is enabled
    and may refuse the first trigger until it has propagated; the wait starts after that and the grants."""
    wait = tf.resource("time_sleep", "grants_propagate")
    assert {
        ENABLED,
        "${google_project_iam_member.eventarc_receives_events}",
        "${google_project_iam_member.build_reads_staged_source}",
    } <= set(wait["depends_on"])
    function = tf.resource("google_cloudfunctions2_function", "function")
    assert "${time_sleep.grants_propagate}" in function["depends_on"]


def test_force_destroy_is_a_variable_of_every_bucket(tf):
    """Guards issue 12 point 15: versioned buckets keep old versions, so destroy needs force_destroy to pass."""
    assert tf.variables["force_destroy"]["default"] is False
    buckets = tf.of_kind("google_storage_bucket")
    assert {name: body.get("force_destroy") for name, body in buckets.items()} == dict.fromkeys(
        buckets, "${var.force_destroy}"
    )


# --- the deploy guide (terraform/README.md) --------------------------------------------------------------


def _guide_commands() -> list[str]:
    text = (TERRAFORM_DIR / "README.md").read_text()
    (script,) = re.findall(r"```sh\n(export PROJECT=.*?)```", text, flags=re.S)
    return [line.split("#")[0].strip() for line in script.splitlines() if line.split("#")[0].strip()]


def _index(commands: list[str], start: str) -> int:
    (index,) = [i for i, command in enumerate(commands) if command.startswith(start)]
    return index


def test_guide_logs_in_and_sets_the_adc_quota_project_before_using_them():
    """Guards issue 12 points 12 and 15: configure-docker needs gcloud's own login; ADC needs a quota project."""
    commands = _guide_commands()
    assert _index(commands, "gcloud auth login") < _index(commands, "gcloud auth configure-docker")
    assert _index(commands, "gcloud auth application-default set-quota-project $PROJECT") < _index(
        commands, "terraform -chdir=terraform init"
    )


def test_guide_builds_for_amd64_and_pins_this_repositorys_digest():
    """Guards issue 12 point 15: an image built on an Arm laptop would not start on Vertex's x86-64 machines, and
    RepoDigests lists one digest per repository the image was pushed to."""
    commands = _guide_commands()
    (build,) = [c for c in commands if c.startswith("docker build")]
    assert "--platform linux/amd64" in build
    (digest,) = [c for c in commands if c.startswith("IMAGE=")]
    assert "RepoDigests" in digest and 'grep "^$REPO/trainer@"' in digest


def test_guide_tfvars_steps_can_be_rerun_and_stay_out_of_git():
    """Guards issue 12 point 15: rerunning the guide must not add a second trainer_image line, and the
    deployment's own inputs are never committed."""
    writes = [c for c in _guide_commands() if "tfvars" in c and (">" in c)]
    assert writes and all(">>" not in c for c in writes)
    ignored = subprocess.run(
        ["git", "check-ignore", "terraform/terraform.tfvars", "terraform/trainer_image.auto.tfvars"],
        cwd=TERRAFORM_DIR.parent,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == ["terraform/terraform.tfvars", "terraform/trainer_image.auto.tfvars"]


def test_guide_says_how_to_tear_down_and_when_the_log_bucket_name_is_free_again():
    """Guards issue 12 points 13 and 15: re-run apply after a propagation failure; force_destroy; the deleted
    log bucket's 7 days."""
    text = " ".join((TERRAFORM_DIR / "README.md").read_text().split())
    assert "run `terraform -chdir=terraform apply` again" in text
    assert "set `force_destroy = true`" in text
    assert "keeps a deleted log bucket for 7 days" in text


def _kinds(tf, block_kind: str) -> set[str]:
    return {kind for text in tf.files.values() for entry in text.get(block_kind, []) for kind in entry}


def test_the_deploy_guide_names_a_role_for_every_resource_type(tf):
    """Guards issue 25 point 4: the roles a non-Owner needs to apply listed neither BigQuery nor Monitoring.
    The guide's table now names every resource and data type of terraform/*.tf, each with a predefined role."""
    guide = (TERRAFORM_DIR / "README.md").read_text()
    rows = re.findall(r"^\| (`[^|]*`[^|]*) \| ([^|]+) \|$", guide, flags=re.M)
    listed: dict[str, str] = {}
    for types, role in rows:
        for data, kind in re.findall(r"(data )?`([a-z0-9_]+)`", types):
            listed[("data " if data else "") + kind] = role
    needed = _kinds(tf, "resource") | {f"data {kind}" for kind in _kinds(tf, "data")}
    assert len(needed) > 25
    assert sorted(needed - set(listed)) == []
    local_only = {"time_sleep", "data archive_file"}
    assert {kind for kind, role in listed.items() if "roles/" not in role} == local_only
