"""Each model's run slot (issue 42, model.concurrency skip | replace): which request holds the model's newest run,
beside the model records in the control bucket, changed only by compare-and-swap.

  model-runs/<model id>.json   RunSlot

A request of a model under `skip` or `replace` takes the slot at its claim, before its ledger record exists; the slot
is how the next one learns which run is the model's newest, and whether it is still active (its record is not final;
a holder whose record does not exist yet counts as active for a lease, then as free). Requests under `allow` never
read or write it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from functions.cloud.ports import Storage

RUN_SLOTS_PREFIX = "model-runs/"


class RunSlot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_id: str
    key_hash: str = Field(description="The key hash of the request that holds the model's newest run.")
    request_id: str
    since: datetime = Field(description="When it took the slot (its record is created right after).")
    supersedes: str | None = Field(None, description="The key hash of the run it replaced (concurrency replace).")


class RunSlots:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    @staticmethod
    def object_name(model_id: str) -> str:
        return f"{RUN_SLOTS_PREFIX}{model_id}.json"

    def read(self, model_id: str) -> tuple[RunSlot | None, int]:
        """The slot and its generation; (None, 0) for a model no request has held."""
        found = self._gcs.read(self.bucket, self.object_name(model_id))
        if found is None:
            return None, 0
        return RunSlot.model_validate_json(found[0]), found[1]

    def write(self, slot: RunSlot, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`; 0 creates it); the new generation."""
        return self._gcs.write(
            self.bucket, self.object_name(slot.model_id), slot.model_dump_json(exclude_none=True), generation
        )
