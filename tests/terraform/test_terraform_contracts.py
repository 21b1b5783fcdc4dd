"""Terraform against the Python side: settings names, resource names, entry points."""

from __future__ import annotations

import ast
import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from tfconfig import TERRAFORM_DIR, block

import functions.main
from functions.intake.marker_policy import DEFAULT_MAY_SET, MAY_SET_KEY
from functions.settings import Settings, env_names
from local.names import Names

REPO = TERRAFORM_DIR.parent

# Only the local stack points the controller at its own JobService; in the cloud the controller uses
# <region>-aiplatform.googleapis.com, so Terraform leaves this one unset; and tests shorten the outbox's grace
# and the claim wait, and scale down the pauses between retries, whose defaults are right in the cloud.
SET_ONLY_BY_THE_LOCAL_STACK = {
    "TRAINCTL_VERTEX_ENDPOINT",
    "TRAINCTL_QUOTAS_ENDPOINT",
    "TRAINCTL_MONITORING_ENDPOINT",
    "TRAINCTL_COMPUTE_ENDPOINT",
    "TRAINCTL_OUTBOX_GRACE",
    "TRAINCTL_CLAIM_WAIT",
    "TRAINCTL_RETRY_PAUSE_SCALE",
}

# Which resource carries which of local/names.py's names.
NAMED_RESOURCES = {
    ("google_storage_bucket", "data"): "data_bucket",
    ("google_storage_bucket", "control"): "control_bucket",
    ("google_pubsub_topic", "requests"): "requests_topic",
    ("google_pubsub_subscription", "on_job_request"): "requests_subscription",
    ("google_pubsub_topic", "events"): "events_topic",
    ("google_pubsub_topic", "job_state"): "job_state_topic",
    ("google_pubsub_topic", "dead_letter"): "dead_letter_topic",
    ("google_pubsub_subscription", "dead_letter"): "dead_letter_subscription",
    ("google_pubsub_topic", "retrain"): "retrain_topic",
}


def names_properties() -> list[str]:
    return [name for name, value in vars(Names).items() if isinstance(value, property)]


def render(template: str, variables: dict[str, str]) -> str:
    """Fill ${var.x} references; anything else left in the template fails the caller's comparison."""
    return re.sub(r"\$\{var\.(\w+)\}", lambda m: variables[m[1]], template)


# --- settings -----------------------------------------------------------------------------------------


def test_function_environment_is_exactly_the_settings_fields(tf):
    assert set(tf.locals["controller_settings"]) == set(env_names()) - SET_ONLY_BY_THE_LOCAL_STACK


def test_the_unset_setting_is_a_real_settings_field(tf):
    assert SET_ONLY_BY_THE_LOCAL_STACK <= set(env_names())
    assert not SET_ONLY_BY_THE_LOCAL_STACK & set(tf.locals["controller_settings"])


def test_every_function_gets_the_controller_environment(tf):
    function = tf.resource("google_cloudfunctions2_function", "function")
    assert function["for_each"] == "${local.functions}"
    assert block(function, "service_config")["environment_variables"] == "${local.controller_env}"
    # Only empty values are dropped, which Settings.from_env reads as unset anyway.
    assert (
        tf.locals["controller_env"]
        == '${{for name, value in local.controller_settings : name => value if value != ""}}'
    )


def test_required_settings_are_always_set(tf):
    settings = tf.locals["controller_settings"]
    required = {
        f"TRAINCTL_{f.name.upper()}" for f in fields(Settings) if f.default is MISSING and f.default_factory is MISSING
    }
    assert required == {
        "TRAINCTL_PROJECT",
        "TRAINCTL_CONTROL_BUCKET",
        "TRAINCTL_EVENTS_TOPIC",
        "TRAINCTL_TRAINER_IMAGE",
    }
    assert settings["TRAINCTL_PROJECT"] == "${var.project}"
    assert settings["TRAINCTL_CONTROL_BUCKET"] == "${google_storage_bucket.control.name}"
    assert settings["TRAINCTL_EVENTS_TOPIC"] == "${google_pubsub_topic.events.name}"
    assert settings["TRAINCTL_TRAINER_IMAGE"] == "${local.trainer_image}"


def test_trigger_rules_reach_the_controller_as_json(tf):
    assert tf.locals["controller_settings"]["TRAINCTL_TRIGGER_RULES"] == "${jsonencode(var.trigger_rules)}"


