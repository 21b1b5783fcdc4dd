"""Redaction of trainer.env values whose names look secret (issue 40, point 7): the job gets the real value — every
attempt of it, a queued one and a resubmitted one too — while the ledger record, every event, history and every
command that shows a request hold `<redacted>`; the record keeps the value apart only while the request is active."""

from __future__ import annotations

import json

import pytest

from functions.intake.delivery import spec_hash
from functions.jobs.secret_env import shown_custom_job
from functions.ledger.requests import Ledger
from local.memory_gcs import MemoryGcs
from schemas.errors import RequestInvalid, parse_request
from schemas.secrets import REDACTED, looks_secret, redacted_request
from tests.unit.conftest import BASE_REQUEST, make_record, make_request
from tests.unit.controller_harness import A100_QUOTA, STOCKOUT, harness
from trainctl.jobs import status_lines, summary

VALUE = "wandb-0123456789abcdef-not-for-records"
IMAGE = {
    "image": "us-docker.pkg.dev/partner/repo/trainer:1",
    "command": ["python", "-m", "vision.train"],
    "env": {"WANDB_API_KEY": VALUE, "NCCL_DEBUG": "INFO"},
}


@pytest.mark.parametrize(
    "name",
    [
        "WANDB_API_KEY", "HF_TOKEN", "DB_PASSWORD", "dbPassword", "OAUTH", "AWS_SECRET_ACCESS_KEY", "SENTRY_DSN",
        "GITHUB_TOKEN", "MY_PASSPHRASE", "SERVICE_CREDENTIALS", "apiKey", "SSH_PRIVATE_KEY", "DB_PASS", "SMTP_PWD",
        "SESSION_COOKIE", "REDIS_CREDS", "BASIC_AUTH", "client_secret", "PRIVATE",
    ],
)  # fmt: skip
def test_names_that_hold_secrets_look_secret(name):
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name",
    ["TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT", "MODEL_PATH", "NCCL_DEBUG", "OMP_NUM_THREADS", "WANDB_MODE",
     "AUTHOR_NAME", "EPOCHS", "PASSES_PER_EPOCH"],
)  # fmt: skip
def test_ordinary_names_do_not_look_secret(name):
    assert not looks_secret(name)


def custom_harness(quotas=None):
    return harness(quotas=quotas, allowed_image_prefixes=("us-docker.pkg.dev/partner/repo/",))


def everything_recorded(h) -> str:
    """Every object of the control bucket and every event published, as text."""
    objects = [data.decode() if isinstance(data, bytes) else data for (_, _), (data, _) in h.gcs.objects.items()]
    events = [event.model_dump_json() for event in h.publisher.events]
    return "\n".join(objects + events)


def env_of(custom_job) -> dict[str, str]:
    container = custom_job["job_spec"]["worker_pool_specs"][0]["container_spec"]
    return {variable["name"]: variable["value"] for variable in container["env"]}


def test_every_job_gets_the_value_and_no_record_or_event_holds_it_once_the_request_ends():
    """A request that waits in trainctl's quota queue (no job yet), leaves it, stocks out and is resubmitted: both
    jobs get the real value, planned from the record; the record's request, the events and history hold
    `<redacted>`; when it ends, the value is nowhere in the control bucket nor in any event."""
    h = custom_harness(quotas={A100_QUOTA: 2})
    assert h.submit("filler") == "submitted"
    filler = h.vertex.last()
    assert h.submit(trainer=IMAGE, scheduling={"max_attempts": 2}) == "queued"

    record = h.record()
    assert record.request["trainer"]["env"] == {"WANDB_API_KEY": REDACTED, "NCCL_DEBUG": "INFO"}
    assert record.sealed_env == {"WANDB_API_KEY": VALUE}
    assert VALUE not in json.dumps(record.model_dump(mode="json", exclude={"sealed_env"}))

    h.vertex.set_state(filler, "JOB_STATE_SUCCEEDED", end_time=h.clock())
    h.clock.advance(minutes=1)
    h.ctl.reconcile()
    assert h.record().state == "submitted", "left the queue"
    first = h.vertex.created[-1]
    assert env_of(first) == {"WANDB_API_KEY": VALUE, "NCCL_DEBUG": "INFO"}

    h.vertex.set_state(h.vertex.last(), "JOB_STATE_FAILED", error_code=8, error_message=STOCKOUT)
    h.clock.advance(minutes=5)
    h.ctl.reconcile()
    assert h.record().attempt == 2 and len(h.vertex.created) == 3
    assert env_of(h.vertex.created[-1])["WANDB_API_KEY"] == VALUE

    h.vertex.set_state(h.vertex.last(), "JOB_STATE_SUCCEEDED", start_time=h.clock(), end_time=h.clock())
    h.clock.advance(minutes=5)
    h.ctl.reconcile()
    assert h.record().state == "succeeded"
    assert h.record().sealed_env is None
    recorded = everything_recorded(h)
    assert VALUE not in recorded
    assert REDACTED in recorded  # the record's request says a value was there


