"""Issue 24, point 4 on the live functions: a request writes only its own folder of the control bucket; outside it,
an output_dir overlapping an active request's is refused until that request ends; custom images run as their own
account. Requests arrive as Pub/Sub pushes; jobs are read back from the local JobService with the real client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from functions.ledger.keys import key_hash, request_key
from local.fake_gcs import create_bucket
from local.names import LOCAL_PROJECT
from tests.integration.deployment import CUSTOM_ACCOUNT, TRAINER_ACCOUNT, Deployment, fake_node_request
from tests.integration.test_controller_intake import jobs_with_key


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    """A deployment whose operator allows custom images to write to an output bucket of its own."""
    suffix = uuid.uuid4().hex[:8]
    operator_bucket = f"it-outputs-{suffix}"
    deployed = Deployment(suffix, jobservice.rest_url, {"TRAINCTL_ALLOWED_OUTPUT_BUCKETS": operator_bucket})
    deployed.create(tmp_path_factory.mktemp("functions"))
    create_bucket(fake_gcs.url, LOCAL_PROJECT, operator_bucket)
    try:
        yield deployed
    finally:
        deployed.stop()


def operator_dir(deployment: Deployment, path: str) -> str:
    return f"gs://{deployment.settings_env()['TRAINCTL_ALLOWED_OUTPUT_BUCKETS']}/{path}"


def held_folders(deployment: Deployment, *request_ids: str) -> list[str]:
    """The index entries of output folders held outside the control bucket (functions/ledger/output_claims.py), all or
    those of the requests named."""
    names = [b.name for b in deployment.storage().bucket(deployment.control_bucket).list_blobs(prefix="outputs/")]
    owners = {key_hash(request_key(request_id)) for request_id in request_ids}
    return [name for name in names if not owners or name.rsplit("/", 1)[1] in owners]


def entry(deployment: Deployment, output_dir: str, request_id: str, claimed: datetime) -> str:
    """Write the index entry a delivery writes just before its claim, as one that died there would leave it."""
    bucket, _, path = output_dir.removeprefix("gs://").partition("/")
    name = f"outputs/{bucket}/{path}{key_hash(request_key(request_id))}"
    body = {"request_id": request_id, "output_dir": output_dir, "claimed": claimed.isoformat()}
    deployment.storage().bucket(deployment.control_bucket).blob(name).upload_from_string(json.dumps(body))
    return name


def until(tmp_path: Path, request_id: str, *args: str, **sections) -> tuple[dict, Path]:
    """A fake-node request that runs until its release file exists."""
    release = tmp_path / f"release-{request_id}"
    return fake_node_request(request_id, "--until-file", str(release), *args, **sections), release


def test_a_request_naming_another_requests_folder_is_rejected_and_starts_no_job(deployment, job_client, tmp_path):
    """Guards issue 24, point 4: the attack of the review. A request whose output_dir is a running victim's
    folder would write the victim's checkpoints/progress.json and model/metrics.json, which the controller reads as
    the victim's; it is rejected naming the rule and its own folder, is never claimed, and starts no job."""
    events = deployment.events()
    victim, release = until(tmp_path, "victim-1")
    assert deployment.request(victim) == 200
    events.wait_for("victim-1", "submitted")
    control = f"gs://{deployment.control_bucket}/"
    attacks = {
        "attacker-1": fake_node_request("attacker-1", output_dir=f"{control}custom-runs/victim-1/"),
        "attacker-2": fake_node_request("attacker-2", output_dir=f"{control}runs/victim-1/"),
        "attacker-3": fake_node_request("attacker-3", output_dir=f"{control}custom-runs/"),
        "attacker-4": {
            **fake_node_request("attacker-4", output_dir=f"{control}runs/victim-1/"),
            "trainer": {"builtin": "tabular"},
        },
    }
    for request_id, attack in attacks.items():
        assert deployment.request(attack) == 200
        rejected = events.wait_for(request_id, "rejected")
        prefix = "runs" if request_id == "attacker-4" else "custom-runs"
        assert rejected.errors == [
            "output_dir: guardrail output_isolation: in the control bucket a request writes only to its own folder, "
            f"{control}{prefix}/{request_id}/ for this one; {attack['output_dir'].rstrip('/')}/ is another request's "
            f"folder or the ledger. Leave output_dir out to use {control}{prefix}/{request_id}/"
        ]
        assert deployment.record(request_key(request_id)) is None
        assert jobs_with_key(job_client, request_key(request_id)) == []
    release.touch()
    events.wait_for("victim-1", "succeeded", act=deployment.reconcile)


def test_a_custom_images_job_runs_as_the_custom_account_and_the_built_in_trainers_as_the_trainer(
    deployment, job_client
):
    """Guards issue 24, point 4: the CustomJob Vertex receives names the custom images' account, which cannot
    write the built-in trainer's runs/ (terraform/iam.tf), and the built-in trainer's names the trainer's."""
    assert deployment.request(fake_node_request("run-as-custom")) == 200
    (custom,) = jobs_with_key(job_client, request_key("run-as-custom"))
    assert custom.job_spec.service_account == CUSTOM_ACCOUNT
    assert custom.job_spec.base_output_directory.output_uri_prefix.endswith("/custom-runs/run-as-custom/")
    builtin = {**fake_node_request("run-as-builtin"), "trainer": {"builtin": "tabular"}}
    assert deployment.request(builtin) == 200
    (job,) = jobs_with_key(job_client, request_key("run-as-builtin"))
    job_client.cancel_custom_job(name=job.name)  # only its spec matters here
    assert job.job_spec.service_account == TRAINER_ACCOUNT
    assert job.job_spec.base_output_directory.output_uri_prefix.endswith("/runs/run-as-builtin/")


