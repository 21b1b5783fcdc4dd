"""Least privilege, read off the HCL: who gets which role on what."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from tfconfig import TERRAFORM_DIR, block, strings

import functions.main
from functions.jobs import planning
from functions.ledger.model_charter import ARTIFACTS_PREFIX, REFERENCES_PREFIX

PRIMITIVE_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}
IAM_MEMBER_KINDS = (
    "google_project_iam_member",
    "google_service_account_iam_member",
    "google_storage_bucket_iam_member",
    "google_pubsub_topic_iam_member",
    "google_pubsub_subscription_iam_member",
    "google_artifact_registry_repository_iam_member",
    "google_cloud_run_v2_service_iam_member",
    "google_iap_web_cloud_run_service_iam_member",
    "google_bigquery_table_iam_member",
    "google_secret_manager_secret_iam_member",
)


def all_roles(tf) -> set[str]:
    return {role for text in strings(tf.files) for role in re.findall(r"roles/[A-Za-z.]+", text)}


def grants(tf) -> list[tuple[str, str, dict]]:
    """(kind, name, body) of every IAM member resource."""
    return [(kind, name, body) for (kind, name), body in tf.resources.items() if kind.endswith("_iam_member")]


def grants_to(tf, member: str) -> dict[str, dict]:
    return {f"{kind}.{name}": body for kind, name, body in grants(tf) if body["member"] == member}


def test_no_primitive_roles(tf):
    roles = all_roles(tf)
    assert len(roles) > 5, "found almost no roles: the scan is broken"
    assert not roles & PRIMITIVE_ROLES


def test_no_authoritative_iam_that_would_remove_other_members(tf):
    authoritative = [
        f"{kind}.{name}" for (kind, name) in tf.resources if kind.endswith(("_iam_binding", "_iam_policy"))
    ]
    assert authoritative == []


def test_no_grant_to_the_public(tf):
    public = [text for text in strings(tf.files) if "allUsers" in text or "allAuthenticatedUsers" in text]
    assert public == []


def test_every_grant_is_a_known_member_resource(tf):
    assert {kind for kind, _, _ in grants(tf)} <= set(IAM_MEMBER_KINDS)


def test_every_role_is_traced_in_the_readme(tf):
    readme = (TERRAFORM_DIR / "README.md").read_text()
    missing = sorted(role for role in all_roles(tf) if f"`{role}`" not in readme)
    assert missing == [], "terraform/README.md's permission table must explain every role"


# --- the functions --------------------------------------------------------------------------------------


def test_every_function_runs_as_its_own_service_account(tf):
    function = tf.resource("google_cloudfunctions2_function", "function")
    accounts = tf.resource("google_service_account", "function")
    assert accounts["for_each"] == function["for_each"] == "${local.functions}"
    assert (
        block(function, "service_config")["service_account_email"]
        == "${google_service_account.function[each.key].email}"
    )
    suffixes = [f["account"] for f in tf.locals["functions"].values()]
    assert len(set(suffixes)) == len(suffixes) == 5
    assert accounts["account_id"] == "${var.name_prefix}-${each.value.account}"


def test_service_account_ids_fit_iam_limits_with_the_longest_prefix(tf):
    condition = tf.variables["name_prefix"]["validation"][0]["condition"]
    longest_prefix = 2 + int(re.search(r"\{0,(\d+)\}", condition)[1])
    suffixes = [f["account"] for f in tf.locals["functions"].values()]
    for name, account in tf.of_kind("google_service_account").items():
        if name == "team_custom":  # a team's own code: its name is hashed into 10 characters
            assert account["account_id"] == "${var.name_prefix}-t-${substr(sha256(each.key), 0, 10)}"
            suffixes.append("t-" + "0" * 10)
        elif name != "function":
            suffixes.append(re.fullmatch(r"\$\{var\.name_prefix\}-([a-z-]+)", account["account_id"])[1])
    assert all(6 <= len("ab-" + s) and longest_prefix + 1 + len(s) <= 30 for s in suffixes), suffixes


def test_every_function_may_submit_as_the_trainer_and_nothing_more(tf):
    # The intake functions submit; on_job_state and reconcile resubmit preempted jobs. Custom images run as their
    # own account (issue 24, point 4), so the functions may act as that one too, and as no other.
    assert set(tf.locals["functions"]) == set(functions.main.__all__)
    acts_as = {
        body["service_account_id"]: body
        for body in tf.of_kind("google_service_account_iam_member").values()
        if body["member"] == "${google_service_account.function[each.key].member}"
    }
    assert set(acts_as) == {"${google_service_account.trainer.name}", "${google_service_account.custom.name}"}
    for act_as in acts_as.values():
        assert act_as["for_each"] == "${local.functions}"
        assert act_as["role"] == "roles/iam.serviceAccountUser"
    vertex = tf.resource("google_project_iam_member", "function_uses_vertex")
    # Exactly the Vertex AI calls each can reach (issue 40, point 6; test_terraform_reachable_calls.py).
    assert vertex["role"] == "${google_project_iam_custom_role.function_vertex[each.key].id}"


def test_functions_publish_to_the_events_topic_only(tf):
    publishers = [body for _, _, body in grants(tf) if body["role"] == "roles/pubsub.publisher"]
    function_publishers = [b for b in publishers if b["member"].startswith("${google_service_account.function[")]
    assert [b["topic"] for b in function_publishers] == ["${google_pubsub_topic.events.id}"]


def test_function_accounts_hold_exactly_the_controller_grants(tf):
    member = "${google_service_account.function[each.key].member}"
    by_data_reader = "${google_service_account.function[each.value.function].member}"
    granted = {**grants_to(tf, member), **grants_to(tf, by_data_reader)}
    assert sorted(granted) == [
        "google_project_iam_member.function_reads_quotas",
        "google_project_iam_member.function_uses_vertex",
        "google_pubsub_topic_iam_member.function_publishes_events",
        "google_service_account_iam_member.function_acts_as_custom_trainer",
        "google_service_account_iam_member.function_acts_as_team_custom",
        "google_service_account_iam_member.function_acts_as_trainer",
        "google_storage_bucket_iam_member.function_reads_data",
        "google_storage_bucket_iam_member.function_reads_outputs",
        "google_storage_bucket_iam_member.function_uses_control_bucket",
    ]
    assert granted["google_storage_bucket_iam_member.function_reads_data"]["role"] == "roles/storage.objectViewer"
    assert granted["google_storage_bucket_iam_member.function_reads_outputs"]["role"] == "roles/storage.objectViewer"
    assert granted["google_project_iam_member.function_reads_quotas"]["role"] == "roles/cloudquotas.viewer"
    assert (
        granted["google_storage_bucket_iam_member.function_uses_control_bucket"]["role"] == "roles/storage.objectUser"
    )


# --- the trainer ----------------------------------------------------------------------------------------


def test_trainer_reads_data_and_writes_run_outputs_only(tf):
    granted = grants_to(tf, "${google_service_account.trainer.member}")
    assert sorted(granted) == [
        "google_storage_bucket_iam_member.trainer_reads_data",
        "google_storage_bucket_iam_member.trainer_reads_models",
        "google_storage_bucket_iam_member.trainer_writes_run_outputs",
    ]
    models = granted["google_storage_bucket_iam_member.trainer_reads_models"]
    assert models["role"] == "roles/storage.objectViewer"
    reads = granted["google_storage_bucket_iam_member.trainer_reads_data"]
    assert (reads["for_each"], reads["role"]) == ("${toset(local.data_buckets)}", "roles/storage.objectViewer")
    writes = granted["google_storage_bucket_iam_member.trainer_writes_run_outputs"]
    assert writes["bucket"] == "${google_storage_bucket.control.name}"
    expression = block(writes, "condition")["expression"]
    assert "/objects/${local.artifacts_prefix}" in expression and "objectListPrefix" in expression
    assert tf.locals["artifacts_prefix"] == "runs/"


# --- custom images (issue 24, point 4) --------------------------------------------------------------------

CONTROL = "ctl"


def _allows(tf, grant: str, obj: str | None = None, list_prefix: str | None = None) -> bool:
    """Evaluate a control-bucket grant's condition (its two CEL forms: resource.name.startsWith and the
    objectListPrefix attribute's startsWith) for reading or writing object `obj`, or listing `list_prefix`."""
    body = tf.resource("google_storage_bucket_iam_member", grant)
    return condition_allows(tf, block(body, "condition")["expression"], obj, list_prefix)


