"""Vertex's BatchPredictionJobs on the local JobService's REST port (issue 41, points 3 and 5): the stock
`JobServiceClient` with `transport="rest"` creates a job for a model version trained here and registered with the
controller's container spec; the job runs `python -m trainer.predict` on the input files (a Cloud Storage wildcard),
writes Vertex's folder layout on fake-gcs-server and counts the rows; a bad file fails the job saying why; cancel,
delete, listings by label and state, refusals naming the field; and the controller's adapter on the same service."""

from __future__ import annotations

import io
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
import requests
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.aiplatform_v1 import BatchPredictionJob, JobServiceClient, JobState, ModelServiceClient

from functions.cloud.batch_predictions import VertexBatchPredictions
from functions.cloud.retry import RetryPolicy
from functions.models.versions import SERVING_COMMAND, SERVING_PORT
from local.fake_gcs import FakeGcs
from local.jobservice.standalone import JobServiceProcess
from local.names import LOCAL_PROJECT, LOCAL_TRAINER_IMAGE

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARENT = f"projects/{LOCAL_PROJECT}/locations/us-central1"
ENDED = (JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED)


@dataclass(frozen=True)
class Scoring:
    bucket: str
    model: str  # projects/P/locations/L/models/M
    display_name: str
    files: dict[str, bytes]  # gs:// URI → the CSV scored there


def rest_clients(jobservice: JobServiceProcess) -> tuple[JobServiceClient, ModelServiceClient]:
    options = {"api_endpoint": jobservice.rest_url.rstrip("/")}
    return (
        JobServiceClient(transport="rest", client_options=options, credentials=AnonymousCredentials()),
        ModelServiceClient(transport="rest", client_options=options, credentials=AnonymousCredentials()),
    )


def breast_cancer() -> pa.Table:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    columns = {name.replace(" ", "_"): data.data[:, i] for i, name in enumerate(data.feature_names)}
    return pa.table({**columns, "target": data.target})


