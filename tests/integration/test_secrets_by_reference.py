"""Secrets by reference through the live functions, the emulators and a local JobService holding the local Secret
Manager (issue 40, point 7): a job reads its trainer.secret_env value on its node, as its own account, and a
secret-looking trainer.env value still reaches it; no value is in the control bucket (any generation, for the
reference), an event, or a log; a secret the team's code may not read is rejected before any claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import JobServiceClient

from functions.jobs.secret_env import SECRET_ENV_VAR
from local.names import LOCAL_PROJECT
from tests.integration.deployment import CUSTOM_ACCOUNT, FAKE_NODE_IMAGE, fake_node_request, serving
from tests.integration.test_controller_intake import jobs_with_key

pytestmark = pytest.mark.integration

SECRET = f"projects/{LOCAL_PROJECT}/secrets/wandb-api-key"
OTHER_SECRET = f"projects/{LOCAL_PROJECT}/secrets/someone-elses"
VALUE = "wandb-by-reference-5b1c0a7e"
PLAIN_SECRET = "token-given-in-env-3f9d2c"


@pytest.fixture(scope="module")
def secret_jobservice(pubsub_emulator, fake_gcs, tmp_path_factory):
    """A JobService of this module's own, whose Secret Manager holds the secret for the custom images' account."""
    from local.jobservice.standalone import start_jobservice_process
    from tests.conftest import jobservice_args

    work = tmp_path_factory.mktemp("secret-jobservice")
    secrets = {
        SECRET: {"versions": [VALUE], "accessors": [CUSTOM_ACCOUNT]},
        OTHER_SECRET: {"versions": ["not-yours"], "accessors": ["someone@x.iam.gserviceaccount.com"]},
    }
    (work / "secrets.json").write_text(json.dumps({"secrets": secrets}))
    service = start_jobservice_process(work, extra_args=jobservice_args("--secrets-file", str(work / "secrets.json")))
    yield service
    service.stop()


def everything_written(deployment) -> str:
    """Every generation of every object of the deployment's buckets, as text."""
    storage = deployment.storage()
    texts = []
    for bucket in (deployment.control_bucket, deployment.data_bucket):
        for blob in storage.bucket(bucket).list_blobs(versions=True):
            texts.append(blob.download_as_bytes().decode(errors="replace"))
    return "\n".join(texts)


def test_a_job_reads_its_secret_by_reference_and_no_record_event_or_log_holds_a_value(
    secret_jobservice, tmp_path: Path
):
    grants = json.dumps({"default": [SECRET]})
    with serving(secret_jobservice, tmp_path / "functions", TRAINCTL_JOB_SECRETS=grants) as deployment:
        events = deployment.events()
        record_dir = tmp_path / "env"
        trainer = {
            "image": f"{FAKE_NODE_IMAGE}:1",
            "command": ["python", "tests/local/programs/fake_node.py"],
            "args": ["--record-env", str(record_dir)],
            "env": {"API_TOKEN": PLAIN_SECRET, "NCCL_DEBUG": "INFO"},
            "secret_env": {"WANDB_API_KEY": f"{SECRET}/versions/1"},
        }
        assert deployment.request(fake_node_request("secret-ok", trainer=trainer)) < 300
        events.wait_for("secret-ok", "succeeded", timeout=120, act=deployment.reconcile)

        seen = json.loads((record_dir / "workerpool0-0.json").read_text())
        assert (seen["WANDB_API_KEY"], seen["API_TOKEN"]) == (VALUE, PLAIN_SECRET)
        assert SECRET_ENV_VAR not in seen
        client = JobServiceClient(
            transport="rest",
            client_options={"api_endpoint": secret_jobservice.rest_url.rstrip("/")},
            credentials=AnonymousCredentials(),
        )
        [job] = jobs_with_key(client, "request:secret-ok")
        container = job.job_spec.worker_pool_specs[0].container_spec
        env = {variable.name: variable.value for variable in container.env}
        assert env["API_TOKEN"] == PLAIN_SECRET, "the CustomJob is where a plain env value lives"
        assert json.loads(env[SECRET_ENV_VAR]) == {"WANDB_API_KEY": f"{SECRET}/versions/1"}
        assert job.job_spec.service_account == CUSTOM_ACCOUNT

        record = deployment.record("request:secret-ok")
        assert record is not None and record["state"] == "succeeded" and "sealed_env" not in record
        assert record["request"]["trainer"]["env"]["API_TOKEN"] == "<redacted>"
        written = everything_written(deployment)
        published = "\n".join(event.model_dump_json() for event, _ in events.drain())
        logs = "\n".join(path.read_text(errors="replace") for path in (tmp_path / "functions").rglob("*.log"))
        jobservice_logs = "\n".join(
            path.read_text(errors="replace") for path in Path(secret_jobservice.state_dir).parent.rglob("*.log")
        )
        assert VALUE not in written + published + logs + jobservice_logs
        assert PLAIN_SECRET not in published + logs
        current = "\n".join(
            blob.download_as_bytes().decode(errors="replace")
            for blob in deployment.storage().bucket(deployment.control_bucket).list_blobs()
        )
        assert PLAIN_SECRET not in current, "kept apart only while the request was active"

        refused = dict(trainer, secret_env={"WANDB_API_KEY": f"{OTHER_SECRET}/versions/1"})
        assert deployment.request(fake_node_request("secret-refused", trainer=refused)) < 300
        rejected = events.wait_for("secret-refused", "rejected")
        assert any(
            error.startswith("trainer.secret_env.WANDB_API_KEY: guardrail job_secrets: " + OTHER_SECRET)
            for error in rejected.errors or []
        ), rejected.errors
        assert jobs_with_key(client, "request:secret-refused") == []