def condition_allows(tf, expression: str, obj: str | None = None, list_prefix: str | None = None, **names) -> bool:
    """A control-bucket condition (clauses joined by ||, each a conjunction (&&) of the two startsWith forms, either
    maybe negated with !) for object `obj` or listing `list_prefix`; `names`: more ${…} to fill in."""
    for name in ("artifacts_prefix", "custom_artifacts_prefix", "team_artifacts_prefix"):
        expression = expression.replace(f"${{local.{name}}}", tf.locals[name])
    expression = expression.replace("${local.custom_artifacts_prefix}", tf.locals["custom_artifacts_prefix"])
    for name, value in names.items():
        expression = expression.replace(f"${{{name}}}", value)
    expression = expression.replace("${google_storage_bucket.control.name}", CONTROL)
    assert "${" not in expression, expression

    def atom(text: str) -> bool:
        text = text.strip()
        while text.startswith("("):
            text = text[1:].strip()
        while text.count(")") > text.count("("):
            text = text[:-1].strip()
        if text.startswith("!"):
            return not atom(text[1:])
        if match := re.fullmatch(r'resource\.name\.startsWith\("([^"]*)"\)', text):
            return obj is not None and f"projects/_/buckets/{CONTROL}/objects/{obj}".startswith(match[1])
        if match := re.fullmatch(
            r'api\.getAttribute\("storage\.googleapis\.com/objectListPrefix", ""\)\.startsWith\("([^"]*)"\)', text
        ):
            return list_prefix is not None and list_prefix.startswith(match[1])
        raise AssertionError(f"unexpected clause {text!r}")

    return any(all(atom(part) for part in clause.split("&&")) for clause in expression.split("||"))


