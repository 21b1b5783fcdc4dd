"""trainer.secret_env (issue 40, point 7): the request's references to Secret Manager, checked at admission, and the
job they become — references and trainctl's secret launcher, never a value."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import sys
import tarfile

import pytest

from functions.jobs import secret_env, secret_launcher
from functions.jobs.admission import admission_problems
from functions.jobs.planning import plan_custom_job
from functions.settings import Settings, SettingsError
from schemas.errors import RequestInvalid, parse_request
from schemas.executors import parse_executors
from tests.unit.conftest import BASE_REQUEST
from tests.unit.controller_harness import harness

KEY = "request:churn-1"
OWN = "gs://proj-trainctl-control/custom-runs/churn-1/"
WANDB = "projects/my-project/secrets/wandb-api-key/versions/3"
HF = "projects/123456789012/secrets/hf_token/versions/1"
IMAGE = {
    "image": "us-docker.pkg.dev/partner/repo/trainer:1",
    "command": ["python", "-m", "vision.train"],
    "args": ["--epochs", "3"],
    "env": {"NCCL_DEBUG": "INFO"},
}
PACKAGE = {
    "python_package": {
        "uris": ["gs://data-bucket/packages/sha256-" + "a" * 64 + "/my_pkg-1.0.tar.gz"],
        "module": "my_pkg.train",
        "executor": "pytorch-2.6",
    },
    "args": ["--epochs", "3"],
}
# A deployment that lists a container still available on the harness's date (Google's own list has none left).
CURRENT_EXECUTORS = parse_executors(
    json.dumps(
        {
            "pytorch-2.6": {
                "image": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-6.py310:latest",
                "pytorch": "2.6",
                "cuda": "12.x",
                "max_compute_capability": "9.0",
                "available_until": "2027-06-30",
            }
        }
    )
)


def request_with(trainer: dict, **sections):
    return parse_request(json.loads(json.dumps(BASE_REQUEST)) | {"trainer": trainer} | sections)


def errors_of(trainer: dict) -> list[str]:
    with pytest.raises(RequestInvalid) as caught:
        request_with(trainer)
    return [str(error) for error in caught.value.errors]


@pytest.fixture
def custom_settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        allowed_image_prefixes=("us-docker.pkg.dev/partner/repo/",),
        allow_python_packages=True,
        job_secrets={"default": ("projects/my-project/secrets/wandb-api-key",)},
    )


def test_secret_env_takes_references_to_secret_versions_by_number():
    request = request_with(IMAGE | {"secret_env": {"WANDB_API_KEY": WANDB, "HF_TOKEN": HF}})
    assert request.trainer.secret_env == {"WANDB_API_KEY": WANDB, "HF_TOKEN": HF}
    assert request_with(PACKAGE | {"secret_env": {"WANDB_API_KEY": WANDB}}).trainer.secret_env


@pytest.mark.parametrize(
    ("reference", "words"),
    [
        ("projects/my-project/secrets/wandb-api-key/versions/latest", "name a version number"),
        ("projects/my-project/secrets/wandb-api-key/versions/prod", "name a version number"),
        ("projects/my-project/locations/us-central1/secrets/k/versions/1", "regional secret"),
        ("projects/my-project/secrets/wandb-api-key", "not a Secret Manager secret version"),
        ("projects/My_Project/secrets/k/versions/1", "not a Secret Manager secret version"),
        ("projects/my-project/secrets/k.v/versions/1", "not a Secret Manager secret version"),
        ("projects/my-project/secrets/k/versions/0", "not a Secret Manager secret version"),
        ("my-api-key-value-itself", "not a Secret Manager secret version"),
    ],
)
def test_a_reference_that_is_not_a_numbered_secret_version_is_refused_naming_the_field(reference, words):
    [error] = errors_of(IMAGE | {"secret_env": {"WANDB_API_KEY": reference}})
    assert error.startswith("trainer.secret_env: 'WANDB_API_KEY': ") and words in error, error


@pytest.mark.parametrize(
    ("secret_env", "path", "words"),
    [
        ({"LD_PRELOAD": WANDB}, "trainer.secret_env", "(rule LD_*)"),
        ({"http_proxy": WANDB}, "trainer.secret_env", "(rule *_PROXY, in any case)"),
        ({"TRAINCTL_SECRET_ENV": WANDB}, "trainer.secret_env", "(rule TRAINCTL_*)"),
        ({"GOOGLE_APPLICATION_CREDENTIALS": WANDB}, "trainer.secret_env", "(rule GOOGLE_*)"),
        ({"1BAD": WANDB}, "trainer.secret_env", "not a valid variable name"),
        ({"NCCL_DEBUG": WANDB}, "trainer.secret_env", "NCCL_DEBUG also in trainer.env"),
        ({f"K{i}": WANDB for i in range(33)}, "trainer.secret_env", "at most 32 variables"),
    ],
)
def test_secret_env_names_follow_the_env_rules(secret_env, path, words):
    """The same denylist as trainer.env (schemas/trainer_env.py): a secret's name could load code as well as a
    plain variable's."""
    found = errors_of(IMAGE | {"secret_env": secret_env})
    assert any(error.startswith(path) and words in error for error in found), found


