"""The alias's compare-and-swap on the model's record (issue 40, point 14): decisions that race on one record are
forced to conflict, and the alias ends on the better version with every decision recorded. The controller's
promotion (functions/models/promotion.py) and a person's move (functions/models/alias_moves.py) on trainctl replay's
in-memory Cloud Storage, with a Model Registry kept in memory and a write that lets the other decision in first."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from functions.cloud.job_snapshot import JobSnapshot
from functions.cloud.registry_types import ModelVersion
from functions.controller import Controller
from functions.intake.acceptance import artifacts
from functions.ledger.model_charter import Reference
from functions.ledger.model_records import Entry, ModelLedger
from functions.ledger.record import ModelSteps, Record
from functions.ledger.requests import Ledger
from functions.models.alias_moves import move_by_hand
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_charter, make_record, make_request

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
PARENT = "projects/p/locations/us-central1"
ALIAS = "champion"
RECORD = ModelLedger.object_name("churn", ALIAS)


@dataclass
class MemoryRegistry:
    """The Model Registry's calls the decision makes (ports.Registry): versions of one model and their aliases."""

    aliases: dict[str, str] = field(default_factory=dict)  # alias → version
    versions: tuple[str, ...] = ("1", "2", "3")
    parent: str = PARENT

    def model_name(self, model_id: str) -> str:
        return f"{self.parent}/models/{model_id}"

    def get(self, name: str) -> ModelVersion | None:
        model, _, at = name.partition("@")
        version = self.aliases.get(at or "default", at)  # a model's name without @: its default version
        if version not in self.versions:
            return None
        held = tuple(alias for alias, v in self.aliases.items() if v == version)
        return ModelVersion(model=model, version_id=version, aliases=held)

    def merge_aliases(self, version_name: str, aliases: list[str]) -> ModelVersion:
        _, _, version = version_name.partition("@")
        for alias in aliases:
            self.aliases[alias] = version
        found = self.get(version_name)
        assert found is not None
        return found


@dataclass
class LetInFirst(MemoryGcs):
    """MemoryGcs whose first write of `contested` runs `first` before it: another decision's whole compare-and-swap
    gets in between this one's read and its write, which must then fail."""

    contested: str = ""
    first: Callable[[], None] | None = None

    def write(self, bucket, name, data, if_generation_match, custom_metadata=None):  # type: ignore[no-untyped-def]
        if name == self.contested and self.first is not None:
            first, self.first = self.first, None
            first()
        return super().write(bucket, name, data, if_generation_match, custom_metadata)


class NoJobs:
    parent = PARENT

    def get(self, name: str) -> JobSnapshot | None:
        return None


def setup() -> tuple[Controller, LetInFirst, MemoryRegistry]:
    """Model churn: version 1 holds `champion`; its reference set ref-1; its rule decides on val_accuracy."""
    gcs, registry = LetInFirst(contested=RECORD), MemoryRegistry(aliases={ALIAS: "1", "default": "1"})
    settings = Settings(project="p", control_bucket="control", events_topic="events", trainer_image="img")
    publisher = type("Publisher", (), {"source": "test", "publish": lambda self, event: event.ce_id})()
    ctl = Controller(
        settings, Ledger(gcs, "control"), gcs, publisher, NoJobs, clock=lambda: NOW, registry_factory=lambda: registry
    )
    reference = Reference(id="ref-1", uri="gs://control/model-references/churn/ref-1/", source="rows", time=NOW)
    charter = make_charter(reference=reference)
    charter = charter.model_copy(update={"rule": charter.rule.model_copy(update={"metric": "val_accuracy"})})
    ctl.charters.write(charter, 0)
    models, generation = ctl.promotion.models.read("churn", ALIAS)
    models.push_champion("1", None)
    ctl.promotion.models.write(models, generation)
    return ctl, gcs, registry