def test_the_control_bucket_prefixes_are_the_planners(tf):
    """Guards issue 24, point 4: the folders the planner sends each kind of job to are the ones its account may
    write, and neither prefix lies inside the other."""
    assert tf.locals["artifacts_prefix"] == planning.RUNS_PREFIX
    assert tf.locals["custom_artifacts_prefix"] == planning.CUSTOM_RUNS_PREFIX
    assert not planning.CUSTOM_RUNS_PREFIX.startswith(planning.RUNS_PREFIX)
    assert not planning.RUNS_PREFIX.startswith(planning.CUSTOM_RUNS_PREFIX)


@pytest.mark.parametrize(
    ("obj", "list_prefix", "trainer", "custom"),
    [
        ("runs/r1/model/metrics.json", None, True, False),
        ("runs/r1/checkpoints/progress.json", None, True, False),
        (None, "runs/r1/checkpoints/", True, False),
        ("custom-runs/r1/model/metrics.json", None, False, True),
        (None, "custom-runs/r1/checkpoints/", False, True),
        ("custom-runs/_teams/red/r1/model/metrics.json", None, False, False),
        (None, "custom-runs/_teams/red/", False, False),
        (None, "custom-runs/_teams/", False, False),
        ("model-artifacts/churn/abc/model.pt", None, False, False),
        ("ledger/abc.json", None, False, False),
        ("active/abc", None, False, False),
        ("outputs/models/team/abc", None, False, False),
        (None, "", False, False),
        (None, "ledger/", False, False),
    ],
)
def test_the_trainer_and_custom_images_each_reach_only_their_own_prefix(tf, obj, list_prefix, trainer, custom):
    """Guards issue 24, point 4: jobs of custom images cannot write (or read, or list) where the built-in trainer's
    outputs live, nor the ledger; the built-in trainer cannot reach custom images' outputs."""
    assert _allows(tf, "trainer_writes_run_outputs", obj, list_prefix) is trainer
    assert _allows(tf, "custom_writes_custom_run_outputs", obj, list_prefix) is custom


