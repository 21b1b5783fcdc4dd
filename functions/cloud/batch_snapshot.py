"""What the controller keeps of a Vertex BatchPredictionJob (its REST form): plain data, apart from the adapter
(functions/cloud/batch_predictions.py) that reads it, so that functions/cloud/ports.py can name it without importing
the adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

# google.cloud.aiplatform.v1.JobState: the states a BatchPredictionJob ends in.
ENDED_STATES = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"})


@dataclass(frozen=True)
class BatchPrediction:
    name: str  # projects/P/locations/L/batchPredictionJobs/ID
    state: str  # a JobState name
    model: str = ""  # as the job names it (models/M@ALIAS, …)
    model_version_id: str = ""  # the version that predicts
    labels: dict[str, str] = field(default_factory=dict)
    output_directory: str = ""  # outputInfo.gcsOutputDirectory: gs://…/prediction-<model>-<time>
    successful_count: int = 0  # completionStats: rows predicted
    failed_count: int = 0
    error_code: int = 0  # google.rpc.Code of a FAILED or CANCELLED job
    error_message: str = ""
    create_time: datetime | None = None
    end_time: datetime | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES
