"""A person's alias move that cannot be made (issue 44, point 2): said at once with the rule, never recorded, and a
model that does not exist exits 3. `trainctl models promote/rollback` on trainctl replay's in-memory Cloud Storage and
a Model Registry kept in memory that refuses what Vertex refuses."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from functions.cloud.registry_types import ModelVersion
from functions.cloud.vertex import CallRejected
from functions.ledger.model_records import ModelCharters, ModelLedger
from functions.models.alias_moves import ModelNotFound, MoveRefused, move_by_hand
from local.memory_gcs import MemoryGcs
from tests.unit.test_alias_races import MemoryRegistry
from trainctl import models as cli_models
from trainctl.cli import main

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


@dataclass
class RefusingRegistry(MemoryRegistry):
    """Refuses every MergeVersionAliases as Vertex does an alias it will not take (400 Bad_Alias)."""

    def merge_aliases(self, version_name: str, aliases: list[str]) -> ModelVersion:
        raise CallRejected(400, "Bad_Alias", f"Bad_Alias: {aliases[0]} is not allowed")

    def get(self, name: str) -> ModelVersion | None:
        return super().get(name) if name.split("@")[0].endswith("/churn") else None

    def models(self) -> list[ModelVersion]:
        found = self.get(self.model_name("churn"))
        return [found] if found else []


def move(registry: MemoryRegistry, ledger: ModelLedger, alias: str, version: str | None = "2", model: str = "churn"):
    action = "promote" if version else "rollback"
    return move_by_hand(
        registry, ledger, model, alias, action, version, "cli:t", lambda: NOW, timedelta(minutes=15), [alias, "default"]
    )


@pytest.fixture
def ledger() -> ModelLedger:
    return ModelLedger(MemoryGcs(), "control")


def test_a_move_the_registry_refuses_is_said_at_once_and_leaves_no_record(ledger):
    """Before, the refused move stayed recorded as `moving`: `models list` showed the alias, and every retry for
    15 minutes answered "in progress… try again in a minute"."""
    registry = RefusingRegistry(aliases={"default": "1"})

    for _ in range(2):  # the retry is refused the same way, not told a move is in progress
        with pytest.raises(MoveRefused, match=r"Vertex AI refused to move `staging` to version 2 \(Bad_Alias"):
            move(registry, ledger, "staging")

    assert ledger.names() == []


def test_a_refused_move_of_an_alias_with_a_history_leaves_its_record_as_it_was(ledger):
    registry = MemoryRegistry(aliases={"default": "1", "champion": "1"})
    move(registry, ledger, "champion", "2")
    before = ledger.read("churn", "champion")[0]

    with pytest.raises(MoveRefused, match="nothing was moved"):
        move(RefusingRegistry(aliases=dict(registry.aliases)), ledger, "champion", "3")

    after = ledger.read("churn", "champion")[0]
    assert after == before and after.moving is None and after.champion == "2"


@pytest.mark.parametrize(
    ("alias", "rule"),
    [
        ("default", "`default` moves with the model's alias"),
        ("Champion", "2-128 lowercase letters, digits or '-'"),
        ("2", "starting with a letter"),
        ("a", "2-128"),
    ],
)
def test_an_alias_vertex_would_refuse_is_refused_with_its_rule_before_anything_is_recorded(ledger, alias, rule):
    registry = MemoryRegistry(aliases={"default": "1"})
    with pytest.raises(MoveRefused, match=rule):
        move(registry, ledger, alias)
    assert ledger.names() == [] and registry.aliases == {"default": "1"}


def test_a_model_that_does_not_exist_is_not_found(ledger):
    with pytest.raises(ModelNotFound, match="model nosuch is not in"):
        move(MemoryRegistry(aliases={}), ledger, "champion", model="nosuch")
    assert ledger.names() == []


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> cli_models.Models:
    """`trainctl models` against the in-memory registry and bucket."""
    gcs = MemoryGcs()
    found = cli_models.Models(
        None,  # type: ignore[arg-type]  # settings: only publishing the event reads them
        RefusingRegistry(aliases={"default": "1"}),
        ModelLedger(gcs, "control"),
        gcs,  # type: ignore[arg-type]
        ModelCharters(gcs, "control"),
    )
    monkeypatch.setattr(cli_models.Models, "of_deployment", classmethod(lambda cls: found))
    return found


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["models", "promote", "nosuch", "1"], 3, "model nosuch is not in"),
        (["models", "rollback", "nosuch"], 3, "model nosuch is not in"),
        (["models", "promote", "churn", "1", "--alias", "default"], 4, "`default` moves with the model's alias"),
        (["models", "promote", "churn", "2", "--alias", "staging"], 4, "Vertex AI refused to move `staging`"),
    ],
)
def test_models_promote_and_rollback_exit_codes(deployment, capsys, argv, code, said):
    """README's exit codes: 3 no such model, 4 refused; a refused alias is not listed afterwards."""
    assert main(argv) == code
    assert said in capsys.readouterr().out
    assert main(["models", "list", "--json"]) == 0
    assert "staging" not in capsys.readouterr().out and deployment.ledger.names() == []


@pytest.mark.parametrize("alias", ["Bad_Alias", "default"])
def test_models_list_skips_a_record_left_by_a_refused_alias(deployment, capsys, alias):
    """A record a trainctl from before this fix left for an alias Vertex refused, or for `default` moved alone (which
    `models list` then showed on two versions: the registry's and the record's), is not listed as an alias."""
    record, generation = deployment.ledger.read("churn", alias)
    record.push_champion("2", None)
    deployment.ledger.write(record, generation)
    assert cli_models.run_list(argparse.Namespace(json=True)) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["default_version"], row["aliases"]) == ("1", {})


def test_a_rollouts_rollback_names_the_rollouts_request_not_the_one_that_registered_the_version(ledger):
    """The models page said a rollback was partition 1's request's (which registered the version rolled back to),
    when partition 2's rollout made it."""
    from functions.ledger.model_records import Entry

    registry = MemoryRegistry(aliases={"default": "2", "champion": "2"})
    record, generation = ledger.read("churn", "champion")
    for version, request in (("1", "part-1"), ("2", "part-2")):
        record.record(Entry(time=NOW, action="promoted", trigger="controller", version=version, request_id=request))
        record.champions.append(version)
    ledger.write(record, generation)

    def rollback(request_id: str | None):
        return move_by_hand(
            registry, ledger, "churn", "champion", "rollback", None, "rollout:abc", lambda: NOW,
            timedelta(minutes=15), ["champion", "default"], trigger="controller", request_id=request_id,
        )  # fmt: skip

    entry = rollback("part-2")
    assert (entry.version, entry.request_id) == ("1", "part-2")
    # Moving to version 1 again by hand still names the request that registered it, not the rollout's.
    by_hand = move(registry, ledger, "champion", "1")
    assert by_hand.request_id == "part-1"
