"""A job that fails by the user's hand is reported `failed` with reason `user` and a message naming the
path at fault, using the built-in trainer on the local JobService: a dataset that does not exist, and an
output folder the job cannot write.

Guards the failure diagnosis: Vertex reports only a replica's exit status; without the trainer's failure
note and the controller's checks the requester would have to dig through node logs."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.deployment import Deployment

UNWRITABLE = "it-no-such-bucket"  # allowed by the guardrail, but it does not exist: every write fails


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory):
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.address, {"TRAINCTL_ALLOWED_OUTPUT_BUCKETS": UNWRITABLE})
    deployed.create(tmp_path_factory.mktemp("functions"))
    try:
        yield deployed
    finally:
        deployed.stop()


def tabular_request(request_id: str, dataset: str, **sections) -> dict:
    return {
        "api_version": "trainctl/v1",
        "request_id": request_id,
        "dataset": {"uri": dataset, "target": "y"},
        "trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 1}},
        "resources": {"machine_type": "g2-standard-24"},
        **sections,
    }


def test_a_missing_dataset_fails_with_reason_user_naming_the_dataset(deployment):
    events = deployment.events()
    missing = f"gs://{deployment.data_bucket}/nothing-here/"
    assert deployment.request(tabular_request("missing-data-1", missing)) == 200
    failed = events.wait_for("missing-data-1", "failed", timeout=240, act=deployment.reconcile)
    assert failed.reason == "user"
    assert "exited with a non-zero status" in failed.message
    assert f"no CSV or Parquet files at '{missing}'" in failed.message  # the trainer's own words
    assert "retrying" not in events.states("missing-data-1")


def test_an_unwritable_output_dir_fails_with_reason_user_naming_the_folder(deployment):
    events = deployment.events()
    deployment.upload("ok/part-0.csv", "a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
    output = f"gs://{UNWRITABLE}/runs/unwritable-1/"
    request = tabular_request("unwritable-1", f"gs://{deployment.data_bucket}/ok/", output_dir=output)
    assert deployment.request(request) == 200
    failed = events.wait_for("unwritable-1", "failed", timeout=240, act=deployment.reconcile)
    assert failed.reason == "user"
    assert f"Nothing was written under {output}" in failed.message
