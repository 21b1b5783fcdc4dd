"""Teams see and touch only their own (issue 40, points 5 and 11), in Terraform: a team's uploaders create and replace
objects under its folders only, at a '/' boundary; the deployment's other uploaders stay out of every team's folder;
a team's own code reads only what its requests may name as data; each team's watchers pull a subscription that
receives only its team's events. The expressions are evaluated by `terraform console` and the IAM conditions as IAM
evaluates them (tfeval.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tfconfig import TERRAFORM_DIR, block, dynamic_block
from tfeval import DATA, TerraformRefused, allows, evaluate, hcl, object_name

from functions.teams import parse_teams

pytestmark = pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")

EXTRA = "proj-1-extra"
TEAMS: dict[str, Any] = {
    "default_team": "shared",
    "teams": {
        "shared": {"data_prefixes": ["common/"], "uploaders": ["group:shared@example.com"]},
        "red": {
            "uploaders": ["group:red@example.com"],
            "data_prefixes": ["red/"],
            "reads": ["reference/", f"gs://{EXTRA}/tables/"],
            "watchers": {"ana": "user:ana@example.com", "ci": "serviceAccount:ci@proj-1.iam.gserviceaccount.com"},
        },
        "vision": {"uploaders": ["group:vision@example.com"], "data_prefixes": ["vision/", "shared-in/"]},
    },
}
UPLOADER_ROLE = "${google_project_iam_custom_role.data_uploader.id}"


def condition_of(tf, name: str) -> str:
    body = tf.resource("google_storage_bucket_iam_member", name)
    return block(body, "condition")["expression"]


def template(value: str) -> str:
    """A plain string template as python-hcl2 returned it (its escaped quotes read as quotes) back as HCL source."""
    return '"' + value.replace('"', '\\"') + '"'


@pytest.fixture(scope="module")
def evaluated(tf, tmp_path_factory) -> dict[str, Any]:
    uploader = condition_of(tf, "team_uploader")
    packages = condition_of(tf, "team_package_uploader")
    data_uploader = dynamic_block(tf.resource("google_storage_bucket_iam_member", "data_uploader"), "condition")
    custom = dynamic_block(tf.resource("google_storage_bucket_iam_member", "custom_reads_data"), "condition")
    readers = tf.resource("google_storage_bucket_iam_member", "team_custom_reads_data")
    expressions = {
        "red_uploads": hcl(uploader).replace("each.value.team", '"red"'),
        "vision_uploads": hcl(uploader).replace("each.value.team", '"vision"'),
        "red_package_uploads": template(packages.replace("${each.value.team}", "red")),
        "vision_package_uploads": template(packages.replace("${each.value.team}", "vision")),
        "others_upload": hcl(data_uploader["content"]["expression"]).replace(
            "condition.value", "local.all_team_upload_prefixes"
        ),
        "others_conditions": hcl(data_uploader["for_each"]),
        "red_reads": "local.team_read_conditions.red",
        "team_readers": hcl(readers["for_each"]),
        "default_team_reads": hcl(custom["for_each"]).replace("each.value", f'"{DATA}"'),
        "watchers": "local.team_watchers",
    }
    return evaluate(tmp_path_factory.mktemp("scope"), tf, TEAMS, expressions, [EXTRA])


# ---- uploads (issue 40, points 5 and 11) --------------------------------------------------------------------------


def test_team_uploaders_may_create_and_replace_objects_and_nothing_else(tf):
    """Issue 40, point 11: a re-uploaded _SUCCESS or data file is a replacement, which needs storage.objects.delete
    beside .create (cloud.google.com/storage/docs/access-control/iam-permissions); roles/storage.objectCreator lacks
    it. The custom role holds exactly the two; both kinds of uploader get it, each under its own condition."""
    role = tf.resource("google_project_iam_custom_role", "data_uploader")
    assert sorted(role["permissions"]) == ["storage.objects.create", "storage.objects.delete"]
    assert role["project"] == "${var.project}"
    for name in ("team_uploader", "data_uploader"):
        body = tf.resource("google_storage_bucket_iam_member", name)
        assert (body["bucket"], body["role"]) == ("${google_storage_bucket.data.name}", UPLOADER_ROLE)


def test_a_teams_packages_are_created_never_replaced(tf):
    """A package is named by its content and never needs replacing; with storage.objects.delete an uploader could swap
    the code under a name between the controller's check at intake and a node's install. Its folder's grant is
    roles/storage.objectCreator (storage.objects.create alone), a binding of its own."""
    body = tf.resource("google_storage_bucket_iam_member", "team_package_uploader")
    assert (body["bucket"], body["role"]) == ("${google_storage_bucket.data.name}", "roles/storage.objectCreator")


@pytest.mark.parametrize(
    ("team", "obj", "allowed"),
    [
        ("red", "red/2026/part-0.csv", True),
        ("red", "red/2026/_SUCCESS", True),
        ("red", "packages/red/sha256-ab/p-1.tar.gz", False),  # created by the package grant, never replaced
        ("red", "red-evil/_SUCCESS", False),  # the '/' boundary
        ("red", "reference/holdout.csv", False),  # read, never written
        ("red", "vision/_SUCCESS", False),
        ("red", "packages/red-ops/p.tar.gz", False),
        ("vision", "vision/_SUCCESS", True),
        ("vision", "vision-evil/_SUCCESS", False),
        ("vision", "shared-in/x.csv", True),
        ("vision", "red/_SUCCESS", False),
    ],
)
def test_a_teams_uploaders_write_only_under_its_folders(evaluated, team, obj, allowed):
    """Issue 40, points 5 and 11: create and delete (replace) under the team's data prefixes."""
    assert allows(evaluated[f"{team}_uploads"], object_name(obj)) is allowed