def test_custom_images_read_data_and_write_only_custom_runs_and_the_output_buckets(tf):
    """Guards issue 24, point 4: what a custom image can reach (SECURITY.md): the data buckets to read, its own
    prefix of the control bucket and the operator's output buckets to write; nothing else, no Vertex, no topic."""
    account = tf.resource("google_service_account", "custom")
    assert account["account_id"] == "${var.name_prefix}-custom"
    granted = grants_to(tf, "${google_service_account.custom.member}")
    assert sorted(granted) == [
        "google_secret_manager_secret_iam_member.custom_reads_secret",
        "google_storage_bucket_iam_member.custom_reads_data",
        "google_storage_bucket_iam_member.custom_reads_launchers",
        "google_storage_bucket_iam_member.custom_reads_models",
        "google_storage_bucket_iam_member.custom_writes_custom_run_outputs",
        "google_storage_bucket_iam_member.custom_writes_output_buckets",
    ]
    reads = granted["google_storage_bucket_iam_member.custom_reads_data"]
    assert reads["role"] == "roles/storage.objectViewer" and "for bucket in local.data_buckets" in reads["for_each"]
    # Without teams every data bucket, whole; with teams the default team's folders only (test_terraform_team_scope.py).
    assert "var.teams == null ||" in reads["for_each"]
    control = granted["google_storage_bucket_iam_member.custom_writes_custom_run_outputs"]
    assert (control["bucket"], control["role"]) == ("${google_storage_bucket.control.name}", "roles/storage.objectUser")
    outputs = granted["google_storage_bucket_iam_member.custom_writes_output_buckets"]
    assert (outputs["for_each"], outputs["role"]) == ("${toset(var.output_buckets)}", "roles/storage.objectUser")
    # The controller runs custom images as it, and may send their outputs to the output buckets.
    settings = tf.locals["controller_settings"]
    assert settings["TRAINCTL_CUSTOM_SERVICE_ACCOUNT"] == "${google_service_account.custom.email}"
    assert settings["TRAINCTL_TRAINER_SERVICE_ACCOUNT"] == "${google_service_account.trainer.email}"
    assert (
        settings["TRAINCTL_ALLOWED_OUTPUT_BUCKETS"]
        == '${join(",", concat([google_storage_bucket.control.name], var.output_buckets))}'
    )


def _variable_errors(tmp_path, **values: object) -> str:
    """What `terraform console` says about variables.tf's validations for these values (no provider needed)."""
    shutil.copy(TERRAFORM_DIR / "variables.tf", tmp_path)
    args = [f"-var={name}={value if isinstance(value, str) else json.dumps(value)}" for name, value in values.items()]
    run = subprocess.run(
        ["terraform", "console", "-no-color", *args],
        input="var.project\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.stderr if "Invalid value for variable" in run.stderr else ""


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")
@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"output_buckets": ["models", "team-outputs.example.com"]}, None),
        ({"output_buckets": ["gs://models/"]}, "must hold bucket names"),
        ({"output_buckets": ["proj-1-trainctl-control"]}, "must not name the control bucket or a data bucket"),
        ({"output_buckets": ["ctl"], "control_bucket_name": "ctl"}, "must not name the control bucket"),
        ({"output_buckets": ["proj-1-trainctl-data"]}, "must not name the control bucket or a data bucket"),
        ({"output_buckets": ["shared"], "extra_data_buckets": ["shared"]}, "must not name the control bucket"),
    ],
)
def test_output_buckets_are_bucket_names_apart_from_the_control_and_data_buckets(tmp_path, values, problem):
    """Guards issue 24, point 4: custom images may write every object of an output bucket, so the control bucket
    (the ledger, the built-in trainer's runs) and the data buckets (datasets, markers that start jobs) are refused."""
    errors = _variable_errors(tmp_path, project="proj-1", **values)
    if problem is None:
        assert errors == ""
    else:
        assert "output_buckets" in errors and problem in " ".join(errors.split())


# --- service agents and callers -------------------------------------------------------------------------


def test_pubsub_agent_gets_exactly_what_dead_lettering_and_history_need(tf):
    granted = grants_to(tf, "${local.pubsub_service_agent}")
    dead_letter = granted.pop("google_pubsub_topic_iam_member.pubsub_agent_publishes_dead_letters")
    assert (dead_letter["topic"], dead_letter["role"]) == (
        "${google_pubsub_topic.dead_letter.id}",
        "roles/pubsub.publisher",
    )
    acks = granted.pop("google_pubsub_subscription_iam_member.pubsub_agent_acks_undeliverable_requests")
    assert (acks["for_each"], acks["subscription"], acks["role"]) == (
        "${google_pubsub_subscription.on_job_request}",
        "${each.value.id}",
        "roles/pubsub.subscriber",
    )  # every requests subscription: the shared one and each team's (issue 32)
    history = granted.pop("google_bigquery_table_iam_member.pubsub_agent_writes_history")
    assert (history["table_id"], history["role"]) == (
        "${google_bigquery_table.events.table_id}",
        "roles/bigquery.dataEditor",
    )
    # The one other grant is opt-in, for old projects' OIDC tokens, and scoped to the two calling identities.
    assert list(granted) == ["google_service_account_iam_member.pubsub_agent_mints_tokens"]
    tokens = granted["google_service_account_iam_member.pubsub_agent_mints_tokens"]
    assert "if var.legacy_pubsub_push_auth" in tokens["for_each"]
    assert tokens["role"] == "roles/iam.serviceAccountTokenCreator"