def csv_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pa_csv.write_csv(table, buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def scoring(jobservice: JobServiceProcess, fake_gcs: FakeGcs, tmp_path_factory: pytest.TempPathFactory) -> Scoring:
    """A model trained here into the bucket, registered as the controller registers the built-in trainer's versions
    (functions/models/versions.py: the trainer image serving with `python -m trainer.serve`), with the `champion`
    alias; two CSV files to score in a folder beside a `_SUCCESS` marker."""
    bucket = f"scoring-{uuid.uuid4().hex[:8]}"
    client = storage.Client(project=LOCAL_PROJECT, credentials=AnonymousCredentials())
    client.create_bucket(bucket)
    table, folder = breast_cancer(), tmp_path_factory.mktemp("batch")
    (folder / "train.csv").write_bytes(csv_bytes(table))
    artifacts = f"gs://{bucket}/runs/r1/model/"
    trained = subprocess.run(
        [sys.executable, "-m", "trainer.train", "--data", str(folder / "train.csv"), "--target", "target",
         "--epochs", "2", "--batch-size", "64", "--seed", "5", "--model-dir", artifacts,
         "--checkpoint-dir", str(folder / "checkpoints"), "--tensorboard-dir", str(folder / "logs")],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(folder), **fake_gcs.env},
        capture_output=True, text=True, timeout=240, cwd=REPO,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    files = {}
    for index, rows in enumerate((table.slice(0, 200), table.slice(200, 150))):
        name = f"score/2026-11-27/part-{index}.csv"
        files[f"gs://{bucket}/{name}"] = csv_bytes(rows.drop_columns(["target"]))
        client.bucket(bucket).blob(name).upload_from_string(files[f"gs://{bucket}/{name}"])
    client.bucket(bucket).blob("score/2026-11-27/_SUCCESS").upload_from_string(b"")
    model_id = f"churn-{uuid.uuid4().hex[:8]}"
    container = {
        "image_uri": LOCAL_TRAINER_IMAGE,
        "command": SERVING_COMMAND,
        "ports": [{"container_port": SERVING_PORT}],
    }
    model = {
        "display_name": "churn",
        "artifact_uri": artifacts,
        "container_spec": container,
        "version_aliases": ["champion"],
    }
    _, models = rest_clients(jobservice)
    models.upload_model(request={"parent": PARENT, "model": model, "model_id": model_id}).result(timeout=30)
    return Scoring(bucket, f"{PARENT}/models/{model_id}", "churn", files)


def batch_job(scoring: Scoring, uris: list[str], **labels: str) -> dict:
    return {
        "display_name": "score 2026-11-27",
        "model": f"{scoring.model}@champion",
        "input_config": {"instances_format": "csv", "gcs_source": {"uris": uris}},
        "output_config": {
            "predictions_format": "csv",
            "gcs_destination": {"output_uri_prefix": f"gs://{scoring.bucket}/scored/2026-11-27"},
        },
        "dedicated_resources": {"machine_spec": {"machine_type": "n1-standard-4"}, "starting_replica_count": 1},
        "labels": {"trainctl_scoring": uuid.uuid4().hex[:12], **labels},
    }


def wait_until_ended(client: JobServiceClient, name: str, timeout: float = 120) -> BatchPredictionJob:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get_batch_prediction_job(name=name)
        if job.state in ENDED:
            return job
        assert time.monotonic() < deadline, f"{name} is still {job.state.name}"
        time.sleep(0.2)


def read_gcs(uri: str) -> bytes:
    bucket, name = uri.removeprefix("gs://").split("/", 1)
    client = storage.Client(project=LOCAL_PROJECT, credentials=AnonymousCredentials())
    return client.bucket(bucket).blob(name).download_as_bytes()


def predicted_here(scoring: Scoring, uri: str, folder: Path, fake_gcs: FakeGcs) -> pa.Table:
    """What `python -m trainer.predict` writes for the file, run by hand."""
    out = folder / f"{uuid.uuid4().hex}.csv"
    model_dir = f"gs://{scoring.bucket}/runs/r1/model/"
    subprocess.run(
        [sys.executable, "-m", "trainer.predict", "--model-dir", model_dir, "--data", uri, "--out", str(out)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(folder), **fake_gcs.env},
        check=True, capture_output=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    return pa_csv.read_csv(out)


def test_a_batch_prediction_job_scores_a_folder_with_the_champion_in_vertex_layout(
    jobservice: JobServiceProcess, fake_gcs: FakeGcs, scoring: Scoring, tmp_path: Path
):
    jobs, _ = rest_clients(jobservice)
    pattern = f"gs://{scoring.bucket}/score/2026-11-27/*.csv"  # the marker beside the files is not read

    created = jobs.create_batch_prediction_job(parent=PARENT, batch_prediction_job=batch_job(scoring, [pattern]))

    assert created.state == JobState.JOB_STATE_QUEUED
    assert created.model_version_id == "1"
    job = wait_until_ended(jobs, created.name)
    assert job.state == JobState.JOB_STATE_SUCCEEDED, job.error
    directory = job.output_info.gcs_output_directory
    stamp = created.create_time.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert directory == f"gs://{scoring.bucket}/scored/2026-11-27/prediction-churn-{stamp}"
    assert job.completion_stats.successful_count == 350
    assert job.start_time and job.end_time
    for index, uri in enumerate(sorted(scoring.files), start=1):
        written = pa_csv.read_csv(io.BytesIO(read_gcs(f"{directory}/predictions_{index:04d}.csv")))
        expected = predicted_here(scoring, uri, tmp_path, fake_gcs)
        assert written.num_rows == expected.num_rows
        assert written.column("prediction").to_pylist() == expected.column("prediction").to_pylist()
        assert written.column("confidence").to_pylist() == pytest.approx(expected.column("confidence").to_pylist())


def test_a_file_that_is_not_the_models_input_fails_the_job_saying_why(jobservice: JobServiceProcess, scoring: Scoring):
    jobs, _ = rest_clients(jobservice)
    bad = f"gs://{scoring.bucket}/score/bad/wrong.csv"
    client = storage.Client(project=LOCAL_PROJECT, credentials=AnonymousCredentials())
    client.bucket(scoring.bucket).blob("score/bad/wrong.csv").upload_from_string(b"colour,size\nred,3\n")

    created = jobs.create_batch_prediction_job(parent=PARENT, batch_prediction_job=batch_job(scoring, [bad]))

    job = wait_until_ended(jobs, created.name)
    assert job.state == JobState.JOB_STATE_FAILED
    assert job.error.code == 3
    assert bad in job.error.message and "trained on" in job.error.message
    assert job.end_time


def test_a_wildcard_that_matches_nothing_fails_the_job(jobservice: JobServiceProcess, scoring: Scoring):
    jobs, _ = rest_clients(jobservice)
    pattern = f"gs://{scoring.bucket}/score/none/*.csv"
    created = jobs.create_batch_prediction_job(parent=PARENT, batch_prediction_job=batch_job(scoring, [pattern]))
    job = wait_until_ended(jobs, created.name)
    assert job.state == JobState.JOB_STATE_FAILED
    assert job.error.message == f"No files match {pattern}."


def test_a_cancelled_job_ends_cancelled_and_can_then_be_deleted(jobservice: JobServiceProcess, scoring: Scoring):
    jobs, _ = rest_clients(jobservice)
    created = jobs.create_batch_prediction_job(
        parent=PARENT, batch_prediction_job=batch_job(scoring, sorted(scoring.files))
    )
    # FAILED_PRECONDITION is HTTP 400 (google/rpc/code.proto), which the REST client raises as BadRequest.
    with pytest.raises(exceptions.BadRequest, match="cancel it and wait for it to end"):
        jobs.delete_batch_prediction_job(name=created.name)  # not ended yet

    jobs.cancel_batch_prediction_job(name=created.name)

    job = wait_until_ended(jobs, created.name)
    assert job.state == JobState.JOB_STATE_CANCELLED
    assert job.error.code == 1
    with pytest.raises(exceptions.BadRequest, match="already ended"):
        jobs.cancel_batch_prediction_job(name=created.name)
    jobs.delete_batch_prediction_job(name=created.name).result(timeout=10)
    with pytest.raises(exceptions.NotFound):
        jobs.get_batch_prediction_job(name=created.name)


def test_jobs_are_listed_by_label_and_state_a_page_at_a_time(jobservice: JobServiceProcess, scoring: Scoring):
    jobs, _ = rest_clients(jobservice)
    batch = uuid.uuid4().hex[:10]
    missing = f"gs://{scoring.bucket}/score/none/*.csv"  # fails at once: no process to wait for
    names = [
        jobs.create_batch_prediction_job(
            parent=PARENT, batch_prediction_job=batch_job(scoring, [missing], batch=batch)
        ).name
        for _ in range(3)
    ]
    for name in names:
        wait_until_ended(jobs, name)

    by_label = jobs.list_batch_prediction_jobs(
        request={"parent": PARENT, "filter": f'labels.batch="{batch}"', "page_size": 2}
    )
    assert [job.name for job in by_label] == names  # the pager follows the token
    request = {"parent": PARENT, "filter": f'labels.batch="{batch}"', "page_size": 2}
    first_page = next(iter(jobs.list_batch_prediction_jobs(request=request).pages))
    assert len(first_page.batch_prediction_jobs) == 2 and first_page.next_page_token
    failed = f'labels.batch="{batch}" AND state="JOB_STATE_FAILED"'
    assert len(list(jobs.list_batch_prediction_jobs(request={"parent": PARENT, "filter": failed}))) == 3
    running = f'labels.batch="{batch}" AND state="JOB_STATE_RUNNING"'
    assert list(jobs.list_batch_prediction_jobs(request={"parent": PARENT, "filter": running})) == []


def test_requests_vertex_refuses_name_the_field(jobservice: JobServiceProcess, scoring: Scoring):
    url = f"{jobservice.rest_url}v1/{PARENT}/batchPredictionJobs"
    body = {
        "displayName": "score",
        "model": f"{scoring.model}@champion",
        "inputConfig": {"instancesFormat": "tf-record", "gcsSource": {"uris": [f"gs://{scoring.bucket}/x.csv"]}},
        "outputConfig": {"predictionsFormat": "csv", "gcsDestination": {"outputUriPrefix": f"gs://{scoring.bucket}/o"}},
    }
    refused = requests.post(url, json=body, timeout=10)
    assert refused.status_code == 400
    [detail] = refused.json()["error"]["details"]
    assert [v["field"] for v in detail["fieldViolations"]] == ["batch_prediction_job.input_config.instances_format"]

    body["inputConfig"]["instancesFormat"] = "csv"
    body["model"] = f"{scoring.model}@nosuchalias"
    assert requests.post(url, json=body, timeout=10).status_code == 404
    body["model"] = f"{scoring.model}@champion"
    body["labels"] = {"Bad Key": "x"}
    refused = requests.post(url, json=body, timeout=10)
    assert refused.status_code == 400 and "batch_prediction_job.labels.Bad Key" in refused.text


def rest_body(scoring: Scoring, key: str) -> dict:
    """A BatchPredictionJob in its REST form, as the controller sends it, labelled with `key`."""
    missing = f"gs://{scoring.bucket}/score/none/*.csv"  # fails at once: no process to wait for
    return {
        "displayName": "score",
        "model": f"{scoring.model}@champion",
        "inputConfig": {"instancesFormat": "csv", "gcsSource": {"uris": [missing]}},
        "outputConfig": {"predictionsFormat": "csv", "gcsDestination": {"outputUriPrefix": f"gs://{scoring.bucket}/o"}},
        "labels": {"trainctl_scoring": key},
    }


def test_the_adapter_creates_once_and_finds_the_job_by_its_label(jobservice: JobServiceProcess, scoring: Scoring):
    adapter = VertexBatchPredictions(LOCAL_PROJECT, "us-central1", endpoint=jobservice.rest_url)
    key = uuid.uuid4().hex[:12]
    body = rest_body(scoring, key)

    created, adopted = adapter.find_or_create(body, "trainctl_scoring")
    again, adopted_again = adapter.find_or_create(body, "trainctl_scoring")

    assert (adopted, adopted_again) == (False, True)
    assert again.name == created.name and created.model_version_id == "1"
    deadline = time.monotonic() + 60
    while not (found := adapter.get(created.name)) or not found.ended:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert found.state == "JOB_STATE_FAILED" and "No files match" in found.error_message
    assert adapter.find("trainctl_scoring", key) == found
    assert adapter.find("trainctl_scoring", "nothing-here") is None
    adapter.cancel(created.name)  # ended: left alone
    assert adapter.get(f"{PARENT}/batchPredictionJobs/1") is None


def test_the_adapter_adopts_the_job_a_create_made_when_its_answer_was_lost(
    jobservice: JobServiceProcess, scoring: Scoring
):
    """CreateBatchPredictionJob is not idempotent: after a create that failed (here UNAVAILABLE once the job was
    made), the adapter looks the job up by its label before trying again, and adopts it."""
    fast = RetryPolicy(attempts=3, first_pause=0.05, max_pause=0.1, call_timeout=10)
    adapter = VertexBatchPredictions(LOCAL_PROJECT, "us-central1", endpoint=jobservice.rest_url, policy=fast)
    key = uuid.uuid4().hex[:12]
    jobservice.control.fail_next_creates("UNAVAILABLE", after_create=True, method="CreateBatchPredictionJob")
    try:
        created, adopted = adapter.find_or_create(rest_body(scoring, key), "trainctl_scoring")
    finally:
        jobservice.control.clear_faults()

    assert adopted
    jobs, _ = rest_clients(jobservice)
    listed = jobs.list_batch_prediction_jobs(request={"parent": PARENT, "filter": f'labels.trainctl_scoring="{key}"'})
    assert [job.name for job in listed] == [created.name]
