"""The EndpointService's memory: each Endpoint as GetEndpoint answers it (its deployed models and traffic split
included), kept in `--state-dir` as `endpoints/<project>/<location>/<endpoint id>.json`, so that a restarted
JobService still knows every endpoint and starts its deployed models' servers again.
"""

from __future__ import annotations

from pathlib import Path

from google.cloud.aiplatform_v1.types import Endpoint

from local.jobservice.store import write_atomically


class EndpointStore:
    """Endpoints on disk under `state_dir/endpoints`; with no state_dir, nothing is written (unit tests)."""

    def __init__(self, state_dir: Path | None = None):
        self.endpoints_dir = state_dir / "endpoints" if state_dir is not None else None

    def load(self) -> list[Endpoint]:
        if self.endpoints_dir is None:
            return []
        paths = sorted(self.endpoints_dir.glob("*/*/*.json"))
        return [Endpoint.from_json(path.read_text(), ignore_unknown_fields=True) for path in paths]

    def save(self, endpoint: Endpoint) -> None:
        path = self._path(endpoint.name)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, Endpoint.to_json(endpoint))

    def delete(self, name: str) -> None:
        path = self._path(name)
        if path is not None:
            path.unlink(missing_ok=True)

    def _path(self, name: str) -> Path | None:
        if self.endpoints_dir is None:
            return None
        _, project, _, location, _, endpoint_id = name.split("/")
        return self.endpoints_dir / project / location / f"{endpoint_id}.json"
