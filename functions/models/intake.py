"""Before any claim, for a request with a model block (issue 38): may its team add versions to the model, does its
block agree with the model's rule, does the model's kind of trainer run it — and what its run is given to be
judged by (the champion under the rule's alias, the model's reference set, the rule's label check).

The first request naming a model that does not exist creates the model's charter (functions/ledger/model_charter.py) for
its team, with its block as the rule and its `model.reference` copied where no job can write. A model that exists
without a charter was registered before charters existed: with teams configured it waits for the operator to say
whose it is (the teams setting's `models`, or `trainctl models adopt`), so the first request after the upgrade can
never claim someone else's model; without teams there is one team, which adopts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from functions import logs
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.ports import Registry, Storage
from functions.cloud.registry_types import ModelVersion
from functions.cloud.vertex import CallRejected
from functions.jobs.planning import Evidence
from functions.ledger.model_charter import Change, Charter, deploy_disagreement, disagreements, rule_of
from functions.ledger.model_records import ModelCharters
from functions.ledger.record import ModelSteps
from functions.models.artifacts import NothingToCopy, copy_reference
from functions.models.versions import BUILTIN_TRAINER, kind_of_version, trainer_kind
from functions.settings import Settings
from functions.teams import ModelOwner
from schemas.request import TrainingJobRequest, code_digest


class ModelRefused(Exception):
    """The request may not add a version to the model it names; `errors` name the field and the rule."""

    def __init__(self, errors: list[str], message: str):
        super().__init__(message)
        self.errors, self.message = errors, message


@dataclass(frozen=True)
class ModelAdmission:
    """What intake found of the request's model: its charter, and the version under the rule's alias."""

    charter: Charter
    champion: ModelVersion | None

    def evidence(self) -> Evidence:
        rule = self.charter.rule
        return Evidence(
            champion_uri=self.champion.artifact_uri if self.champion else None,
            reference_uri=self.charter.reference.uri if self.charter.reference else None,
            confidence=rule.confidence,
            min_champion_skill=rule.min_champion_skill,
            max_target_drift=rule.max_target_drift,
        )

    def steps(self) -> ModelSteps:
        """The record's model steps, starting with what the run was given (kept for resubmissions and the
        decision: it is judged only against this champion, this reference set and this rule)."""
        reference = self.charter.reference
        return ModelSteps(
            champion_version=self.champion.version_id if self.champion else None,
            champion_uri=self.champion.artifact_uri if self.champion else None,
            rule=self.charter.rule,
            reference_id=reference.id if reference else None,
            reference_uri=reference.uri if reference else None,
        )


def evidence_of(steps: ModelSteps | None) -> Evidence | None:
    """The evidence a request's run was given at admission, for another attempt of it; None without a model block.
    A record from before issue 38 has no rule: its run is given the champion alone, as then."""
    if steps is None:
        return None
    rule = steps.rule
    return Evidence(
        champion_uri=steps.champion_uri,
        reference_uri=steps.reference_uri,
        confidence=rule.confidence if rule else 0.95,
        min_champion_skill=rule.min_champion_skill if rule else -100.0,
        max_target_drift=rule.max_target_drift if rule else None,
    )


@dataclass
class ModelIntake:
    settings: Settings
    gcs: Storage
    registry: Callable[[], Registry]
    charters: ModelCharters
    clock: Callable[[], datetime]

    def admit(self, request: TrainingJobRequest, team: str) -> ModelAdmission | None:
        """The request's model, as far as its team may use it; None without a model block. Raises ModelRefused
        (rejected: nothing claimed), Transient (tried again)."""
        block = request.model
        if block is None:
            return None
        declared = self.settings.teams.models.get(block.name) if self.settings.teams else None
        for _ in range(5):
            charter, _ = self.charters.read(block.name)
            if charter is None:
                charter = self._new_charter(request, team, declared)
                try:
                    self.charters.write(charter, 0)
                except Conflict:
                    continue  # another request created it first: judged by what it recorded
                logs.info(f"model {block.name}: {charter.changes[-1].message}", model=block.name, owner=charter.owner)
            self._check(request, team, charter, declared)
            return ModelAdmission(charter, self._champion(block.name, charter.rule.alias))
        raise Transient(f"the charter of model {block.name} kept changing")

    def _new_charter(self, request: TrainingJobRequest, team: str, declared: ModelOwner | None) -> Charter:
        block = request.model
        assert block is not None
        registry = self.registry()
        try:
            existing = registry.get(registry.model_name(block.name))
        except CallRejected as exc:
            raise ModelRefused(
                [f"model.name: the Model Registry refused to say whether model {block.name} exists ({exc.message})"],
                "the model's owner cannot be known",
            ) from None
        exists = existing is not None
        if exists and declared is None and self.settings.teams is not None:
            raise ModelRefused(
                [
                    f"model.name: model {block.name} was registered before models had owners, and no one has said "
                    "whose it is: the operator names its owner in the teams setting (models: {"
                    f"{block.name}: {{owner: TEAM}}}}) or runs `trainctl models adopt {block.name} --team TEAM`"
                ],
                f"model {block.name} has no owner yet",
            )
        owner = declared.owner if declared else team
        if declared and not (team == declared.owner or team in declared.grants):
            raise self._not_yours(block.name, team, declared.owner)
        now = self.clock()
        reference = None
        if block.reference:
            try:
                reference = copy_reference(
                    self.gcs, self.charters, block.name, block.reference, request.request_id, now, self.settings
                )
            except NothingToCopy as exc:
                raise ModelRefused([f"model.reference: {exc}"], "the model's reference set cannot be used") from None
        action = "adopted" if exists else "created"
        message = (
            f"{action} for team {owner} by request {request.request_id}, with its rule"
            + (f" and the reference set {block.reference}" if block.reference else "")
            + (
                ""
                if block.reference or exists
                else "; the first registered version's validation rows become its reference set"
            )
        )
        return Charter(
            model_id=block.name,
            owner=owner,
            grants=list(declared.grants) if declared else [],
            kind=kind_of_version(existing.labels) if existing else trainer_kind(request),
            rule=rule_of(block),
            reference=reference,
            deploy=block.deploy,
            reference_from_first_version=not exists and reference is None,
            created=now,
            created_by=request.request_id,
            changes=[Change(time=now, by="controller", action=action, message=message)],
        )

    def _check(self, request: TrainingJobRequest, team: str, charter: Charter, declared: ModelOwner | None) -> None:
        block = request.model
        assert block is not None
        owner = declared.owner if declared else charter.owner
        if not charter.may_feed(team, owner, list(declared.grants) if declared else None):
            raise self._not_yours(block.name, team, owner)
        if (pinned := _unpinned_code(request)) is not None:
            raise ModelRefused([pinned], "a model's versions come from immutable code")
        mine = trainer_kind(request)
        if mine != charter.kind:
            raise ModelRefused(
                [
                    f"model.name: the versions of model {block.name!r} come from {_said(charter.kind)}; this "
                    f"request's runs come from {_said(mine)}, whose figures could not be compared fairly with "
                    "theirs: name another model"
                ],
                "the model is fed by another trainer",
            )
        errors = disagreements(block, charter.rule) + deploy_disagreement(block, charter.deploy)
        if block.reference is not None and "reference" in block.model_fields_set:
            source = charter.reference.source if charter.reference else None
            if source != block.reference:
                errors.append(
                    f"model.reference: {block.reference} is not the model's reference set ({source or 'none yet'}); "
                    f"its owner changes it: `trainctl models rule {block.name} --reference URI`"
                )
        if errors:
            raise ModelRefused(
                [*errors, f"model.name: the rule of model {block.name} is {charter.rule.describe()}; leave the "
                 "fields out to use it, or ask its owner to change it (`trainctl models rule`)"],
                f"the request's model block disagrees with model {block.name}'s rule",
            )  # fmt: skip

    @staticmethod
    def _not_yours(model: str, team: str, owner: str) -> ModelRefused:
        return ModelRefused(
            [
                f"model.name: model {model} belongs to team {owner}; team {team}'s requests may not add versions to "
                f"it nor be compared with its champion: name a model of your own, or ask the operator to grant team "
                f"{team} (the teams setting: models: {{{model}: {{owner: {owner}, grants: [{team}]}}}})"
            ],
            f"model {model} belongs to team {owner}",
        )

    def _champion(self, model: str, alias: str) -> ModelVersion | None:
        """The version under the rule's alias, for the trainer to score; None before the model's first success, or
        when the registry refuses the read (the decision then holds: the run scored no champion)."""
        registry = self.registry()
        name = f"{registry.model_name(model)}@{alias}"
        try:
            champion = registry.get(name)
        except CallRejected as exc:
            logs.warning(f"the Model Registry refused to read {name}; the run is not given its champion: {exc.message}")
            return None
        if champion is None or not champion.artifact_uri:
            return None
        return champion


def _unpinned_code(request: TrainingJobRequest) -> str | None:
    """Your own code, named so that what ran cannot change under the same name: an image by its digest, a package
    by its content (functions/intake/package_check.py verifies it)."""
    trainer = request.trainer
    if trainer.python_package is not None and code_digest(request.model_dump(mode="json")) is None:
        return (
            "trainer.python_package.uris: a model's versions come from code that cannot change under its name: "
            "name each package by its content (…/sha256-<hex>/<file>, as `trainctl submit --source` uploads it)"
        )
    if trainer.image is not None and trainer.builtin is None and "@sha256:" not in trainer.image:
        return (
            f"trainer.image: a model's versions come from code that cannot change under its name: name {trainer.image} "
            "by its digest (IMAGE@sha256:…, which `gcloud artifacts docker images describe IMAGE` prints)"
        )
    return None


def _said(kind: str) -> str:
    return "the built-in trainer" if kind == BUILTIN_TRAINER else f"one kind of your own code ({kind})"