def run(ctl: Controller, gcs: MemoryGcs, name: str, version: str, improvement: float) -> tuple[Record, int]:
    """A succeeded request whose run registered `version`, scored against version 1 on ref-1, better by about
    `improvement` (its interval 0.01 either side)."""
    charter = ctl.charters.read("churn")[0]
    assert charter is not None
    steps = ModelSteps(
        champion_version="1",
        rule=charter.rule,
        reference_id="ref-1",
        artifact_uri=f"gs://control/model-artifacts/churn/{name}/",
        version=version,
        evaluated=True,
        since=NOW - timedelta(minutes=1),
    )
    record = make_record(
        key=f"request:{name}",
        key_hash=name,
        request_id=name,
        request=make_request(request_id=name, model={"name": "churn"}).model_dump(mode="json"),
        state="succeeded",
        artifacts=artifacts(f"gs://c/runs/{name}/"),
        model_steps=steps,
    )
    metrics = {
        "task": "classification",
        "val_accuracy": 0.8 + improvement,
        "reference_val_accuracy": 0.8 + improvement,
        "champion_reference_val_accuracy": 0.8,
        "reference_improvement_val_accuracy": {
            "point": improvement,
            "low": improvement - 0.01,
            "high": improvement + 0.01,
        },
        "reference_rows": 1000,
        "reference_confidence": 0.95,
    }
    gcs.write("c", f"runs/{name}/model/metrics.json", json.dumps(metrics), 0)
    return record, ctl.ledger.create(record)


def test_two_decisions_race_on_the_model_record_and_the_alias_ends_on_the_better_version():
    """Issue 40, point 14: runs a (version 2, +0.05) and b (version 3, +0.10) were both scored against version 1, and
    both are better than it. a decides first, but b's decision is written between a's read of the model's record
    and a's write: a's compare-and-swap fails, a decides again against what the record holds now (version 3, which
    a was not scored against) and is held. The alias ends on version 3; without the failed swap a would have
    moved it back to version 2."""
    ctl, gcs, registry = setup()
    a = run(ctl, gcs, "a", "2", 0.05)
    b = run(ctl, gcs, "b", "3", 0.10)
    gcs.first = lambda: ctl.promotion.settle(*b)

    record, _ = ctl.promotion.settle(*a)

    assert registry.aliases[ALIAS] == "3" and registry.aliases["default"] == "3"
    models = ctl.promotion.models.read("churn", ALIAS)[0]
    assert (models.champions, models.moving) == (["1", "3"], None)
    decided = {(e.request_id, e.action, e.version) for e in models.history}
    assert decided == {("b", "promoted", "3"), ("a", "held", "2")}
    assert record.model_steps is not None and record.model_steps.decision == "held"


def test_a_persons_move_raced_by_the_controllers_decision_is_made_again_on_the_new_record():
    """Issue 40, point 14: `trainctl models promote churn 3` reads the model's record, and before its write the
    controller's decision on run a (version 2, held: no better than version 1) is recorded. The person's
    compare-and-swap fails; the move is made again on the record as it now stands: the alias ends on version 3,
    with both decisions in the record's history and no move left in flight."""
    ctl, gcs, registry = setup()
    a = run(ctl, gcs, "a", "2", -0.02)
    gcs.first = lambda: ctl.promotion.settle(*a)

    entry = move_by_hand(
        registry, ctl.promotion.models, "churn", ALIAS, "promote", "3", "person", lambda: NOW, timedelta(minutes=10),
        [ALIAS, "default"],
    )  # fmt: skip

    assert isinstance(entry, Entry) and (entry.version, entry.previous) == ("3", "1")
    assert registry.aliases[ALIAS] == "3"
    models = ctl.promotion.models.read("churn", ALIAS)[0]
    assert models.moving is None and models.champion == "3"
    assert [(e.trigger, e.action, e.version) for e in models.history] == [
        ("controller", "held", "2"),
        ("cli", "promote", "3"),
    ]
