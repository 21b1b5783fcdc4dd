"""The control bucket's records of models: one per model and alias, and each model's charter (ModelCharters,
functions/ledger/model_charter.py).

One record per model and alias in the control bucket, changed only by compare-and-swap: it serialises promotions
(two runs finishing together: one decision at a time, each against the champion of its moment), keeps the
champions the alias held (so `trainctl models rollback` knows the version it left) and every decision, with who
made it and why. Like functions/capacity/quota_pool.py's pools.

  models/<model id>/<alias>.json   ModelRecord

An alias move is recorded first (`moving`, in the same compare-and-swap as the decision), then made in the
registry, then cleared: a crash in between leaves `moving`, and whoever reads the record next finishes the move
before anything else, so the registry and the record never disagree for long, and no two moves overlap.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.cloud.ports import Storage
from functions.ledger.model_charter import ARTIFACTS_PREFIX, CHARTERS_PREFIX, REFERENCES_PREFIX, Charter
from schemas.events import Decision

MODELS_PREFIX = "models/"
MAX_HISTORY = 100
MAX_CHAMPIONS = 100


class Move(BaseModel):
    """An alias move in progress: recorded before the registry is asked, cleared after."""

    model_config = ConfigDict(extra="forbid")

    to_version: str
    owner: str = Field(description="The key hash of the request promoting, or cli:<id> for a person's command.")
    since: datetime
    aliases: list[str] | None = Field(
        None, description="What the move sets: the model's alias, and `default` when its rule says so (None: both)."
    )

    def expired(self, now: datetime, window: timedelta) -> bool:
        return now - self.since > window


class Entry(BaseModel):
    """One decision about the alias: a version promoted or held by the controller, or moved by a person."""

    model_config = ConfigDict(extra="forbid")

    time: datetime
    action: Literal["promoted", "held", "promote", "rollback"]
    trigger: Literal["controller", "cli"]
    version: str | None
    previous: str | None = Field(None, description="The version under the alias before (promotions and rollbacks).")
    request_id: str | None = None
    key_hash: str | None = None
    decision: Decision | None = None
    message: str = ""
    dataset_fingerprint: str | None = Field(
        None, description="The controller's decisions: the fingerprint of the data the version was trained on."
    )


class ModelRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_id: str
    alias: str
    champions: list[str] = Field(default_factory=list, description="The versions the alias held, the current last.")
    moving: Move | None = None
    history: list[Entry] = Field(default_factory=list, description="The latest decisions, oldest first.")

    @property
    def champion(self) -> str | None:
        return self.champions[-1] if self.champions else None

    def decided(self, key_hash: str) -> Entry | None:
        """The controller's decision on the request with this key hash, if it made one."""
        return next((e for e in reversed(self.history) if e.key_hash == key_hash and e.trigger == "controller"), None)

    def fingerprint_of(self, version: str) -> str | None:
        """The dataset fingerprint the controller recorded when it decided on `version` (model.skip_unchanged rests
        on this record, never on a registry label a person could edit); None when it recorded none."""
        return next(
            (
                e.dataset_fingerprint
                for e in reversed(self.history)
                if e.version == version and e.trigger == "controller" and e.dataset_fingerprint
            ),
            None,
        )

    def record(self, entry: Entry) -> None:
        self.history = [*self.history, entry][-MAX_HISTORY:]

    def push_champion(self, version: str, previous: str | None) -> None:
        """The alias moves to `version`; `previous`, the version the registry had under it, is kept under it (a
        record started after the alias was first set, or an alias a person moved in the console)."""
        if previous is not None and self.champion != previous:
            self.champions.append(previous)
        if self.champion != version:
            self.champions.append(version)
        self.champions = self.champions[-MAX_CHAMPIONS:]


class ModelLedger:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    @staticmethod
    def object_name(model_id: str, alias: str) -> str:
        return f"{MODELS_PREFIX}{model_id}/{alias}.json"

    def read(self, model_id: str, alias: str) -> tuple[ModelRecord, int]:
        """The record and its generation; a new, empty one (generation 0) for a model and alias never decided on."""
        found = self._gcs.read(self.bucket, self.object_name(model_id, alias))
        if found is None:
            return ModelRecord(model_id=model_id, alias=alias), 0
        return ModelRecord.model_validate_json(found[0]), found[1]

    def write(self, record: ModelRecord, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`); the new generation."""
        body = record.model_dump_json(exclude_none=True)
        return self._gcs.write(self.bucket, self.object_name(record.model_id, record.alias), body, generation)

    def forget(self, model_id: str, alias: str) -> None:
        """Remove the record (a person's first move of an alias that the registry refused)."""
        self._gcs.delete(self.bucket, self.object_name(model_id, alias))

    def names(self) -> list[tuple[str, str]]:
        """(model id, alias) of every record."""
        found = []
        for name in self._gcs.names(self.bucket, MODELS_PREFIX):
            model_id, _, alias = name.removeprefix(MODELS_PREFIX).removesuffix(".json").partition("/")
            found.append((model_id, alias))
        return found


class ModelCharters:
    def __init__(self, gcs: Storage, bucket: str):
        self._gcs = gcs
        self.bucket = bucket

    @staticmethod
    def object_name(model_id: str) -> str:
        return f"{CHARTERS_PREFIX}{model_id}.json"

    def read(self, model_id: str) -> tuple[Charter | None, int]:
        """The charter and its generation; (None, 0) for a model without one."""
        found = self._gcs.read(self.bucket, self.object_name(model_id))
        if found is None:
            return None, 0
        return Charter.model_validate_json(found[0]), found[1]

    def write(self, charter: Charter, generation: int) -> int:
        """Compare-and-swap (gcs.Conflict when it changed since `generation`; 0 creates it); the new generation."""
        body = charter.model_dump_json(exclude_none=True)
        return self._gcs.write(self.bucket, self.object_name(charter.model_id), body, generation)

    def artifacts_uri(self, model_id: str, key_hash: str) -> str:
        """Where the controller keeps the model folder of the run with this key hash."""
        return f"gs://{self.bucket}/{ARTIFACTS_PREFIX}{model_id}/{key_hash}/"

    def reference_uri(self, model_id: str, ref_id: str) -> str:
        return f"gs://{self.bucket}/{REFERENCES_PREFIX}{model_id}/{ref_id}/"
