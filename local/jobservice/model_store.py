"""The Model Registry's memory: one record per model (its versions, their aliases and evaluations, the upload
operations still running), kept in `--state-dir` as `models/<project>/<location>/<model id>.json` so that a
restarted JobService still knows every model, as the job store keeps every job.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.cloud.aiplatform_v1.types import Model, ModelEvaluation

from local.jobservice.store import write_atomically


@dataclass
class VersionRecord:
    model: Model  # the version as GetModel returns it: name without @, version_id, aliases, times
    operation: str  # the name of the upload operation that made it
    ready_at: dt.datetime  # when that operation finishes; until then the version does not exist for readers
    pending: bool = True
    requested_aliases: list[str] = field(default_factory=list)  # the upload's aliases, applied when it finishes
    evaluations: list[ModelEvaluation] = field(default_factory=list)

    @property
    def version_id(self) -> str:
        return self.model.version_id

    @property
    def aliases(self) -> list[str]:
        return list(self.model.version_aliases)


@dataclass
class ModelRecord:
    name: str  # projects/P/locations/L/models/M
    sequence: int  # increasing in creation order: the listing order and its page token
    create_time: dt.datetime
    last_version_id: int = 0  # version ids are never reused, even after a version is deleted
    versions: dict[str, VersionRecord] = field(default_factory=dict)

    def visible(self) -> list[VersionRecord]:
        """The versions whose upload has finished, oldest first."""
        return sorted((v for v in self.versions.values() if not v.pending), key=lambda v: int(v.version_id))

    def carrying(self, alias: str) -> VersionRecord | None:
        return next((version for version in self.visible() if alias in version.aliases), None)


def record_json(record: ModelRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "sequence": record.sequence,
        "createTime": record.create_time.isoformat(),
        "lastVersionId": record.last_version_id,
        "versions": [
            {
                "model": json.loads(Model.to_json(version.model)),
                "operation": version.operation,
                "readyAt": version.ready_at.isoformat(),
                "pending": version.pending,
                "requestedAliases": version.requested_aliases,
                "evaluations": [json.loads(ModelEvaluation.to_json(e)) for e in version.evaluations],
            }
            for version in record.versions.values()
        ],
    }


def record_from_json(data: dict[str, Any]) -> ModelRecord:
    record = ModelRecord(
        data["name"], data["sequence"], dt.datetime.fromisoformat(data["createTime"]), data["lastVersionId"]
    )
    for version in data["versions"]:
        model = Model.from_json(json.dumps(version["model"]), ignore_unknown_fields=True)
        record.versions[model.version_id] = VersionRecord(
            model,
            version["operation"],
            dt.datetime.fromisoformat(version["readyAt"]),
            version["pending"],
            version["requestedAliases"],
            [ModelEvaluation.from_json(json.dumps(e), ignore_unknown_fields=True) for e in version["evaluations"]],
        )
    return record


class ModelStore:
    """Model records on disk under `state_dir/models`; with no state_dir, nothing is written (unit tests)."""

    def __init__(self, state_dir: Path | None = None):
        self.models_dir = state_dir / "models" if state_dir is not None else None

    def load(self) -> list[ModelRecord]:
        if self.models_dir is None:
            return []
        return [record_from_json(json.loads(path.read_text())) for path in sorted(self.models_dir.glob("*/*/*.json"))]

    def save(self, record: ModelRecord) -> None:
        path = self._path(record.name)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(record_json(record), indent=1))

    def delete(self, name: str) -> None:
        path = self._path(name)
        if path is not None:
            path.unlink(missing_ok=True)

    def _path(self, name: str) -> Path | None:
        if self.models_dir is None:
            return None
        _, project, _, location, _, model_id = name.split("/")
        return self.models_dir / project / location / f"{model_id}.json"