def test_overlapping_output_dirs_in_an_operator_bucket_are_refused_until_the_first_request_ends(
    deployment, job_client, tmp_path
):
    """Guards issue 24, point 4: outside the control bucket, a folder inside or around an active request's is
    refused naming that request, and admitted again once it has ended; a sibling that merely shares a prefix of
    characters is not an overlap. The index entry is gone once the first request is retired."""
    events = deployment.events()
    first, release = until(tmp_path, "ops-first", output_dir=operator_dir(deployment, "team/churn/"))
    assert deployment.request(first) == 200
    events.wait_for("ops-first", "submitted")
    assert len(held_folders(deployment, "ops-first")) == 1
    around = fake_node_request("ops-around", output_dir=operator_dir(deployment, "team/"))
    inside = fake_node_request("ops-inside", output_dir=operator_dir(deployment, "team/churn/tuned/"))
    for request_id, request in (("ops-around", around), ("ops-inside", inside)):
        assert deployment.request(request) == 200
        [error] = events.wait_for(request_id, "rejected").errors
        assert error.startswith(f"output_dir: guardrail output_isolation: {request['output_dir']} overlaps ")
        assert "where active request ops-first writes" in error
        assert jobs_with_key(job_client, request_key(request_id)) == []
    sibling = fake_node_request("ops-sibling", output_dir=operator_dir(deployment, "team/churn-2/"))
    assert deployment.request(sibling) == 200
    events.wait_for("ops-sibling", "submitted")

    release.touch()
    events.wait_for("ops-first", "succeeded", act=deployment.reconcile)
    events.wait_for("ops-sibling", "succeeded", act=deployment.reconcile)
    assert held_folders(deployment, "ops-first", "ops-sibling") == []  # released when their records were retired
    assert deployment.request(inside) == 200  # the same request again, now that ops-first has ended
    assert events.wait_for("ops-inside", "submitted").request_id == "ops-inside"


def test_two_overlapping_requests_arriving_together_are_never_both_admitted(deployment):
    """Guards issue 24, point 4: each delivery writes its index entry before it lists the others', so of two
    overlapping requests arriving at once at most one is claimed (both refused is acceptable, never both run)."""
    events = deployment.events()
    pairs = []
    for round_ in range(4):
        folder = f"together-{round_}/"
        pairs.append(
            (
                fake_node_request(f"together-{round_}-a", output_dir=operator_dir(deployment, folder)),
                fake_node_request(f"together-{round_}-b", output_dir=operator_dir(deployment, f"{folder}b/")),
            )
        )
    with ThreadPoolExecutor(2) as pool:
        for pair in pairs:
            assert list(pool.map(deployment.request, pair)) == [200, 200]
    for a, b in pairs:
        claimed = [r["request_id"] for r in (a, b) if deployment.record(request_key(r["request_id"])) is not None]
        assert len(claimed) <= 1, claimed
        for request in (a, b):
            if request["request_id"] not in claimed:
                assert events.states(request["request_id"]) == ["rejected"]
    for a, b in pairs:
        for request in (a, b):
            if deployment.record(request_key(request["request_id"])) is not None:
                events.wait_for(request["request_id"], "succeeded", act=deployment.reconcile)


def test_a_redelivery_after_a_crash_before_the_claim_is_not_refused_by_its_own_folder(deployment, job_client):
    """Guards issue 24, point 4: a delivery that died between writing its index entry and claiming leaves the entry
    behind. Its redelivery takes the entry as its own; meanwhile (the claim may be in progress) an overlapping
    request is refused; an entry that old claims nothing any more."""
    events = deployment.events()
    output_dir = operator_dir(deployment, "crashed/")
    name = entry(deployment, output_dir, "crashed-1", datetime.now(UTC))
    overlapping = fake_node_request("crashed-rival", output_dir=operator_dir(deployment, "crashed/x/"))
    assert deployment.request(overlapping) == 200
    assert "where active request crashed-1 writes" in events.wait_for("crashed-rival", "rejected").errors[0]

    assert deployment.request(fake_node_request("crashed-1", output_dir=output_dir)) == 200
    events.wait_for("crashed-1", "submitted")
    assert len(jobs_with_key(job_client, request_key("crashed-1"))) == 1
    assert name in held_folders(deployment)
    events.wait_for("crashed-1", "succeeded", act=deployment.reconcile)

    abandoned = operator_dir(deployment, "abandoned/")
    entry(deployment, abandoned, "abandoned-1", datetime.now(UTC) - timedelta(days=2))
    assert deployment.request(fake_node_request("abandoned-rival", output_dir=abandoned)) == 200
    events.wait_for("abandoned-rival", "submitted")
    events.wait_for("abandoned-rival", "succeeded", act=deployment.reconcile)


def test_reconcile_frees_the_folders_of_ended_and_abandoned_requests(deployment):
    """Guards issue 24, point 4: an entry left by a handler that died between ending its request and releasing the
    folder, and one whose delivery died before its claim and can no longer be redelivered, are deleted by
    reconcile; the entry of a claim that may still be in progress is kept."""
    events = deployment.events()
    output_dir = operator_dir(deployment, "ended/")
    assert deployment.request(fake_node_request("ended-1", output_dir=output_dir)) == 200
    events.wait_for("ended-1", "succeeded", act=deployment.reconcile)
    ended = entry(deployment, output_dir, "ended-1", datetime.now(UTC))
    abandoned = entry(deployment, operator_dir(deployment, "gone/"), "gone-1", datetime.now(UTC) - timedelta(days=2))
    in_progress = entry(deployment, operator_dir(deployment, "starting/"), "starting-1", datetime.now(UTC))
    deployment.reconcile()
    left = held_folders(deployment)
    assert ended not in left and abandoned not in left
    assert in_progress in left
