"""The control bucket's record of each endpoint trainctl serves models on: what serves there, the one rollout in
progress, and how earlier rollouts ended (issue 41). Changed only by compare-and-swap, like the model records.

  endpoints/<endpoint name>.json   EndpointRecord

The record is the lock that keeps rollouts to one endpoint one at a time: a promoted version's request claims it
(`rollout`, with its key hash as owner) before anything is deployed, and each step is recorded before it is taken,
so a crash or a redelivery resumes the step and never deploys twice nor leaves the traffic split
(functions/models/rollout.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.cloud.ports import Storage
from schemas.events import ServingFigures

ENDPOINTS_PREFIX = "endpoints/"
MAX_HISTORY = 100

Phase = Literal["deploying", "baking", "promoting", "rolling_back"]
Outcome = Literal["deployed", "rolled_back"]
RollbackReason = Literal["errors", "latency", "too_few_requests", "deploy_failed", "no_figures"]


class Served(BaseModel):
    """A version deployed on the endpoint by trainctl."""

    model_config = ConfigDict(extra="forbid")

    model_id: str
    version: str
    deployed_model_id: str


class Rollout(BaseModel):
    """The rollout in progress: one at a time per endpoint."""

    model_config = ConfigDict(extra="forbid")

    owner: str = Field(description="The key hash of the promoted request, or cli:<id> for a person's command.")
    request_id: str | None = None
    model_id: str
    alias: str
    version: str
    deployed_model_id: str = Field(description="Chosen before deploying, so that a second try finds the first.")
    previous: Served | None = Field(None, description="What served before; None: the endpoint's first version.")
    phase: Phase
    since: datetime
    operation: str | None = Field(None, description="The DeployModel operation, until it is done.")
    bake_since: datetime | None = None
    bake_until: datetime | None = None
    reason: RollbackReason | None = None
    verdict: str | None = Field(None, description="The judgement in words, once made.")
    figures: ServingFigures | None = None


class Ended(BaseModel):
    """How a rollout ended."""

    model_config = ConfigDict(extra="forbid")

    time: datetime
    owner: str
    request_id: str | None = None
    model_id: str
    version: str
    deployed_model_id: str
    previous_version: str | None = None
    outcome: Outcome
    reason: RollbackReason | None = None
    verdict: str
    figures: ServingFigures | None = None
    alias_version: str | None = Field(None, description="After a rollback: the version under the alias.")
    traffic_split: dict[str, int] = Field(default_factory=dict)


class EndpointRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The deploy block's endpoint: the endpoint's display name.")
    endpoint_id: str = Field(description="Its numeric id in Vertex, chosen from the name.")
    serving: Served | None = None
    rollout: Rollout | None = None
    history: list[Ended] = Field(default_factory=list, description="The latest rollouts, oldest first.")

    def ended(self, owner: str) -> Ended | None:
        return next((e for e in reversed(self.history) if e.owner == owner), None)

    def record(self, ended: Ended) -> None:
        self.history = [*self.history, ended][-MAX_HISTORY:]


class EndpointLedger:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    @staticmethod
    def object_name(name: str) -> str:
        return f"{ENDPOINTS_PREFIX}{name}.json"

    def read(self, name: str, endpoint_id: str) -> tuple[EndpointRecord, int]:
        """The record and its generation; a new one (generation 0) for an endpoint trainctl never served on."""
        found = self._gcs.read(self.bucket, self.object_name(name))
        if found is None:
            return EndpointRecord(name=name, endpoint_id=endpoint_id), 0
        return EndpointRecord.model_validate_json(found[0]), found[1]

    def write(self, record: EndpointRecord, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`); the new generation."""
        return self._gcs.write(self.bucket, self.object_name(record.name), record.model_dump_json(), generation)

    def names(self) -> list[str]:
        return [
            n.removeprefix(ENDPOINTS_PREFIX).removesuffix(".json")
            for n in self._gcs.names(self.bucket, ENDPOINTS_PREFIX)
        ]
