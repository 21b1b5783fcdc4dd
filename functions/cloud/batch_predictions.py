"""Vertex AI's BatchPredictionJobs over the JobService's REST API (v1), as functions/cloud/vertex.py calls it for
CustomJobs: the same endpoint (the regional one, or `vertex_endpoint` for the local stack), the same retry policy and
Google's error shape.

The calls and their REST forms (googleapis google/cloud/aiplatform/v1/job_service.proto; python-aiplatform's
job_service/transports/rest_base.py):
  CreateBatchPredictionJob  POST /v1/{parent=projects/*/locations/*}/batchPredictionJobs   (body: the job)
  GetBatchPredictionJob     GET  /v1/{name=projects/*/locations/*/batchPredictionJobs/*}
  ListBatchPredictionJobs   GET  /v1/{parent=projects/*/locations/*}/batchPredictionJobs   (filter `labels.k="v"`)
  CancelBatchPredictionJob  POST /v1/{name=projects/*/locations/*/batchPredictionJobs/*}:cancel
CreateBatchPredictionJob takes no request id and is not idempotent: the job carries a label whose value is the
caller's key, and the job is looked up by it before creating, and again before each retry (as CustomJobs are,
functions/cloud/job_labels.py).
"""

from __future__ import annotations

from typing import Any

from functions.cloud.batch_snapshot import BatchPrediction
from functions.cloud.failures import FAILED_PRECONDITION, NOT_FOUND
from functions.cloud.retry import RetryPolicy
from functions.cloud.vertex import POLICY, CallRejected, VertexApi, _time


def batch_prediction_of(body: dict[str, Any]) -> BatchPrediction:
    error = body.get("error") or {}
    stats = body.get("completionStats") or {}
    return BatchPrediction(
        name=str(body["name"]),
        state=str(body.get("state", "JOB_STATE_UNSPECIFIED")),
        model=str(body.get("model", "")),
        model_version_id=str(body.get("modelVersionId", "")),
        labels=dict(body.get("labels") or {}),
        output_directory=str((body.get("outputInfo") or {}).get("gcsOutputDirectory", "")),
        successful_count=int(stats.get("successfulCount", 0)),  # int64: a string in JSON
        failed_count=int(stats.get("failedCount", 0)),
        error_code=int(error.get("code", 0)),
        error_message=str(error.get("message", "")),
        create_time=_time(body.get("createTime")),
        end_time=_time(body.get("endTime")),
    )


class VertexBatchPredictions(VertexApi):
    def __init__(self, project: str, region: str, endpoint: str = "", policy: RetryPolicy = POLICY):
        super().__init__(project, region, endpoint, policy)

    def find(self, label: str, value: str) -> BatchPrediction | None:
        """The job labelled `label=value` (the newest, if several are); None when there is none."""
        params = {"filter": f'labels.{label}="{value}"'}
        found = self._call("ListBatchPredictionJobs", "GET", f"{self.parent}/batchPredictionJobs", params=params)
        jobs = [batch_prediction_of(job) for job in found.get("batchPredictionJobs") or []]
        return max(jobs, key=lambda job: job.name.rsplit("/", 1)[1]) if jobs else None

    def find_or_create(self, job: dict[str, Any], label: str) -> tuple[BatchPrediction, bool]:
        """(the job, adopted): the job labelled with `job`'s own `label` value if one exists, else a new one from `job`
        (the REST BatchPredictionJob: displayName, model, inputConfig, outputConfig, labels, …). Before each retry of
        the create (its failed attempt may have taken effect) the job is looked for again."""
        value = job["labels"][label]
        existing = self.find(label, value)
        if existing is not None:
            return existing, True
        created = self._call(
            "CreateBatchPredictionJob",
            "POST",
            f"{self.parent}/batchPredictionJobs",
            before_retry=lambda: self.find(label, value),
            json=job,
        )
        return (created, True) if isinstance(created, BatchPrediction) else (batch_prediction_of(created), False)

    def get(self, name: str) -> BatchPrediction | None:
        """The job; None when it does not exist (deleted)."""
        try:
            return batch_prediction_of(self._call("GetBatchPredictionJob", "GET", name))
        except CallRejected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def cancel(self, name: str) -> None:
        """Ask Vertex to cancel; a job that has already ended (FAILED_PRECONDITION) or is gone is left alone."""
        try:
            self._call("CancelBatchPredictionJob", "POST", f"{name}:cancel", json={})
        except CallRejected as exc:
            if exc.code not in (FAILED_PRECONDITION, NOT_FOUND):
                raise
