"""The local stand-in for the Cloud Logging sink that routes Vertex job-state log lines to Pub/Sub
(reference/vertex.md §5.3): a transition hook that publishes, for every state change, a LogEntry as the
sink would deliver it — `resource.type="ml_job"`, `resource.labels.job_id`, and the state in
`labels."ml.googleapis.com/job_state"` (without the JOB_STATE_ prefix, as in the observed entries).

Publishing runs on one background thread, in transition order, so a slow emulator never holds up a job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
import uuid

from google.cloud.aiplatform_v1.types import CustomJob, JobState

log = logging.getLogger("local.jobservice")

_MESSAGES = {
    JobState.JOB_STATE_QUEUED: "Job is queued.",
    JobState.JOB_STATE_PENDING: "Waiting for job to be provisioned.",
    JobState.JOB_STATE_RUNNING: "Job is running.",
    JobState.JOB_STATE_SUCCEEDED: "Job completed successfully.",
    JobState.JOB_STATE_FAILED: "Job failed.",
    JobState.JOB_STATE_CANCELLING: "Job is being cancelled.",
    JobState.JOB_STATE_CANCELLED: "Job was cancelled.",
}


def log_entry(job: CustomJob, now: dt.datetime | None = None) -> dict:
    """The LogEntry (JSON form) a log sink would publish for `job` entering its current state."""
    now = now or dt.datetime.now(dt.UTC)
    project, job_id = job.name.split("/")[1], job.name.rsplit("/", 1)[-1]
    message = _MESSAGES.get(job.state, job.state.name)
    if job.state == JobState.JOB_STATE_FAILED and job.error.message:
        message = f"{message} {job.error.message}"
    timestamp = now.isoformat().replace("+00:00", "Z")
    return {
        "insertId": uuid.uuid4().hex[:16],
        "logName": f"projects/{project}/logs/ml.googleapis.com%2F{job_id}",
        "resource": {"type": "ml_job", "labels": {"project_id": project, "job_id": job_id, "task_name": "service"}},
        "labels": {
            "ml.googleapis.com/job_state": job.state.name.removeprefix("JOB_STATE_"),
            "ml.googleapis.com/endpoint": "",
        },
        "severity": "ERROR" if job.state == JobState.JOB_STATE_FAILED else "INFO",
        "textPayload": message,
        "timestamp": timestamp,
        "receiveTimestamp": timestamp,
    }


class StateAnnouncer:
    """A transition hook publishing `log_entry(job)` to `topic` (projects/P/topics/T)."""

    def __init__(self, topic: str):
        from google.cloud import pubsub_v1  # only servers that announce need the client

        self.topic = topic
        self._publisher = pubsub_v1.PublisherClient()
        self._queue: queue.Queue[dict | None] = queue.Queue()
        self._thread = threading.Thread(target=self._publish_all, name="announce", daemon=True)
        self._thread.start()

    def __call__(self, job: CustomJob) -> None:
        self._queue.put(log_entry(job))

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
