"""trainctl's secret launcher on a node, against the local Secret Manager and metadata server (issue 40, point 7):
the program it starts gets each value, read as the job's own account; an account without access fails the node
naming the secret and the account; nothing but that program's environment holds a value."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.cloud.aiplatform_v1 import JobState
from job_specs import PARENT, custom_job, pool

from functions.jobs import secret_launcher
from functions.jobs.secret_env import (
    SECRET_ENV_VAR,
    image_command,
    launcher_package,
    launcher_source,
    package_module_args,
)
from local.jobservice.client import wait_for_state
from local.jobservice.packages import pip_install
from local.jobservice.rest import RestAbort, RestServer
from local.jobservice.secret_manager import MetadataServer, NodeServices, Secret, SecretStore, secret_manager_routes
from local.jobservice.standalone import JobServiceProcess

VALUE = "s3cr3t-value-9f8e7d6c"
SECRET = "projects/trainctl-local/secrets/wandb-api-key"
VERSION = f"{SECRET}/versions/1"
JOB_ACCOUNT = "trainctl-custom@trainctl-local.iam.gserviceaccount.com"
OTHER_ACCOUNT = "someone-else@trainctl-local.iam.gserviceaccount.com"
# Prints the program's environment as JSON to the file its first argument names.
RECORD_ENV = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"


@pytest.fixture
def store() -> SecretStore:
    return SecretStore({SECRET: Secret(["old", VALUE], {JOB_ACCOUNT})})


@pytest.fixture
def secret_manager(store: SecretStore) -> Iterator[str]:
    server = RestServer(secret_manager_routes(store))
    server.start()
    yield server.url
    server.stop()


@contextlib.contextmanager
def node_env(store: SecretStore, url: str, account: str, references: dict[str, str]) -> Iterator[dict[str, str]]:
    """A node's environment: the job's metadata server (for `account`) and the stand-in, and the references."""
    metadata = MetadataServer(store, account)
    try:
        services = NodeServices(store, url).node_env(metadata)
        yield {"PATH": "/usr/bin:/bin", SECRET_ENV_VAR: json.dumps(references), **services}
    finally:
        metadata.stop()


def launch(env: dict[str, str], record: Path) -> subprocess.CompletedProcess[str]:
    """The launcher's source run as the planner runs it in a custom image (`python3 -c SOURCE --exec …`)."""
    command = [sys.executable, "-c", launcher_source(), "--exec", sys.executable, "-c", RECORD_ENV, str(record)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_program_gets_each_value_in_its_environment_and_the_launcher_logs_only_names(
    store, secret_manager, tmp_path
):
    record = tmp_path / "env.json"
    references = {"WANDB_API_KEY": f"{SECRET}/versions/2", "OLD_KEY": VERSION}
    with node_env(store, secret_manager, JOB_ACCOUNT, references) as env:
        done = launch(env, record)
    assert done.returncode == 0, done.stderr
    seen = json.loads(record.read_text())
    assert (seen["WANDB_API_KEY"], seen["OLD_KEY"]) == (VALUE, "old")
    assert SECRET_ENV_VAR not in seen and secret_launcher.ENDPOINT_VAR not in seen
    assert VALUE not in done.stdout + done.stderr
    assert f"secret_env: set WANDB_API_KEY from {SECRET}/versions/2" in done.stderr


def test_an_account_without_access_fails_the_node_naming_the_secret_and_the_account(store, secret_manager, tmp_path):
    record = tmp_path / "env.json"
    with node_env(store, secret_manager, OTHER_ACCOUNT, {"WANDB_API_KEY": f"{SECRET}/versions/2"}) as env:
        denied = launch(env, record)
    assert denied.returncode == 1 and not record.exists()
    assert f"secret_env WANDB_API_KEY: {OTHER_ACCOUNT} cannot read {SECRET}/versions/2 (PERMISSION_DENIED:" in (
        denied.stderr
    )
    assert "roles/secretmanager.secretAccessor" in denied.stderr and VALUE not in denied.stderr
    with node_env(store, secret_manager, JOB_ACCOUNT, {"WANDB_API_KEY": f"{SECRET}/versions/3"}) as env:
        missing = launch(env, record)
    assert missing.returncode == 1 and "(NOT_FOUND:" in missing.stderr


def test_the_stand_in_answers_as_secret_manager_does(store, secret_manager):
    """AccessSecretVersionResponse: base64 data and its CRC32C as an int64 string; `latest` is the newest version;
    an unknown secret reads exactly as a secret one may not read (403), so no caller learns which exist."""

    def access(name: str, token: str | None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"{secret_manager}v1/{name}:access", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    token = store.token_for(JOB_ACCOUNT)
    status, body = access(f"{SECRET}/versions/latest", token)
    assert status == 200 and body["name"] == f"{SECRET}/versions/2"
    assert base64.b64decode(body["payload"]["data"]).decode() == VALUE
    assert body["payload"]["dataCrc32c"] == str(secret_launcher.crc32c(VALUE.encode()))
    assert access(VERSION, None)[0] == 401
    assert access(VERSION, "ya29.forged")[0] == 401
    denied = access(VERSION, store.token_for(OTHER_ACCOUNT))
    unknown = access("projects/trainctl-local/secrets/nope/versions/1", token)
    assert denied[0] == unknown[0] == 403 and denied[1]["error"]["status"] == "PERMISSION_DENIED"
    assert denied[1]["error"]["message"] == (
        f"Permission 'secretmanager.versions.access' denied for resource '{VERSION}' (or it may not exist)."
    )


def test_a_damaged_payload_is_refused(store, secret_manager, tmp_path, monkeypatch):
    original = store.access

    def damaged(*args):
        answer = original(*args)
        answer["payload"]["dataCrc32c"] = "1"
        return answer

    monkeypatch.setattr(store, "access", damaged)
    with node_env(store, secret_manager, JOB_ACCOUNT, {"K": VERSION}) as env:
        done = launch(env, tmp_path / "env.json")
    assert done.returncode == 1 and "arrived damaged (its CRC32C does not match)" in done.stderr


def test_the_metadata_server_answers_only_a_request_with_the_metadata_flavor_header(store):
    metadata = MetadataServer(store, JOB_ACCOUNT)
    try:
        url = f"http://{metadata.host}/computeMetadata/v1/instance/service-accounts/default/"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "token", timeout=10)
        assert refused.value.code == 403
        flavored = {"Metadata-Flavor": "Google"}
        with urllib.request.urlopen(urllib.request.Request(url + "token", headers=flavored), timeout=10) as answer:
            token = json.loads(answer.read())["access_token"]
        with urllib.request.urlopen(urllib.request.Request(url + "email", headers=flavored), timeout=10) as answer:
            assert answer.read().decode() == JOB_ACCOUNT
    finally:
        metadata.stop()
    assert store.account_of(token) == JOB_ACCOUNT
    with pytest.raises(RestAbort) as denied:
        store.access(VERSION, "trainctl-local", "wandb-api-key", "1", OTHER_ACCOUNT)
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.integration
def test_a_job_of_the_jobservice_reads_its_secret_as_its_own_account_and_no_log_holds_the_value(
    private_jobservice, tmp_path
):
    """The JobService with a secrets file runs two jobs whose command is the launcher in front of a program that
    records its environment: the one running as the granted account gets the value; the other fails, its node log
    naming the secret and its account. The value is in no log of the JobService, the job or its nodes."""
    secrets_file = tmp_path / "secrets.json"
    secrets_file.write_text(json.dumps({"secrets": {SECRET: {"versions": [VALUE], "accessors": [JOB_ACCOUNT]}}}))
    service: JobServiceProcess = private_jobservice("--secrets-file", str(secrets_file))
    client = service.client()
    record = tmp_path / "env.json"
    container = pool(
        command=image_command([sys.executable, "-c", RECORD_ENV, str(record)]),
        env={SECRET_ENV_VAR: json.dumps({"WANDB_API_KEY": VERSION})},
    )

    def run(account: str):
        job = custom_job(container)
        job["job_spec"]["service_account"] = account
        created = client.create_custom_job(parent=PARENT, custom_job=job)
        return wait_for_state(client, created.name, timeout=90)

    done = run(JOB_ACCOUNT)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error.message
    assert json.loads(record.read_text())["WANDB_API_KEY"] == VALUE
    denied = run(OTHER_ACCOUNT)
    assert denied.state == JobState.JOB_STATE_FAILED
    logs = {path: path.read_text(errors="replace") for path in service.state_dir.rglob("*.log")}
    logs[service.process.log_path] = Path(service.process.log_path).read_text(errors="replace")
    assert [str(path) for path, text in logs.items() if VALUE in text] == []
    assert any(f"{OTHER_ACCOUNT} cannot read {VERSION}" in text for text in logs.values()), list(logs)


def test_the_launcher_package_installs_as_a_package_and_runs_the_requests_module(store, secret_manager, tmp_path):
    """A package job's launcher: its sdist (functions/jobs/secret_env.py launcher_package) installed by the local
    executor's pip, then `python -m trainctl_secret_env --module MODULE ARGS`, as the planner sends it."""
    archive = tmp_path / "trainctl_secret_env-1.0.tar.gz"
    archive.write_bytes(launcher_package())
    target = tmp_path / "installed"
    installed = pip_install([archive], target)
    assert installed.returncode == 0, installed.stderr
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_train.py").write_text(RECORD_ENV)
    record = tmp_path / "env.json"
    with node_env(store, secret_manager, JOB_ACCOUNT, {"WANDB_API_KEY": VERSION}) as env:
        env["PYTHONPATH"] = f"{target}:{code}"
        module, args = package_module_args("my_train", [str(record)])
        done = subprocess.run(
            [sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(record.read_text())["WANDB_API_KEY"] == "old"