@pytest.mark.parametrize(
    ("team", "obj", "allowed"),
    [
        ("red", "packages/red/sha256-ab/p-1.tar.gz", True),
        ("red", "packages/red-ops/sha256-ab/p.tar.gz", False),  # the '/' boundary
        ("red", "packages/vision/sha256-ab/p.tar.gz", False),
        ("red", "red/_SUCCESS", False),  # its data folder is the other grant's
        ("vision", "packages/vision/sha256-ab/p.tar.gz", True),
    ],
)
def test_a_teams_uploaders_create_packages_only_in_its_packages_folder(evaluated, team, obj, allowed):
    assert allows(evaluated[f"{team}_package_uploads"], object_name(obj)) is allowed


def test_the_uploaders_condition_keeps_the_boundary_even_for_a_prefix_without_its_slash(tf, tmp_path):
    """Issue 40, point 5: the condition appends the '/' itself, whatever the variable holds (its validation refuses
    such a prefix too: test_a_folder_without_its_slash_is_refused)."""
    vision = {"uploaders": ["group:v@example.com"], "data_prefixes": ["vision"]}
    teams = {"default_team": "vision", "teams": {"vision": vision}}
    expression = hcl(condition_of(tf, "team_uploader")).replace("each.value.team", '"vision"')
    found = evaluate(tmp_path, tf, teams, {"condition": expression})["condition"]
    assert allows(found, object_name("vision/_SUCCESS"))
    assert not allows(found, object_name("vision-evil/_SUCCESS"))


@pytest.mark.parametrize(
    ("obj", "allowed"),
    [
        ("red/churn/_SUCCESS", False),
        ("vision/x/_SUCCESS", False),
        ("common/_SUCCESS", False),  # the default team's folder is a team's folder too
        ("packages/red/sha256-ab/p.tar.gz", False),
        ("packages/shared/sha256-ab/p.tar.gz", False),
        ("datasets/churn/_SUCCESS", True),
        ("reference/holdout.csv", True),  # shared data, granted to teams by `reads`
        ("red-evil/_SUCCESS", True),  # outside red/: no team's
    ],
)
def test_the_deployments_other_uploaders_stay_out_of_every_teams_folder(evaluated, obj, allowed):
    """Issue 40, point 5: var.data_uploaders could plant a marker under any team's prefix, spending its quota and
    budget. With teams their grant excludes every team's folders (and the controller refuses such a marker)."""
    assert evaluated["others_conditions"] != []
    assert allows(evaluated["others_upload"], object_name(obj)) is allowed


