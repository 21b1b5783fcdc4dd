"""What the controller keeps of a Vertex CustomJob, free of proto types: its snapshot (the Vertex adapter's answer,
functions/cloud/vertex.py) and how events name it (its resource name and console page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from schemas.events import JobRef


@dataclass(frozen=True)
class JobSnapshot:
    """What the controller needs to know of a CustomJob, free of proto types."""

    name: str
    state: str
    error_code: int = 0
    error_message: str = ""
    create_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    labels: dict[str, str] | None = None

    @property
    def job_id(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def duration_seconds(self) -> float | None:
        """How long it ran, once it has ended."""
        if self.start_time and self.end_time:
            return round((self.end_time - self.start_time).total_seconds(), 1)
        return None


def job_ref(name: str, region: str, project: str) -> JobRef:
    """The job's name and console URL; the console page is in the job's own region (a ladder's rung may be in
    another than the deployment's `region`)."""
    job_id = name.rsplit("/", 1)[-1]
    parts = name.split("/")
    if len(parts) > 3 and parts[2] == "locations":
        region = parts[3]
    return JobRef(
        name=name,
        console_url=f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{job_id}?project={project}",
    )
