"""Vertex AI's BatchPredictionJobs on the local JobService (served over REST by batch_rest.py): created QUEUED, then
PENDING, RUNNING and SUCCEEDED, FAILED (with its error) or CANCELLED (CANCELLING between), each run by batch_runner.py
on a thread of its own with the model version the job named, resolved once when it was created.

The rules (sources in local/FIDELITY.md, "Vertex AI batch prediction"):
- Create refuses what batch_rules.create_problems finds (INVALID_ARGUMENT naming the field), and a model, version or
  alias the Model Registry does not know (NOT_FOUND); `model_version_id` is the version the name resolved to.
- The predictions go to `<outputUriPrefix>/prediction-<model display name>-<create time>/predictions_0001.csv`, …
  (`output_info.gcs_output_directory`); `completion_stats.successful_count` counts the rows predicted.
- Cancel on an ended job and delete of one that has not ended are FAILED_PRECONDITION; delete is an Operation.
- A restarted JobService runs again the jobs that had not ended, and ends those that were being cancelled.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
from google.cloud.aiplatform_v1.types import (
    BatchPredictionJob,
    CreateBatchPredictionJobRequest,
    JobState,
    ListBatchPredictionJobsRequest,
    ListBatchPredictionJobsResponse,
)
from google.longrunning import operations_pb2
from google.rpc import code_pb2, status_pb2

from local.jobservice.batch_rules import OUTPUT_ONLY, batch_command, create_problems, output_directory
from local.jobservice.batch_runner import BatchRun, BatchRunError
from local.jobservice.batch_store import BatchJobStore, job_number
from local.jobservice.filters import FilterError, job_comparison, parse_query
from local.jobservice.model_listing import one_page
from local.jobservice.model_registry import ModelRegistry, done_delete_operation
from local.jobservice.model_rules import RegistryError, refuse_invalid
from local.jobservice.replicas import ExecutionSettings

State = JobState  # the type checker sees its members as int: _advance and _end take int
ACTIVE = frozenset(
    {State.JOB_STATE_QUEUED, State.JOB_STATE_PENDING, State.JOB_STATE_RUNNING, State.JOB_STATE_CANCELLING}
)
ENDED = frozenset({State.JOB_STATE_SUCCEEDED, State.JOB_STATE_FAILED, State.JOB_STATE_CANCELLED})


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def batch_filter(text: str) -> Callable[[BatchPredictionJob], bool]:
    """ListBatchPredictionJobsRequest.filter: `state`, `display_name`, `create_time` and `labels.KEY` as for
    CustomJobs (filters.py, with its refusal of a hyphenated label key); a bad filter is INVALID_ARGUMENT."""

    def comparison(field: str, operator: str, value: str) -> Callable[[object], bool]:
        if field.startswith("labels.") and "-" in field:
            raise FilterError(
                f"{field}: the local JobService refuses a '-' in a label key; name labels with underscores"
            )
        return job_comparison(field, operator, value)

    try:
        matches = parse_query(text, comparison)
    except FilterError as error:
        refuse_invalid([("filter", str(error))])
        raise AssertionError("refuse_invalid raises") from None
    return lambda job: matches(BatchPredictionJob.pb(job))


class BatchPredictions:
    def __init__(
        self,
        store: BatchJobStore,
        registry: ModelRegistry,
        settings: ExecutionSettings,
        runs_dir: Path,
        now: Callable[[], dt.datetime] = _utc_now,
    ):
        self._store, self._registry, self._settings = store, registry, settings
        self._runs_dir = runs_dir
        self._now = now
        self._runs: dict[str, BatchRun] = {}
        self._threads: list[threading.Thread] = []
        self._operations: dict[str, operations_pb2.Operation] = {}
        self._lock = threading.Lock()
        self._stopping = False

    # --- the API

    def create(self, request: CreateBatchPredictionJobRequest) -> BatchPredictionJob:
        refuse_invalid(create_problems(request))
        job = BatchPredictionJob.deserialize(BatchPredictionJob.serialize(request.batch_prediction_job))
        for output_only in OUTPUT_ONLY:
            delattr(job, output_only)
        job.model_version_id = self._registry.get(job.model).version_id  # NOT_FOUND for an unknown model
        now = self._now()
        job.name = f"{request.parent}/batchPredictionJobs/{self._store.new_id()}"
        job.state, job.create_time, job.update_time = State.JOB_STATE_QUEUED, now, now
        created = self._store.add(job)
        self._start(created.name)
        return created

    def get(self, name: str) -> BatchPredictionJob:
        job = self._store.get(name)
        if job is None:
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"The BatchPredictionJob {name} does not exist.")
        return job

    def list(self, request: ListBatchPredictionJobsRequest) -> ListBatchPredictionJobsResponse:
        matches = batch_filter(request.filter)
        if request.page_size < 0:
            refuse_invalid([("page_size", f"must not be negative, got {request.page_size}")])
        listed = [(job_number(job.name), job) for job in self._store.jobs(request.parent) if matches(job)]
        page, token = one_page(listed, request.page_size, request.page_token)
        return ListBatchPredictionJobsResponse(batch_prediction_jobs=page, next_page_token=token)

    def cancel(self, name: str) -> None:
        """CancelBatchPredictionJob: "Starts asynchronous cancellation"; the job ends CANCELLED."""
        self.get(name)

        def cancelling(job: BatchPredictionJob) -> None:
            if job.state in ENDED or job.state == State.JOB_STATE_CANCELLING:
                raise RegistryError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"The BatchPredictionJob has already ended ({job.state.name})."
                )
            job.state, job.update_time = State.JOB_STATE_CANCELLING, self._now()  # type: ignore[assignment]

        self._store.update(name, cancelling)
        with self._lock:
            run = self._runs.get(name)
        if run is not None:
            threading.Thread(target=run.cancel, name=f"cancel-{job_number(name)}", daemon=True).start()

    def delete(self, name: str) -> operations_pb2.Operation:
        job = self.get(name)
        if job.state not in ENDED:
            raise RegistryError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"The BatchPredictionJob is {job.state.name}; cancel it and wait for it to end before deleting it.",
            )
        self._store.delete(name)
        operation = done_delete_operation(f"{name}/operations/{self._store.new_id()}", self._now())
        self._operations[operation.name] = operation
        return operation

    def get_operation(self, name: str) -> operations_pb2.Operation:
        operation = self._operations.get(name)
        if operation is None:
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
        return operation

    # --- the service's life

    def resume_all(self) -> None:
        """Carry on with what a previous server left: run again the jobs that had not ended; end those being
        cancelled."""
        for job in self._store.jobs():
            if job.state == State.JOB_STATE_CANCELLING:
                self._end(job.name, State.JOB_STATE_CANCELLED, code_pb2.CANCELLED, "BatchPredictionJob was cancelled.")
            elif job.state in ACTIVE:
                self._start(job.name)

    def shutdown(self, stop_jobs: bool = True) -> None:
        """With `stop_jobs`, every run is stopped and its job fails (as the JobService's CustomJobs do)."""
        if not stop_jobs:
            return
        with self._lock:
            self._stopping = True
            runs = list(self._runs.values())
        for run in runs:
            run.cancel()
        for thread in list(self._threads):
            thread.join(timeout=self._settings.cancel_grace + 5)

    # --- a run

    def _start(self, name: str) -> None:
        thread = threading.Thread(target=self._run, args=(name,), name=f"batch-{job_number(name)}", daemon=True)
        self._threads = [*(alive for alive in self._threads if alive.is_alive()), thread]
        thread.start()

    def _run(self, name: str) -> None:
        run: BatchRun | None = None
        try:
            run = self._prepare(name)
            if run is None:
                return
            run.run()
            if self._stopping:
                self._end(
                    name,
                    State.JOB_STATE_FAILED,
                    code_pb2.ABORTED,
                    "The local JobService stopped while the job was running.",
                    run,
                )
            elif run.cancelled or self.get(name).state == State.JOB_STATE_CANCELLING:
                self._end(name, State.JOB_STATE_CANCELLED, code_pb2.CANCELLED, "BatchPredictionJob was cancelled.", run)
            else:
                self._end(name, State.JOB_STATE_SUCCEEDED, run=run)
        except BatchRunError as error:
            self._end(name, State.JOB_STATE_FAILED, error.code, error.message, run)
        except Exception as error:  # a bug here must end the job, not leave it running for ever
            self._end(name, State.JOB_STATE_FAILED, code_pb2.INTERNAL, f"Internal error: {error}", run)
        finally:
            with self._lock:
                self._runs.pop(name, None)

    def _prepare(self, name: str) -> BatchRun | None:
        """PENDING, the version's container checked, then RUNNING with its output folder; None when cancelled."""
        if not self._advance(name, State.JOB_STATE_PENDING):
            return None
        job = self.get(name)
        model_name = f"{job.model.split('@', 1)[0]}@{job.model_version_id}"
        try:
            model = self._registry.get(model_name)
        except RegistryError as error:
            raise BatchRunError(code_pb2.NOT_FOUND, error.message) from None
        command = batch_command(model)
        if command is None:
            raise BatchRunError(
                code_pb2.FAILED_PRECONDITION,
                f"The local JobService batch-predicts only with the built-in trainer's serving container "
                f"(command python -m trainer.serve); {model_name} has command {list(model.container_spec.command)}.",
            )
        if not model.artifact_uri:
            raise BatchRunError(
                code_pb2.FAILED_PRECONDITION, f"{model_name} has no artifact_uri to load the model from."
            )
        directory = output_directory(
            job.output_config.gcs_destination.output_uri_prefix, model.display_name, job.create_time
        )
        run = BatchRun(
            command, model.artifact_uri, list(job.input_config.gcs_source.uris), directory, self._settings,
            self._runs_dir / str(job_number(name)),
        )  # fmt: skip
        with self._lock:
            if self._stopping:  # shutdown stops the runs it finds; this one would start after it
                raise BatchRunError(code_pb2.ABORTED, "The local JobService stopped while the job was running.")
            self._runs[name] = run

        def running(job: BatchPredictionJob) -> None:
            job.output_info.gcs_output_directory = directory

        if not self._advance(name, State.JOB_STATE_RUNNING, running):
            return None
        return run

    def _advance(self, name: str, state: int, change: Callable[[BatchPredictionJob], None] | None = None) -> bool:
        """Move an active job to `state`; False (and the job ended CANCELLED) when it is being cancelled."""
        moved = True

        def advance(job: BatchPredictionJob) -> None:
            nonlocal moved
            if job.state == State.JOB_STATE_CANCELLING:
                moved = False
                return
            now = self._now()
            job.state, job.update_time = state, now  # type: ignore[assignment]  # a JobState member
            if state == State.JOB_STATE_RUNNING and "start_time" not in job:
                job.start_time = now
            if change is not None:
                change(job)

        self._store.update(name, advance)
        if not moved:
            self._end(name, State.JOB_STATE_CANCELLED, code_pb2.CANCELLED, "BatchPredictionJob was cancelled.")
        return moved

    def _end(self, name: str, state: int, code: int = 0, message: str = "", run: BatchRun | None = None) -> None:
        def end(job: BatchPredictionJob) -> None:
            now = self._now()
            job.state, job.update_time, job.end_time = state, now, now  # type: ignore[assignment]
            if code:
                job.error = status_pb2.Status(code=code, message=message)
            if run is not None:
                job.completion_stats.successful_count = run.rows

        self._store.update(name, end)
