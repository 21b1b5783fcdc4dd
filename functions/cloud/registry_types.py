"""What the controller keeps of the Model Registry's answers: a version (the REST `Model`) and an upload's operation.
Plain data, apart from the adapter (functions/cloud/registry.py) that reads them, so that functions/cloud/ports.py can
name them without importing the adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class ModelVersion:
    """What the controller keeps of one version of a Model Registry model (its REST `Model`)."""

    model: str  # projects/P/locations/L/models/M, without @
    version_id: str
    aliases: tuple[str, ...] = ()
    artifact_uri: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    created: datetime | None = None
    description: str = ""

    @property
    def name(self) -> str:
        """The version's own resource name, projects/P/locations/L/models/M@VERSION."""
        return f"{self.model}@{self.version_id}"

    @property
    def model_id(self) -> str:
        return self.model.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Upload:
    """Where an UploadModel operation stands: done with the new version's id, done with an error, or running."""

    operation: str
    done: bool
    version_id: str | None = None
    error_code: int = 0
    error_message: str = ""