def test_the_record_drops_the_sealed_values_on_any_write_once_the_request_has_ended():
    gcs = MemoryGcs()
    ledger = Ledger(gcs, "control")
    record = make_record(request={"trainer": {"env": {"API_KEY": REDACTED}}}, sealed_env={"API_KEY": VALUE})
    generation = ledger.create(record)
    generation = ledger.replace(record, generation)
    assert ledger.read("abc")[0].sealed_env == {"API_KEY": VALUE}, "active: kept for the next attempt"
    record.state = "failed"
    ledger.replace(record, generation)
    assert ledger.read("abc")[0].sealed_env is None
    assert VALUE not in str(gcs.objects)


def test_two_requests_differing_only_in_a_secret_looking_value_hash_alike():
    """The record keeps the spec hash; a hash over a short secret could be guessed back, so it is taken over the
    redacted request (a changed plain value still changes it)."""
    base = json.loads(json.dumps(BASE_REQUEST))

    def hashed(env):
        return spec_hash(parse_request(base | {"trainer": {**IMAGE, "env": env}}))

    assert hashed({"WANDB_API_KEY": "a"}) == hashed({"WANDB_API_KEY": "b"})
    assert hashed({"NCCL_DEBUG": "INFO"}) != hashed({"NCCL_DEBUG": "WARN"})


def test_a_rejection_never_quotes_an_env_value():
    document = json.loads(json.dumps(BASE_REQUEST)) | {"trainer": {**IMAGE, "env": {"API_KEY": 1234567890123}}}
    with pytest.raises(RequestInvalid) as caught:
        parse_request(document)
    assert [str(error) for error in caught.value.errors] == ["trainer.env.API_KEY: input should be a valid string"]


def test_status_shows_env_redacted_and_secret_env_by_reference_even_from_a_record_written_before_redaction():
    request = make_request(
        trainer={
            **IMAGE,
            "secret_env": {"HF_TOKEN": "projects/my-project/secrets/hf/versions/2"},
        }
    ).model_dump(mode="json")
    shown = summary(make_record(request=request))
    assert shown["env"] == {"WANDB_API_KEY": REDACTED, "NCCL_DEBUG": "INFO"}
    assert shown["secret_env"] == {"HF_TOKEN": "projects/my-project/secrets/hf/versions/2"}
    lines = "\n".join(status_lines(shown))
    assert "WANDB_API_KEY=<redacted>" in lines and "HF_TOKEN from projects/my-project/secrets/hf/versions/2" in lines
    assert VALUE not in lines and VALUE not in json.dumps(shown)


def test_the_dry_runs_printed_job_is_redacted_and_the_real_job_is_not():
    job = {
        "job_spec": {
            "worker_pool_specs": [
                {"container_spec": {"env": [{"name": "WANDB_API_KEY", "value": VALUE}, {"name": "N", "value": "1"}]}}
            ]
        }
    }
    shown = shown_custom_job(job)
    assert env_of(shown) == {"WANDB_API_KEY": REDACTED, "N": "1"}
    assert env_of(job)["WANDB_API_KEY"] == VALUE


def test_a_request_without_secret_looking_names_is_kept_as_it_is():
    request = make_request(trainer={**IMAGE, "env": {"NCCL_DEBUG": "INFO"}}).model_dump(mode="json")
    assert redacted_request(request) is request
