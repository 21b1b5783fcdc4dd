"""What the controller keeps of the EndpointService's answers: an endpoint, a deployed model and an operation. Plain
data, apart from the adapter (functions/cloud/endpoints.py) that reads them, so that functions/cloud/ports.py can name
them without importing the adapter."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DeployedVersion:
    id: str
    model: str  # projects/P/locations/L/models/M, without @
    version_id: str


@dataclass(frozen=True)
class Operation:
    name: str
    done: bool
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True)
class EndpointState:
    name: str
    display_name: str = ""
    deployed: tuple[DeployedVersion, ...] = ()
    traffic_split: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def deployed_model(self, deployed_model_id: str) -> DeployedVersion | None:
        return next((d for d in self.deployed if d.id == deployed_model_id), None)