def test_trigger_rules_say_what_a_marker_may_override_as_the_controller_does(tf):
    """Issue 24, point 7: the variable documents a template's marker_may_set with the controller's own default,
    and checks the declaration's shape (the controller checks the names against the request schema)."""
    variable = tf.variables["trigger_rules"]
    assert f"{MAY_SET_KEY} lists" in variable["description"]
    assert f"(default: {', '.join(DEFAULT_MAY_SET)})" in variable["description"]
    assert any(MAY_SET_KEY in validation["condition"] for validation in variable["validation"])


# --- names ----------------------------------------------------------------------------------------------


def test_default_names_match_the_local_stack(tf):
    prefix = tf.variables["name_prefix"]["default"]
    assert prefix == Names("p").prefix
    expected = Names("my-project", prefix)
    defaults = tf.locals["default_names"]
    assert set(defaults) == set(names_properties())
    for key, template in defaults.items():
        assert render(template, {"project": "my-project", "name_prefix": prefix}) == getattr(expected, key), key


def test_bucket_name_overrides_default_to_the_shared_names(tf):
    assert tf.variables["data_bucket_name"]["default"] is None
    assert tf.variables["control_bucket_name"]["default"] is None
    assert tf.locals["names"] == (
        "${merge(local.default_names, {"
        "data_bucket = coalesce(var.data_bucket_name, local.default_names.data_bucket), "
        "control_bucket = coalesce(var.control_bucket_name, local.default_names.control_bucket)})}"
    )


@pytest.mark.parametrize(("kind", "name", "key"), [(*resource, key) for resource, key in NAMED_RESOURCES.items()])
def test_resource_is_named_as_the_local_stack_names_it(tf, kind, name, key):
    named = tf.resource(kind, name)["name"]
    if named == "${each.value.subscription}":  # one per requests topic: the shared topic's is the one named here
        named = tf.locals["shared_requests"]["subscription"]
    assert named == "${local.names." + key + "}"


def test_each_teams_requests_subscription_is_named_as_the_local_stack_names_it(tf):
    assert '"${var.name_prefix}-requests-${name}-push"' in tf.locals["team_requests"]
    assert Names("p", "pre").team_requests_subscription("red") == "pre-requests-red-push"


def test_every_shared_name_belongs_to_a_resource():
    assert sorted(NAMED_RESOURCES.values()) == sorted(names_properties())


# --- entry points ---------------------------------------------------------------------------------------


def test_root_main_reexports_every_deployed_function(tf):
    namespace: dict[str, object] = {}
    exec((TERRAFORM_DIR / "root_main.py").read_text(), namespace)  # as Cloud Functions imports the archive's main.py
    assert set(functions.main.__all__) == set(tf.locals["functions"])
    assert all(callable(namespace[name]) for name in tf.locals["functions"])


def test_root_main_becomes_main_py_at_the_archive_root(tf):
    archive = tf.files["functions.tf"]["data"][0]["archive_file"]["source"]
    assert {"content": '${file("${path.module}/root_main.py")}', "filename": "main.py"} in archive["source"]


def test_deployed_functions_exist_in_functions_main(tf):
    main = REPO / "functions" / "main.py"
    if not main.exists():
        pytest.skip("functions/main.py is not written yet")
    defined = {node.name for node in ast.parse(main.read_text()).body if isinstance(node, ast.FunctionDef)}
    assert set(tf.locals["functions"]) <= defined


def archived_files(tf) -> set[str]:
    """The repository files the source_files fileset() patterns select, expanded in Python."""
    expression = tf.locals["source_files"]
    files = set(re.findall(r'\["([^"]+)"\]', expression))
    for pattern in re.findall(r'fileset\(local\.repo_root, "([^"]+)"\)', expression):
        stem, alternatives = re.fullmatch(r"(.*)\{([^}]*)\}", pattern).groups()
        for suffix in alternatives.split(","):
            files |= {str(p.relative_to(REPO)) for p in REPO.glob(stem + suffix)}
    return files


def first_party_imports(path: Path) -> set[str]:
    first_party = {"functions", "schemas", "trainer", "local", "trainctl"}
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules & first_party


def test_archive_holds_the_controller_and_its_requirements(tf):
    files = archived_files(tf)
    assert "requirements.txt" in files
    assert "functions/settings.py" in files and "schemas/rules.py" in files
    assert not any(f.startswith(("trainer/", "tests/", "local/", "trainctl/", ".venv")) for f in files)
    assert not any("__pycache__" in f for f in files)


def test_archived_code_imports_only_what_the_archive_holds(tf):
    python_files = sorted(f for f in archived_files(tf) if f.endswith(".py"))
    for name in python_files:
        assert first_party_imports(REPO / name) <= {"functions", "schemas"}, name