def test_storage_trigger_identities_have_their_roles(tf):
    """Issue 40, point 6: the Cloud Storage agent publishes to the topic its notification uses, and to no other."""
    gcs = grants_to(tf, "${local.gcs_service_agent}")
    assert list(gcs) == ["google_pubsub_topic_iam_member.gcs_agent_publishes_uploads"]
    (grant,) = gcs.values()
    assert (grant["role"], grant["topic"]) == ("roles/pubsub.publisher", "${google_pubsub_topic.data_uploads.id}")
    notifications = tf.of_kind("google_storage_notification")
    assert [body["topic"] for body in notifications.values()] == [grant["topic"]]
    eventarc = grants_to(tf, "${google_service_account.eventarc.member}")
    assert sorted(g["role"] for g in eventarc.values()) == ["roles/eventarc.eventReceiver", "roles/run.invoker"]


def test_each_caller_may_invoke_only_its_function(tf):
    invokers = tf.of_kind("google_cloud_run_v2_service_iam_member")
    assert {name: body["role"] for name, body in invokers.items()} == dict.fromkeys(invokers, "roles/run.invoker")
    assert (
        invokers["push_invokes_on_job_request"]["name"]
        == '${google_cloudfunctions2_function.function["on_job_request"].name}'
    )
    assert (
        invokers["scheduler_invokes_reconcile"]["name"]
        == '${google_cloudfunctions2_function.function["reconcile"].name}'
    )
    assert (
        invokers["eventarc_invokes"]["for_each"]
        == "${toset([for name, f in local.functions : name if f.trigger != null])}"
    )


def test_log_sink_writer_publishes_to_the_job_state_topic_only(tf):
    granted = grants_to(tf, "${google_logging_project_sink.job_state.writer_identity}")
    assert [(g["topic"], g["role"]) for g in granted.values()] == [
        ("${google_pubsub_topic.job_state.id}", "roles/pubsub.publisher")
    ]


def test_build_account_writes_logs_and_function_images_and_reads_staged_source(tf):
    granted = grants_to(tf, "${google_service_account.build.member}")
    assert {name: g["role"] for name, g in granted.items()} == {
        "google_project_iam_member.build_writes_logs": "roles/logging.logWriter",
        "google_artifact_registry_repository_iam_member.build_pushes_function_images": "roles/artifactregistry.writer",
        "google_project_iam_member.build_reads_staged_source": "roles/storage.objectViewer",
    }
    pushes = granted["google_artifact_registry_repository_iam_member.build_pushes_function_images"]
    assert pushes["repository"] == "${google_artifact_registry_repository.functions.name}"
    staged = block(granted["google_project_iam_member.build_reads_staged_source"], "condition")
    bucket = "projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-${var.region}"
    assert tf.locals["staged_source_bucket"] == bucket
    assert "${local.staged_source_bucket}" in staged["expression"]
    function = tf.resource("google_cloudfunctions2_function", "function")
    assert block(function, "build_config")["service_account"] == "${google_service_account.build.id}"


def test_only_the_listed_members_may_start_jobs(tf):
    publisher = tf.resource("google_pubsub_topic_iam_member", "request_publisher")
    assert publisher["for_each"] == "${toset(var.request_publishers)}"
    assert publisher["topic"] == "${google_pubsub_topic.requests.id}"
    assert publisher["role"] == "roles/pubsub.publisher"
    uploader = tf.resource("google_storage_bucket_iam_member", "data_uploader")
    assert uploader["for_each"] == "${toset(var.data_uploaders)}"
    assert uploader["bucket"] == "${google_storage_bucket.data.name}"
    # Create and replace (issue 40, point 11), outside every team's folder where there are teams (point 5).
    assert uploader["role"] == "${google_project_iam_custom_role.data_uploader.id}"
    # Nothing else may publish requests or create objects in the data bucket.
    requests_publishers = [
        name for kind, name, body in grants(tf)
        if body.get("topic") == "${google_pubsub_topic.requests.id}" and body["role"] == "roles/pubsub.publisher"
    ]  # fmt: skip
    assert requests_publishers == ["request_publisher"]


