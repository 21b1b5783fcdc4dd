"""The local stand-in for the Cloud Logging sink that routes Vertex's job log lines to Pub/Sub
(reference/vertex.md §5.3): a transition hook that, for a state change, makes the LogEntry of the
"service" line Vertex writes for it (`resource.type="ml_job"`, `resource.labels.job_id`,
`resource.labels.task_name="service"`) and publishes it only when it passes the sink's own filter,
read from terraform/job_state_log_filter.txt (log_filter.py) — one definition for both.

Which lines Vertex writes (gcloud stream-logs captures of Vertex CustomJobs; local/FIDELITY.md): none
for QUEUED, "Waiting for job to be provisioned." (PENDING), "Job is running." (RUNNING),
"Job completed successfully." (SUCCEEDED, the one entry seen carrying the undocumented
`ml.googleapis.com/job_state` label, so only it carries it here). FAILED/CANCELLING/CANCELLED
wordings are not on record; ours are stand-ins, and consumers must read the state from GetCustomJob.

Publishing runs on one background thread, in transition order, so a slow emulator never holds up a job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
import uuid
from collections.abc import Callable

from google.cloud.aiplatform_v1.types import CustomJob, JobState

from local.jobservice.log_filter import job_state_log_filter

log = logging.getLogger("local.jobservice")

_MESSAGES = {  # no QUEUED line: Vertex's service log starts at provisioning
    JobState.JOB_STATE_PENDING: "Waiting for job to be provisioned.",
    JobState.JOB_STATE_RUNNING: "Job is running.",
    JobState.JOB_STATE_SUCCEEDED: "Job completed successfully.",
    JobState.JOB_STATE_FAILED: "Job failed.",
    JobState.JOB_STATE_CANCELLING: "Job is being cancelled.",
    JobState.JOB_STATE_CANCELLED: "Job was cancelled.",
}


def log_entry(job: CustomJob, now: dt.datetime | None = None) -> dict | None:
    """The LogEntry (JSON form) of the service line Vertex writes as `job` enters its current state,
    or None when Vertex writes none for that state."""
    if job.state not in _MESSAGES:
        return None
    now = now or dt.datetime.now(dt.UTC)
    project, job_id = job.name.split("/")[1], job.name.rsplit("/", 1)[-1]
    message = _MESSAGES[job.state]
    if job.state == JobState.JOB_STATE_FAILED and job.error.message:
        message = f"{message} {job.error.message}"
    timestamp = now.isoformat().replace("+00:00", "Z")
    return {
        "insertId": uuid.uuid4().hex[:16],
        "logName": f"projects/{project}/logs/ml.googleapis.com%2F{job_id}",
        "resource": {"type": "ml_job", "labels": {"project_id": project, "job_id": job_id, "task_name": "service"}},
        "labels": _labels(job.state),
        "severity": "ERROR" if job.state == JobState.JOB_STATE_FAILED else "INFO",
        "textPayload": message,
        "timestamp": timestamp,
        "receiveTimestamp": timestamp,
    }


def sink_delivery(job: CustomJob, sink_filter: Callable[[dict], bool]) -> dict | None:
    """The entry the sink delivers for `job` entering its current state: Vertex's line for it, if
    Vertex writes one and the sink's filter lets it through; else None."""
    entry = log_entry(job)
    return entry if entry is not None and sink_filter(entry) else None


def _labels(state: JobState) -> dict[str, str]:
    if state == JobState.JOB_STATE_SUCCEEDED:  # as observed (kestra-io/kestra#6849)
        return {"ml.googleapis.com/endpoint": "", "ml.googleapis.com/job_state": "SUCCEEDED"}
    return {"ml.googleapis.com/endpoint": ""}


class StateAnnouncer:
    """A transition hook publishing to `topic` (projects/P/topics/T) the entries of `log_entry(job)`
    that the sink's filter lets through."""

    def __init__(self, topic: str, sink_filter: Callable[[dict], bool] | None = None):
        import google.cloud.pubsub_v1 as pubsub_v1  # only servers that announce need the client

        self.topic = topic
        self.sink_filter = sink_filter or job_state_log_filter()
        self._publisher = pubsub_v1.PublisherClient()
        self._queue: queue.Queue[dict | None] = queue.Queue()
        self._thread = threading.Thread(target=self._publish_all, name="announce", daemon=True)
        self._thread.start()

    def __call__(self, job: CustomJob) -> None:
        entry = sink_delivery(job, self.sink_filter)
        if entry is not None:
            self._queue.put(entry)

    def close(self, timeout: float = 10.0) -> None:
        """Publish what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _publish_all(self) -> None:
        while (entry := self._queue.get()) is not None:
            data = json.dumps(entry).encode()
            try:
                self._publisher.publish(
                    self.topic, data, **{"logging.googleapis.com/timestamp": entry["timestamp"]}
                ).result(timeout=30)
            except Exception:
                log.exception("publishing the state change of job %s failed", entry["resource"]["labels"]["job_id"])