def test_env_and_secret_env_together_fit_a_container_with_the_references_variable():
    env = {f"E{i}": "1" for i in range(80)}
    found = errors_of(IMAGE | {"env": env, "secret_env": {f"S{i}": WANDB for i in range(20)}})
    assert any("hold 100 variables together; at most 99" in error for error in found), found


def test_a_package_with_secret_env_leaves_room_for_the_launcher_among_its_packages():
    uris = [f"gs://data-bucket/packages/p{i}.tar.gz" for i in range(100)]
    package = dict(PACKAGE, python_package=dict(PACKAGE["python_package"], uris=uris))
    request_with(package)  # 100 packages: Vertex's limit
    [error] = errors_of(package | {"secret_env": {"WANDB_API_KEY": WANDB}})
    assert error.startswith("trainer.python_package.uris: at most 99 with secret_env")


def test_secret_env_runs_only_with_your_own_code_and_an_image_must_give_its_command():
    builtin = errors_of({"builtin": "tabular", "secret_env": {"WANDB_API_KEY": WANDB}})
    assert builtin == ["trainer.secret_env: only with a custom `image` or a `python_package`"]
    no_command = {key: value for key, value in IMAGE.items() if key != "command"}
    [error] = errors_of(no_command | {"secret_env": {"WANDB_API_KEY": WANDB}})
    assert error.startswith("trainer.command: required with secret_env: trainctl's secret launcher runs first")


def test_an_image_job_gets_the_references_and_the_launcher_in_front_of_its_command(custom_settings):
    request = request_with(IMAGE | {"secret_env": {"WANDB_API_KEY": WANDB, "HF_TOKEN": HF}})
    spec = plan_custom_job(request, custom_settings, KEY).custom_job["job_spec"]["worker_pool_specs"][0]
    container = spec["container_spec"]
    assert container["command"][:3] == ["python3", "-c", secret_env.launcher_source()]
    assert container["command"][3:] == ["--exec", "python", "-m", "vision.train"]
    assert container["args"] == ["--epochs", "3"]
    assert container["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "TRAINCTL_SECRET_ENV", "value": json.dumps({"HF_TOKEN": HF, "WANDB_API_KEY": WANDB}).replace(" ", "")},
    ]


def test_a_package_job_installs_the_launcher_package_and_runs_its_module_first(custom_settings):
    request = request_with(PACKAGE | {"secret_env": {"WANDB_API_KEY": WANDB}})
    plan = plan_custom_job(request, custom_settings, KEY)
    spec = plan.custom_job["job_spec"]["worker_pool_specs"][0]["python_package_spec"]
    launcher = secret_env.launcher_uri(custom_settings.control_bucket)
    assert spec["package_uris"] == [*PACKAGE["python_package"]["uris"], launcher]
    assert launcher.startswith(f"gs://{custom_settings.control_bucket}/launchers/sha256-")
    assert (spec["python_module"], spec["args"]) == (
        "trainctl_secret_env",
        ["--module", "my_pkg.train", "--epochs", "3"],
    )
    assert spec["env"] == [
        {"name": "TRAINCTL_SECRET_ENV", "value": json.dumps({"WANDB_API_KEY": WANDB}).replace(" ", "")}
    ]
    assert secret_env.needs_launcher_package(plan.custom_job, custom_settings.control_bucket)
    without = plan_custom_job(request_with(PACKAGE), custom_settings, KEY)
    assert (
        without.custom_job["job_spec"]["worker_pool_specs"][0]["python_package_spec"]["python_module"] == "my_pkg.train"
    )
    assert not secret_env.needs_launcher_package(without.custom_job, custom_settings.control_bucket)


