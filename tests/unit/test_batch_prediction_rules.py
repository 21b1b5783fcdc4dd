"""The rules of the local Vertex's BatchPredictionJobs without any process (local/jobservice/batch_rules.py,
batch_runner.py's readings, batch_jobs.py's filter and state machine on a registry in memory): what create refuses
and names, Vertex's output folder and file names, Cloud Storage wildcards, the rows trainer.predict reports."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import grpc
import pytest
from google.cloud.aiplatform_v1.types import (
    BatchPredictionJob,
    CreateBatchPredictionJobRequest,
    JobState,
    ListBatchPredictionJobsRequest,
    Model,
    UploadModelRequest,
)

from local.jobservice.batch_jobs import BatchPredictions, batch_filter
from local.jobservice.batch_rules import (
    batch_command,
    create_problems,
    output_directory,
    predictions_file,
    wildcard_matcher,
    wildcard_prefix,
)
from local.jobservice.batch_runner import rows_written
from local.jobservice.batch_store import BatchJobStore
from local.jobservice.model_registry import ModelRegistry
from local.jobservice.model_rules import RegistryError
from local.jobservice.replicas import ExecutionSettings

PARENT = "projects/p/locations/us-central1"
MODEL = f"{PARENT}/models/churn"


def job(**fields: object) -> dict:
    return {
        "display_name": "score",
        "model": f"{MODEL}@champion",
        "input_config": {"instances_format": "csv", "gcs_source": {"uris": ["gs://data-bucket/score/*.csv"]}},
        "output_config": {
            "predictions_format": "csv",
            "gcs_destination": {"output_uri_prefix": "gs://data-bucket/out"},
        },
        **fields,
    }


def problems(**fields: object) -> list[str]:
    request = CreateBatchPredictionJobRequest(parent=PARENT, batch_prediction_job=job(**fields))
    return [field for field, _ in create_problems(request)]


def test_a_complete_request_has_no_problem():
    assert problems() == []
    assert problems(dedicated_resources={"machine_spec": {"machine_type": "n1-standard-4"}}) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"display_name": ""}, "batch_prediction_job.display_name"),
        ({"model": ""}, "batch_prediction_job.model"),
        ({"model": "models/churn"}, "batch_prediction_job.model"),
        ({"model": "projects/p/locations/europe-west4/models/churn"}, "batch_prediction_job.model"),
        (
            {"input_config": {"instances_format": "jsonl", "gcs_source": {"uris": ["gs://data-bucket/a"]}}},
            "batch_prediction_job.input_config.instances_format",
        ),
        (
            {"input_config": {"instances_format": "parquet", "gcs_source": {"uris": ["gs://data-bucket/a"]}}},
            "batch_prediction_job.input_config.instances_format",
        ),
        (
            {"input_config": {"instances_format": "csv", "gcs_source": {}}},
            "batch_prediction_job.input_config.gcs_source.uris",
        ),
        (
            {"input_config": {"instances_format": "csv", "gcs_source": {"uris": ["s3://x/y"]}}},
            "batch_prediction_job.input_config.gcs_source.uris[0]",
        ),
        (
            {"input_config": {"instances_format": "csv", "bigquery_source": {"input_uri": "bq://p.d.t"}}},
            "batch_prediction_job.input_config.bigquery_source",
        ),
        (
            {
                "output_config": {
                    "predictions_format": "bigquery",
                    "gcs_destination": {"output_uri_prefix": "gs://b-1/o"},
                }
            },
            "batch_prediction_job.output_config.predictions_format",
        ),
        ({"output_config": {"predictions_format": "csv"}}, "batch_prediction_job.output_config.gcs_destination"),
        ({"generate_explanation": True}, "batch_prediction_job.generate_explanation"),
        ({"instance_config": {"key_field": "id"}}, "batch_prediction_job.instance_config"),
        (
            {"dedicated_resources": {"starting_replica_count": 1}},
            "batch_prediction_job.dedicated_resources.machine_spec.machine_type",
        ),
        ({"labels": {"Bad": "x"}}, "batch_prediction_job.labels.Bad"),
    ],
)
def test_create_refuses_naming_the_field(fields: dict, field: str):
    assert problems(**fields) == [field]


def test_the_output_folder_and_files_are_named_as_vertex_names_them():
    created = dt.datetime(2026, 11, 27, 9, 5, 7, 123456, tzinfo=dt.UTC)
    directory = output_directory("gs://b-1/scored/", "churn", created)
    assert directory == "gs://b-1/scored/prediction-churn-2026-11-27T09:05:07.123Z"
    assert output_directory("gs://b-1/scored", "churn", created) == directory
    assert predictions_file(directory, 2, "csv") == f"{directory}/predictions_0002.csv"


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("gs://b-1/score/*.csv", "score/a.csv", True),
        ("gs://b-1/score/*.csv", "score/_SUCCESS", False),
        ("gs://b-1/score/*.csv", "score/day/a.csv", False),
        ("gs://b-1/score/**.csv", "score/day/a.csv", True),
        ("gs://b-1/score/part-?.csv", "score/part-1.csv", True),
        ("gs://b-1/score/part-[01].csv", "score/part-2.csv", False),
    ],
)
def test_wildcards_match_as_cloud_storage_matches_them(pattern: str, name: str, matches: bool):
    assert bool(wildcard_matcher(pattern).fullmatch(name)) is matches
    assert name.startswith(wildcard_prefix(pattern))


def test_only_the_builtin_serving_container_is_run_as_trainer_predict():
    served = Model(container_spec={"image_uri": "i", "command": ["python", "-m", "trainer.serve"]})
    assert batch_command(served)[1:] == ["-m", "trainer.predict"]  # type: ignore[index]
    assert batch_command(Model(container_spec={"image_uri": "i", "command": ["python", "-c", "exit(1)"]})) is None


def test_the_rows_come_from_trainer_predicts_own_log_line():
    text = 'noise\n{"severity": "INFO", "message": "predictions written", "rows": 42, "out": "gs://x"}\n'
    assert rows_written(text) == 42
    assert rows_written("Traceback\nValueError: bad\n") == 0


def test_the_filter_reads_labels_and_state_and_refuses_a_hyphenated_key():
    matches = batch_filter('labels.batch="b1" AND state="JOB_STATE_FAILED"')
    assert matches(BatchPredictionJob(labels={"batch": "b1"}, state=JobState.JOB_STATE_FAILED))
    assert not matches(BatchPredictionJob(labels={"batch": "b1"}, state=JobState.JOB_STATE_RUNNING))
    with pytest.raises(RegistryError) as refused:
        batch_filter('labels.trainctl-key="x"')
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def batches(tmp_path: Path) -> BatchPredictions:
    registry = ModelRegistry(upload_seconds=0)
    container = {"image_uri": "i", "command": ["python", "-m", "trainer.serve"]}
    model = {"display_name": "churn", "artifact_uri": "gs://b-1/m/", "container_spec": container}
    registry.upload(UploadModelRequest(parent=PARENT, model_id="churn", model=model))
    service = BatchPredictions(BatchJobStore(), registry, ExecutionSettings(), tmp_path)
    service._start = lambda name: None  # type: ignore[method-assign]  # no runs: the rules alone
    return service


def test_create_resolves_the_version_and_queues_the_job(batches: BatchPredictions):
    created = batches.create(CreateBatchPredictionJobRequest(parent=PARENT, batch_prediction_job=job(model=MODEL)))
    assert (created.state, created.model_version_id) == (JobState.JOB_STATE_QUEUED, "1")
    assert created.name.startswith(f"{PARENT}/batchPredictionJobs/")
    with pytest.raises(RegistryError) as unknown:
        batches.create(CreateBatchPredictionJobRequest(parent=PARENT, batch_prediction_job=job()))  # no @champion
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND


def test_a_queued_job_cancelled_ends_cancelled_before_it_runs(batches: BatchPredictions):
    created = batches.create(CreateBatchPredictionJobRequest(parent=PARENT, batch_prediction_job=job(model=MODEL)))
    batches.cancel(created.name)
    assert batches._prepare(created.name) is None  # the run sees the cancellation and never starts
    ended = batches.get(created.name)
    assert (ended.state, ended.error.code) == (JobState.JOB_STATE_CANCELLED, 1)
    with pytest.raises(RegistryError) as again:
        batches.cancel(created.name)
    assert again.value.code == grpc.StatusCode.FAILED_PRECONDITION
    batches.delete(created.name)
    listed = batches.list(ListBatchPredictionJobsRequest(parent=PARENT))
    assert list(listed.batch_prediction_jobs) == []


def test_a_restarted_service_knows_every_job_runs_again_the_unfinished_and_ends_the_cancelling(tmp_path: Path):
    registry = ModelRegistry(upload_seconds=0)
    store = BatchJobStore(tmp_path)
    states = {"1": JobState.JOB_STATE_RUNNING, "2": JobState.JOB_STATE_CANCELLING, "3": JobState.JOB_STATE_SUCCEEDED}
    for job_id, state in states.items():
        store.add(BatchPredictionJob(name=f"{PARENT}/batchPredictionJobs/{job_id}", display_name="s", state=state))
    restarted = BatchPredictions(BatchJobStore(tmp_path), registry, ExecutionSettings(), tmp_path)
    started: list[str] = []
    restarted._start = started.append  # type: ignore[method-assign]

    restarted.resume_all()

    assert started == [f"{PARENT}/batchPredictionJobs/1"]
    listed = restarted.list(ListBatchPredictionJobsRequest(parent=PARENT)).batch_prediction_jobs
    assert [job.state for job in listed] == [
        JobState.JOB_STATE_RUNNING,
        JobState.JOB_STATE_CANCELLED,
        JobState.JOB_STATE_SUCCEEDED,
    ]


def test_a_job_that_would_start_after_the_service_stopped_fails_without_running(batches: BatchPredictions):
    created = batches.create(CreateBatchPredictionJobRequest(parent=PARENT, batch_prediction_job=job(model=MODEL)))
    batches.shutdown(stop_jobs=True)

    batches._run(created.name)  # the job's thread, late

    ended = batches.get(created.name)
    assert (ended.state, ended.error.code) == (JobState.JOB_STATE_FAILED, 10)  # ABORTED, as a stopped CustomJob