# --- each team's own code and the registered models (issue 38, point 4) ------------------------------------------


@pytest.mark.parametrize(
    ("obj", "list_prefix", "allowed"),
    [
        ("custom-runs/_teams/red/r1/model/metrics.json", None, True),
        (None, "custom-runs/_teams/red/r1/", True),
        ("custom-runs/_teams/red-ops/r1/model/metrics.json", None, False),
        ("custom-runs/_teams/blue/r1/model/schema.json", None, False),
        ("custom-runs/r1/model/metrics.json", None, False),
        ("runs/r1/model/metrics.json", None, False),
        ("model-artifacts/churn/abc/schema.json", None, False),
        (None, "custom-runs/_teams/", False),
    ],
)
def test_a_teams_own_code_writes_only_its_teams_folder(tf, obj, list_prefix, allowed):
    """Attack 3: every custom or package job ran as one account that could rewrite another request's metrics.json,
    model and schema.json. A team's own code runs as its team's account, which writes only its team's folder (the
    '/' keeps red out of red-ops'), never the registered copies."""
    body = tf.resource("google_storage_bucket_iam_member", "team_custom_writes_its_runs")
    expression = block(body, "condition")["expression"]
    assert condition_allows(tf, expression, obj, list_prefix, **{"each.key": "red"}) is allowed


def test_the_team_folder_is_the_planners_and_the_controller_runs_each_teams_code_as_its_account(tf):
    assert tf.locals["team_artifacts_prefix"] == "${local.custom_artifacts_prefix}_teams/"
    assert planning.CUSTOM_RUNS_PREFIX + planning.TEAMS_FOLDER == "custom-runs/_teams/"
    assert "custom_service_account = google_service_account.team_custom[name].email" in tf.locals["teams_setting"]
    acts = tf.resource("google_service_account_iam_member", "function_acts_as_team_custom")
    assert acts["role"] == "roles/iam.serviceAccountUser"


@pytest.mark.parametrize("grant", ["trainer_reads_models", "custom_reads_models", "team_custom_reads_models"])
def test_every_job_account_reads_the_registered_models_and_none_writes_them(tf, grant):
    """Finding 6 and point 4: the registered copies and the reference sets are read by every job (the champion it
    scores, the reference rows) and written by the controller alone."""
    body = tf.resource("google_storage_bucket_iam_member", grant)
    assert body["role"] == "roles/storage.objectViewer"
    assert tf.locals["model_prefixes"] == [ARTIFACTS_PREFIX, REFERENCES_PREFIX]
    writers = [
        name
        for (kind, name), b in tf.resources.items()
        if kind == "google_storage_bucket_iam_member"
        and b.get("bucket") == "${google_storage_bucket.control.name}"
        and b.get("role") != "roles/storage.objectViewer"
        and not name.startswith("function_")
    ]
    for name in writers:
        expression = block(tf.resource("google_storage_bucket_iam_member", name), "condition")["expression"]
        for obj in ("model-artifacts/churn/abc/model.pt", "model-references/churn/r/reference.parquet"):
            assert not condition_allows(tf, expression, obj, **{"each.key": "red"}), name


def test_the_lifecycle_rule_never_deletes_a_registered_model(tf):
    """Finding 6: run folders expire after run_retention_days; the copies a version is registered from do not."""
    control = tf.resource("google_storage_bucket", "control")
    rules = control["lifecycle_rule"]
    prefixes = [p for rule in rules for c in rule["condition"] for p in c.get("matches_prefix", [])]
    assert prefixes == ["${local.artifacts_prefix}", "${local.custom_artifacts_prefix}"]
    for prefix in (ARTIFACTS_PREFIX, REFERENCES_PREFIX):
        assert not any(prefix.startswith(p) for p in (tf.locals["artifacts_prefix"], "custom-runs/"))