def test_without_teams_the_other_uploaders_keep_the_whole_bucket(tf, tmp_path):
    data_uploader = dynamic_block(tf.resource("google_storage_bucket_iam_member", "data_uploader"), "condition")
    assert evaluate(tmp_path, tf, None, {"conditions": hcl(data_uploader["for_each"])})["conditions"] == []


# ---- reads (issue 40, point 5) ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bucket", "obj", "list_prefix", "allowed"),
    [
        (DATA, "red/2026/part-0.csv", None, True),
        (DATA, None, "red/2026/", True),
        (DATA, "reference/holdout.csv", None, True),  # the operator's grant
        (DATA, "packages/red/sha256-ab/p.tar.gz", None, True),  # its own code
        (DATA, "vision/part-0.csv", None, False),
        (DATA, "red-evil/part-0.csv", None, False),
        (DATA, None, "", False),
        (DATA, None, "vision/", False),
        (DATA, "packages/vision/sha256-ab/p.tar.gz", None, False),
        (EXTRA, "tables/t1/part-0.parquet", None, True),
        (EXTRA, None, "tables/", True),
        (EXTRA, "private/part-0.parquet", None, False),
    ],
)
def test_a_teams_own_code_reads_only_what_its_requests_may_name(evaluated, bucket, obj, list_prefix, allowed):
    """Issue 40, point 5: admission refuses a request naming another team's data; code the team wrote runs as its
    team's account, which may read only the same folders, so the refusal holds for what that code reads itself."""
    condition = evaluated["red_reads"][bucket]
    assert allows(condition, object_name(obj, bucket) if obj else None, list_prefix) is allowed


def test_each_team_account_reads_only_the_buckets_it_has_folders_in(evaluated, tf):
    assert sorted(evaluated["team_readers"]) == [f"red/{DATA}", f"red/{EXTRA}", f"vision/{DATA}"]
    body = tf.resource("google_storage_bucket_iam_member", "team_custom_reads_data")
    assert body["role"] == "roles/storage.objectViewer"
    assert block(body, "condition")["expression"] == "${local.team_read_conditions[each.value.team][each.value.bucket]}"


def test_the_custom_images_account_reads_only_the_default_teams_folders_with_teams(evaluated):
    """With teams it runs the default team's own code (every other team's runs as its own account)."""
    (condition,) = evaluated["default_team_reads"]
    assert allows(condition, object_name("common/part-0.csv"))
    assert not allows(condition, object_name("red/part-0.csv"))
    assert allows(condition, object_name("packages/shared/sha256-ab/p.tar.gz"))


def test_terraform_and_the_controller_agree_on_what_a_team_may_read(evaluated, tf, tmp_path):
    """The grants and admission (functions/teams.py readable, package_folders) read the same folders."""
    uris = evaluate(tmp_path, tf, TEAMS, {"uris": "local.team_read_uris"}, [EXTRA])["uris"]
    controller = parse_teams(TEAMS | {"data_bucket": DATA})
    for team in TEAMS["teams"]:
        assert sorted(uris[team]) == sorted(controller.package_folders(team))
    assert "data_bucket = google_storage_bucket.data.name" in tf.locals["teams_setting"]


