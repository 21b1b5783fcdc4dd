"""The control bucket's record of each batch scoring (functions/models/scoring.py), changed only by compare-and-swap,
and the index of those not yet finished, which the reconcile sweep visits each tick:

  scoring/<key hash>.json     ScoringRecord (the key: the `_SCORE` marker's gcs:<bucket>/<object>#<generation>)
  scoring-active/<key hash>   empty; present from the record's creation until its last event is published

The record holds its own outbox: an event is written into it (in the same compare-and-swap as what it reports), then
published, then moved to `published`. A handler that dies in between leaves it for the next visit, which publishes it
under the same ce-id (schemas/events.py event_id), so a consumer drops the copy.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict, Field

from functions.cloud.gcs import Conflict
from functions.cloud.ports import Storage
from functions.ledger.event_box import EventBox

SCORING_PREFIX = "scoring/"
SCORING_ACTIVE_PREFIX = "scoring-active/"
FINAL_SCORING_STATES = frozenset({"scored", "scoring_failed"})


class ScoringRecord(EventBox):
    model_config = ConfigDict(extra="forbid")

    key: str
    key_hash: str
    request_id: str
    team: str | None = None
    trigger: dict[str, str] = Field(description="The marker: kind gcs, bucket, object, generation.")
    delivery: str = Field(description="The id of the delivery that created the record.")
    model_id: str
    version: str = Field(description="The champion's version id when the scoring began: the one that scores.")
    model_version: str = Field(description="projects/P/locations/L/models/M@VERSION, as the job names it.")
    input_uris: list[str]
    output_prefix: str
    service_account: str = Field("", description="What the job runs as ('' : Vertex's default, the local stack).")
    created: datetime
    job_name: str | None = Field(None, description="The BatchPredictionJob, once found or made ('': refused).")

    @property
    def finished(self) -> bool:
        """Its last event is published: nothing is left to do."""
        return not self.outbox and any(state in FINAL_SCORING_STATES for state in self.published)

    @property
    def final_queued(self) -> bool:
        return any(state in FINAL_SCORING_STATES for state in [*self.published, *self.states_queued()])


class ScoringLedger:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    @staticmethod
    def object_name(khash: str) -> str:
        return f"{SCORING_PREFIX}{khash}.json"

    def read(self, khash: str) -> tuple[ScoringRecord, int] | None:
        found = self._gcs.read(self.bucket, self.object_name(khash))
        if found is None:
            return None
        return ScoringRecord.model_validate_json(found[0]), found[1]

    def write(self, record: ScoringRecord, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`; 0 creates it); the new generation."""
        body = record.model_dump_json(exclude_none=True)
        return self._gcs.write(self.bucket, self.object_name(record.key_hash), body, generation)

    def mark_active(self, khash: str) -> None:
        try:
            self._gcs.write(self.bucket, f"{SCORING_ACTIVE_PREFIX}{khash}", b"", 0)
        except Conflict:
            pass  # already marked

    def mark_inactive(self, khash: str) -> None:
        self._gcs.delete(self.bucket, f"{SCORING_ACTIVE_PREFIX}{khash}")

    def active(self) -> list[str]:
        return [
            name.removeprefix(SCORING_ACTIVE_PREFIX) for name in self._gcs.names(self.bucket, SCORING_ACTIVE_PREFIX)
        ]