def test_a_secret_the_operator_has_not_granted_the_teams_code_is_refused_at_admission(custom_settings):
    """Guards the admission check: the operator's job_secrets is the list Terraform grants the team's job account
    secretAccessor on; a reference outside it names the field, the secret and what the team may read."""
    granted = request_with(IMAGE | {"secret_env": {"WANDB_API_KEY": WANDB}})
    assert admission_problems(granted, custom_settings, OWN, KEY, "default") == []
    other = request_with(IMAGE | {"secret_env": {"WANDB_API_KEY": WANDB, "HF_TOKEN": HF}})
    [problem] = admission_problems(other, custom_settings, OWN, KEY, "default")
    assert str(problem) == (
        "trainer.secret_env.HF_TOKEN: guardrail job_secrets: projects/123456789012/secrets/hf_token is not a secret "
        "team default's own code may read; it may read projects/my-project/secrets/wandb-api-key (an operator grants "
        "one in Terraform's job_secrets, or `trainctl local up --secret`)"
    )
    nobody = dataclasses.replace(custom_settings, job_secrets={})
    [problem] = admission_problems(granted, nobody, OWN, KEY, "default")
    assert "it may read none" in str(problem)
    another_team = dataclasses.replace(
        custom_settings, job_secrets={"red": ("projects/my-project/secrets/wandb-api-key",)}
    )
    assert admission_problems(granted, another_team, OWN, KEY, "default") != []


def test_a_request_running_as_another_allowed_account_is_not_checked_against_the_teams_grants(custom_settings):
    """Its account's grants are not trainctl's to know: the node says which secret it cannot read."""
    allowed = dataclasses.replace(
        custom_settings, allowed_service_accounts=("vision@my-project.iam.gserviceaccount.com",)
    )
    request = request_with(
        IMAGE | {"secret_env": {"HF_TOKEN": HF}}, service_account="vision@my-project.iam.gserviceaccount.com"
    )
    assert admission_problems(request, allowed, OWN, KEY, "default") == []


def test_the_settings_read_job_secrets_as_terraform_writes_them():
    base = {"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "c", "TRAINCTL_EVENTS_TOPIC": "e",
            "TRAINCTL_TRAINER_IMAGE": "i"}  # fmt: skip
    read = Settings.from_env(base | {"TRAINCTL_JOB_SECRETS": json.dumps({"red": ["projects/proj-123/secrets/k"]})})
    assert read.job_secrets == {"red": ("projects/proj-123/secrets/k",)}
    for wrong in ('["projects/proj-123/secrets/k"]', '{"red": ["projects/proj-123/secrets/k/versions/1"]}', "{"):
        with pytest.raises(SettingsError, match="TRAINCTL_JOB_SECRETS"):
            Settings.from_env(base | {"TRAINCTL_JOB_SECRETS": wrong})


def test_the_launcher_is_plain_python_with_no_dollar_sign_and_only_the_standard_library():
    """Vertex expands `$(NAME)` in a container's command, where the launcher's source travels; and it runs on
    whatever python3 an image has, so it imports nothing but the standard library."""
    source = secret_env.launcher_source()
    assert "$" not in source
    ast.parse(source, feature_version=(3, 8))  # the oldest python3 it promises to run on
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_launcher_package_is_the_same_bytes_every_time_and_holds_the_launcher():
    first = secret_env.launcher_package()
    secret_env.launcher_package.cache_clear()
    assert secret_env.launcher_package() == first
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        names = archive.getnames()
        module = archive.extractfile("trainctl_secret_env-1.0/trainctl_secret_env.py")
        assert module is not None and module.read().decode() == secret_env.launcher_source()
    assert names == [
        "trainctl_secret_env-1.0/PKG-INFO",
        "trainctl_secret_env-1.0/pyproject.toml",
        "trainctl_secret_env-1.0/trainctl_secret_env.py",
    ]


def test_crc32c_is_the_castagnoli_checksum_secret_manager_states():
    # RFC 3720 (iSCSI), B.4: 32 bytes of zeros, and the check value of "123456789".
    assert secret_launcher.crc32c(bytes(32)) == 0x8A9136AA
    assert secret_launcher.crc32c(b"123456789") == 0xE3069283


def test_a_package_job_with_secret_env_finds_the_launcher_package_in_the_control_bucket():
    """Guards the staging step: the package the job installs is written (once, by its content's name) before the job
    is created; a later request finds it there."""
    h = harness(
        allow_python_packages=True,
        executors=CURRENT_EXECUTORS,
        job_secrets={"default": ("projects/my-project/secrets/wandb-api-key",)},
    )
    trainer = PACKAGE | {"secret_env": {"WANDB_API_KEY": WANDB}}
    assert h.submit("r1", trainer=trainer) == "submitted"
    bucket, name = secret_env.launcher_object("control")
    assert h.gcs.objects[(bucket, name)][0] == secret_env.launcher_package()
    uris = h.vertex.created[-1]["job_spec"]["worker_pool_specs"][0]["python_package_spec"]["package_uris"]
    assert uris[-1] == f"gs://{bucket}/{name}"
    assert h.submit("r2", trainer=trainer) == "submitted"
    assert h.submit("r3", trainer=PACKAGE) == "submitted"
    assert [key for key in h.gcs.objects if key[1].startswith("launchers/")] == [(bucket, name)]