# ---- the variable -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("team", "refused"),
    [
        ({"data_prefixes": ["vision/"]}, None),
        ({"data_prefixes": ["vision"]}, "must be a folder of the data bucket ending in '/'"),
        ({"data_prefixes": ["/vision/"]}, "must be a folder of the data bucket ending in '/'"),
        ({"data_prefixes": ["gs://proj-1-data/vision/"]}, "must be a folder of the data bucket ending in '/'"),
        ({"data_prefixes": ["a/../red/"]}, "must be a folder of the data bucket ending in '/'"),
        ({"reads": ["shared/reference/", "gs://other-bucket/tables/"]}, None),
        ({"reads": ["shared/reference"]}, "each reads entry must be a folder ending in '/'"),
        ({"reads": ["gs://other-bucket"]}, "each reads entry must be a folder ending in '/'"),
        ({"data_prefixes": ["red/team-b/"]}, "no team's data_prefixes may lie inside (or be) another team's"),
        ({"data_prefixes": ["red/"]}, "no team's data_prefixes may lie inside (or be) another team's"),
        ({"watchers": {"ana": "user:ana@example.com"}}, None),
        ({"watchers": {"Ana": "user:ana@example.com"}}, "watchers maps names"),
        ({"watchers": {"ana": "ana@example.com"}}, "watchers maps names"),
    ],
)
def test_a_folder_without_its_slash_is_refused(tf, tmp_path, team, refused):
    """Issue 40, point 5: the validations say what is wrong before anything is applied."""
    teams = {"default_team": "a", "teams": {"a": team, "b": {"data_prefixes": ["red/"]}}}
    try:
        evaluate(tmp_path, tf, teams, {"ok": "true"}, validate=True)
    except TerraformRefused as exc:
        assert refused is not None and refused in str(exc), str(exc)
    else:
        assert refused is None


def test_shared_intake_is_a_boolean(tf, tmp_path):
    teams = {"default_team": "a", "teams": {"a": {}}, "shared_intake_open": "maybe"}
    with pytest.raises(TerraformRefused, match="shared_intake_open is true or false"):
        evaluate(tmp_path, tf, teams, {"ok": "true"}, validate=True)


# ---- each team's watchers (issue 40, point 5) ---------------------------------------------------------------------


def test_each_team_watcher_pulls_its_own_subscription_of_its_teams_events(evaluated, tf):
    """Issue 40, point 5: every event watcher saw every team's events. A team's watcher gets a subscription of its
    own whose filter keeps its team's only (the controller sets the `team` attribute on each), and no other."""
    assert evaluated["watchers"] == {
        "red/ana": {"team": "red", "name": "ana", "member": "user:ana@example.com"},
        "red/ci": {"team": "red", "name": "ci", "member": "serviceAccount:ci@proj-1.iam.gserviceaccount.com"},
    }
    subscription = tf.resource("google_pubsub_subscription", "team_watcher")
    assert subscription["for_each"] == "${local.team_watchers}"
    assert subscription["topic"] == "${google_pubsub_topic.events.id}"
    assert subscription["name"] == "${var.name_prefix}-watch-${each.value.team}-${each.value.name}"
    assert subscription["filter"] == 'attributes.team = "${each.value.team}"'
    assert not {"push_config", "bigquery_config", "cloud_storage_config"} & set(subscription)
    assert block(subscription, "expiration_policy")["ttl"] == ""
    grant = tf.resource("google_pubsub_subscription_iam_member", "team_watcher_pulls_its_subscription")
    assert grant["subscription"] == "${google_pubsub_subscription.team_watcher[each.key].id}"
    assert (grant["role"], grant["member"], grant["for_each"]) == (
        "roles/pubsub.subscriber", "${each.value.member}", "${local.team_watchers}"
    )  # fmt: skip
    assert "google_pubsub_subscription.team_watcher" in tf.outputs["team_event_watch_subscriptions"]["value"]


def test_the_filter_names_the_attribute_the_controller_sets():
    """The subscription's filter and the event's attribute are one name (schemas/events.py to_pubsub_message)."""
    import inspect

    from schemas import events

    assert 'attributes["team"] = event.team' in inspect.getsource(events.to_pubsub_message)
    assert 'attributes.team = \\"' in (TERRAFORM_DIR / "watchers.tf").read_text()


def test_the_deploy_guide_lists_each_new_grant():
    guide = (Path(TERRAFORM_DIR) / "README.md").read_text()
    for text in ("team_watcher", "`<prefix>_data_uploader`", "team's own account"):
        assert text in guide, text
