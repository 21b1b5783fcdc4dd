"""Guards issue 38, point 5 (attack 4): packages live where only the uploading team can create them. Each team's
uploaders may create objects under its data prefixes and its own packages/<team>/ folder, at a '/' boundary, and no
data prefix may reach into packages/. The teams.tf expressions are evaluated by `terraform console` (no provider
needed) and the grant's condition by its CEL form, as test_terraform_iam.py does for the control bucket."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tfconfig import TERRAFORM_DIR, block

from trainctl.source_package import PACKAGES_PREFIX, SourceArchive

pytestmark = pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")

DATA = "proj-1-data"
TEAMS = {
    "default_team": "shared",
    "teams": {
        "shared": {},
        "red": {"uploaders": ["group:red@example.com"], "data_prefixes": ["red/"]},
        "red-ops": {"uploaders": ["group:red-ops@example.com"]},  # no data prefix: its packages all the same
        "blue": {"uploaders": ["group:blue@example.com"], "data_prefixes": ["blue/", "shared-in/"]},
    },
}


def _console(tmp_path: Path, tf, teams: Any, expression: str) -> tuple[str, str]:
    """What `terraform console` prints for `expression` with variables.tf and teams.tf's locals, for `teams`."""
    shutil.copy(TERRAFORM_DIR / "variables.tf", tmp_path)
    names = ["teams", "packages_prefix", "team_data_upload_prefixes", "team_upload_prefixes"]
    body = "\n".join(f"  {name} = {_hcl(tf.locals[name])}" for name in names)
    uploader = tf.resource("google_storage_bucket_iam_member", "team_uploader")
    body += f"\n  team_uploaders = {_hcl(uploader['for_each'])}"
    packages = tf.resource("google_storage_bucket_iam_member", "team_package_uploader")
    body += f"\n  team_package_uploaders = {_hcl(packages['for_each'])}"
    (tmp_path / "teams_eval.tf").write_text(f"locals {{\n{body}\n}}\n")
    run = subprocess.run(
        ["terraform", "console", "-no-color", "-var=project=proj-1", f"-var=teams={json.dumps(teams)}"],
        input=f"{expression}\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.stdout, run.stderr


def _hcl(value: str) -> str:
    """An expression as hcl2 returned it ("${…}", or a literal string) back as HCL source."""
    return value[2:-1] if value.startswith("${") and value.endswith("}") else json.dumps(value)


@pytest.fixture(scope="module")
def evaluated(tf, tmp_path_factory) -> dict[str, Any]:
    expression = (
        "jsonencode({prefixes = local.team_upload_prefixes, data_prefixes = local.team_data_upload_prefixes, "
        "grants = local.team_uploaders, package_grants = local.team_package_uploaders})"
    )
    stdout, stderr = _console(tmp_path_factory.mktemp("teams"), tf, TEAMS, expression)
    assert stdout.strip(), stderr
    return json.loads(json.loads(stdout))


BUCKET_OBJECTS = r'"resource\.name\.startsWith\(\\"projects/_/buckets/\$\{google_storage_bucket\.data\.name\}/objects/'


def _may_create(tf, evaluated: dict[str, Any], member: str, obj: str) -> bool:
    """Whether `member` may create object `obj` in the data bucket: by its team_uploader grant (create and replace,
    under the team's data prefixes) or its team_package_uploader grant (create only, under packages/<team>/), each
    read from its CEL condition."""
    data = tf.resource("google_storage_bucket_iam_member", "team_uploader")
    assert re.fullmatch(
        r'\$\{join\(" \|\| ", \[for prefix in local\.team_data_upload_prefixes\[each\.value\.team\] : '
        + BUCKET_OBJECTS
        + r'\$\{prefix\}\\"\)"\]\)\}',
        block(data, "condition")["expression"],
    ), block(data, "condition")["expression"]
    assert data["role"] == "${google_project_iam_custom_role.data_uploader.id}"  # create and replace: issue 40
    packages = tf.resource("google_storage_bucket_iam_member", "team_package_uploader")
    assert block(packages, "condition")["expression"] == (
        'resource.name.startsWith("projects/_/buckets/${google_storage_bucket.data.name}/objects/'
        '${local.packages_prefix}${each.value.team}/")'
    )
    assert packages["role"] == "roles/storage.objectCreator"  # create, never replace
    assert data["bucket"] == packages["bucket"] == "${google_storage_bucket.data.name}"
    name = f"projects/_/buckets/{DATA}/objects/{obj}"
    teams_data = [grant["team"] for grant in evaluated["grants"].values() if grant["member"] == member]
    teams_packages = [grant["team"] for grant in evaluated["package_grants"].values() if grant["member"] == member]
    return any(
        name.startswith(f"projects/_/buckets/{DATA}/objects/{prefix}")
        for team in teams_data
        for prefix in evaluated["data_prefixes"][team]
    ) or any(name.startswith(f"projects/_/buckets/{DATA}/objects/packages/{team}/") for team in teams_packages)


def test_the_packages_folder_is_the_clis():
    assert PACKAGES_PREFIX == "packages/"
    assert SourceArchive("p-0.0.0.tar.gz", b"x").object_name("red").startswith("packages/red/sha256-")


def test_each_team_may_create_under_its_data_prefixes_and_its_own_packages_folder(evaluated):
    assert evaluated["prefixes"] == {
        "shared": ["packages/shared/"],
        "red": ["red/", "packages/red/"],
        "red-ops": ["packages/red-ops/"],
        "blue": ["blue/", "shared-in/", "packages/blue/"],
    }
    # A team without data prefixes has no data grant; every team's uploaders may create its packages.
    assert sorted(evaluated["grants"]) == ["blue group:blue@example.com", "red group:red@example.com"]
    assert sorted(evaluated["package_grants"]) == [
        "blue group:blue@example.com",
        "red group:red@example.com",
        "red-ops group:red-ops@example.com",
    ]


PACKAGE = f"sha256-{'ab' * 32}/victim-0.0.0.tar.gz"


@pytest.mark.parametrize(
    ("member", "obj", "allowed"),
    [
        ("group:red@example.com", f"packages/red/{PACKAGE}", True),
        ("group:red@example.com", "red/2026-11-22/part-0.csv", True),
        ("group:red@example.com", f"packages/blue/{PACKAGE}", False),  # another team's code
        ("group:red@example.com", f"packages/red-ops/{PACKAGE}", False),  # the '/' boundary
        ("group:red@example.com", f"packages/{PACKAGE}", False),  # the folder of deployments without teams
        ("group:red-ops@example.com", f"packages/red-ops/{PACKAGE}", True),
        ("group:red-ops@example.com", f"packages/red/{PACKAGE}", False),
        ("group:blue@example.com", f"packages/blue/{PACKAGE}", True),
        ("group:blue@example.com", f"packages/red/{PACKAGE}", False),
        ("group:nobody@example.com", f"packages/red/{PACKAGE}", False),
    ],
)
def test_no_team_can_plant_a_package_in_another_teams_folder(tf, evaluated, member, obj, allowed):
    """Issue 38, attack 4: an object planted under a victim team's digest needs a grant on its folder."""
    assert _may_create(tf, evaluated, member, obj) is allowed


@pytest.mark.parametrize(
    ("prefixes", "refused"),
    [(["red/"], False), (["packages-archive/"], False), (["packages/"], True), (["packages/blue/"], True),
     ([""], True), (["pack"], True)],
)  # fmt: skip
def test_a_data_prefix_reaching_into_the_packages_folder_is_refused(tf, tmp_path, prefixes, refused):
    teams = {
        "default_team": "red",
        "teams": {"red": {"uploaders": ["group:red@example.com"], "data_prefixes": prefixes}},
    }
    _, stderr = _console(tmp_path, tf, teams, "var.project")
    assert ("no data_prefixes may lie inside packages/" in " ".join(stderr.split())) is refused, stderr
