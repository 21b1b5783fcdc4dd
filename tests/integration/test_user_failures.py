"""A request that would fail by the user's hand is refused before any GPU is paid for when that can be known
(a dataset with no data: issue 12 point 17), and otherwise reported `failed` with reason `user` and a message
naming the path at fault, on the local JobService: a dataset without CSV or Parquet files (the built-in trainer),
and an output folder the job cannot write (a custom image: the built-in trainer writes only its own folder).

Guards the failure diagnosis: Vertex reports only a replica's exit status; without the trainer's failure
note and the controller's checks the requester would have to dig through node logs."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.deployment import Deployment, fake_node_request

UNWRITABLE = "it-no-such-bucket"  # allowed by the guardrail, but it does not exist: every write fails


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory):
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url, {"TRAINCTL_ALLOWED_OUTPUT_BUCKETS": UNWRITABLE})
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


@pytest.mark.parametrize(
    ("folder", "objects", "rule"),
    [
        ("nothing-here/", {}, "does not exist: no object is under it"),
        (
            "only-markers/",
            {"_SUCCESS": "", "empty.csv": ""},
            "is empty: it holds only markers or empty objects, no data",
        ),
    ],
)
def test_a_dataset_without_data_is_rejected_before_any_job_starts(deployment, folder, objects, rule):
    """Guards issue 12 point 17: refused at admission with the path and the reason; nothing is claimed."""
    events = deployment.events()
    for name, data in objects.items():
        deployment.upload(folder + name, data)
    request_id = f"no-data-{folder.strip('/')}"
    dataset = f"gs://{deployment.data_bucket}/{folder}"
    assert deployment.request(tabular_request(request_id, dataset)) == 200
    rejected = events.wait_for(request_id, "rejected", timeout=60)
    assert rejected.errors == [f"dataset.uri: {dataset} {rule}; put the data (CSV or Parquet files) under it first"]
    assert deployment.record(f"request:{request_id}") is None
    assert events.states(request_id) == ["rejected"]


def test_a_dataset_without_the_target_column_is_rejected_before_any_job_starts(deployment):
    """A marker that names no target on a CSV with no `target` column used to start a job that failed a minute in
    with "exited with a non-zero status" (issue 44): admission reads the header and names the column."""
    events = deployment.events()
    deployment.upload("no-target/part-0.csv", "a,b,label\n1,2,x\n3,4,y\n")
    dataset = f"gs://{deployment.data_bucket}/no-target/"
    assert deployment.request(tabular_request("no-target-1", dataset)) == 200
    rejected = events.wait_for("no-target-1", "rejected", timeout=60)
    assert rejected.errors == [
        f"dataset.target: column 'y' (the column to predict) is not in the header of {dataset}part-0.csv "
        "(its columns: 'a', 'b', 'label')"
    ]
    assert deployment.record("request:no-target-1") is None


def test_a_dataset_without_csv_or_parquet_fails_with_reason_user_naming_the_dataset(deployment):
    events = deployment.events()
    deployment.upload("notes/readme.txt", "not a table")
    dataset = f"gs://{deployment.data_bucket}/notes/"
    assert deployment.request(tabular_request("no-table-1", dataset)) == 200
    failed = events.wait_for("no-table-1", "failed", timeout=240, act=deployment.reconcile)
    assert failed.reason == "user"
    assert "exited with a non-zero status" in failed.message
    assert f"no CSV or Parquet files at '{dataset}'" in failed.message  # the trainer's own words
    assert "retrying" not in events.states("no-table-1")


def test_an_unwritable_output_dir_fails_with_reason_user_naming_the_folder(deployment):
    """Only a custom image may write outside the control bucket (issue 24, point 4): this one fails writing its
    metrics to an allowed output bucket that does not exist."""
    events = deployment.events()
    output = f"gs://{UNWRITABLE}/runs/unwritable-1/"
    request = fake_node_request("unwritable-1", "--metrics", "{}", output_dir=output)
    assert deployment.request(request) == 200
    failed = events.wait_for("unwritable-1", "failed", timeout=240, act=deployment.reconcile)
    assert failed.reason == "user"
    assert f"Nothing was written under {output}" in failed.message
