"""A model's charter: who owns it, the rule its versions are judged by, the trainer that feeds it and the reference
rows it is judged on — fixed when the model is created, changed only by its owner's (the operator's) recorded action.

  model-charters/<model id>.json   Charter, written by compare-and-swap

A challenger's request may repeat the rule or leave it out; it never chooses it (issue 38: a request that named the
metric `seed` promoted itself). The charter is created by the first request naming a model that does not exist
(its team becomes the owner), or declared by the operator (the teams setting's `models`), or adopted for a model
registered before charters existed (`trainctl models adopt`). Pure: functions/ledger/model_records.py keeps them.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.request import BUILTIN_METRIC_GOALS, DeployBlock, ModelBlock

CHARTERS_PREFIX = "model-charters/"
# The controller's own copies, outside every prefix a job account may write and every prefix the lifecycle rule
# deletes (terraform/storage.tf, iam.tf): each registered version's model folder, and each reference set.
ARTIFACTS_PREFIX = "model-artifacts/"
REFERENCES_PREFIX = "model-references/"
MAX_CHANGES = 100
# The fields of the model block that make its rule; `name` names the model and `max_drift` is the run's own limit
# on its features (it decides only whether that run stops), so neither is part of it.
RULE_FIELDS = (
    "metric",
    "goal",
    "min_improvement",
    "alias",
    "moves_default",
    "confidence",
    "min_champion_skill",
    "max_target_drift",
)

Goal = Literal["maximize", "minimize"]


class Rule(BaseModel):
    """How a challenger is judged: on `metric` (None: the built-in trainer's metric for the run's task, fixed at the
    first registration), better by more than `min_improvement` at `confidence` on the reference set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str | None = None
    goal: Goal | None = None
    min_improvement: float
    alias: str
    moves_default: bool
    confidence: float
    min_champion_skill: float
    max_target_drift: float | None = None

    def aliases(self) -> list[str]:
        """What a promotion moves."""
        return [self.alias, "default"] if self.moves_default else [self.alias]

    def describe(self) -> str:
        metric = self.metric or "the built-in trainer's metric for its task"
        goal = f" ({self.goal})" if self.goal else ""
        default = " and `default`" if self.moves_default else " (`default` stays)"
        return (
            f"metric {metric}{goal}, min_improvement {self.min_improvement:g} at confidence {self.confidence:g}, "
            f"alias `{self.alias}`{default}, min_champion_skill {self.min_champion_skill:g}, max_target_drift "
            f"{'none' if self.max_target_drift is None else format(self.max_target_drift, 'g')}"
        )


def rule_of(block: ModelBlock) -> Rule:
    """The rule a new model takes from the request that creates it; a built-in metric gets its known goal."""
    goal = block.goal or BUILTIN_METRIC_GOALS.get(block.metric or "")
    return Rule(**{name: getattr(block, name) for name in RULE_FIELDS} | {"goal": goal})


class Reference(BaseModel):
    """The model's reference set: a folder of rows the controller copied and keeps, outside every job's reach."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Names the copy; a run records the id it was given.")
    uri: str = Field(description="gs://<control bucket>/model-references/<model>/<id>/")
    source: str = Field(description="Where the rows came from, in words (a URI, or a version's validation rows).")
    time: datetime


class Change(BaseModel):
    """One recorded change of the charter: by whom, what, why."""

    model_config = ConfigDict(extra="forbid")

    time: datetime
    by: str = Field(
        description="`operator` (trainctl models, with the control bucket's write access) or the controller."
    )
    action: Literal["created", "adopted", "rule", "reference", "metric_fixed", "owner", "deploy"]
    changes: dict[str, list[Any]] = Field(default_factory=dict, description="field: [before, after]")
    message: str = ""


class Charter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_id: str
    owner: str = Field(description="The team that owns the model: its requests (and grants') may add versions.")
    grants: list[str] = Field(default_factory=list, description="Other teams whose requests may add versions.")
    kind: str = Field(description="The trainer that feeds it (trainer label value): builtin, an image, a package.")
    rule: Rule
    reference: Reference | None = None
    deploy: DeployBlock | None = Field(
        None, description="Where promoted versions serve and how they roll out (issue 41); None: not served."
    )
    reference_from_first_version: bool = Field(
        description="No reference named at creation: the first registered version's validation rows become it. "
        "False for an adopted model: its reference is set by its owner."
    )
    created: datetime
    created_by: str = Field(description="The request id that created it, or `operator`.")
    changes: list[Change] = Field(default_factory=list)

    def may_feed(self, team: str, owner: str | None = None, grants: list[str] | None = None) -> bool:
        """Whether `team`'s requests may add versions: the owner and the teams it grants (the operator's
        declaration, when given, instead of the recorded ones)."""
        return team == (owner or self.owner) or team in (self.grants if grants is None else grants)

    def record(self, change: Change) -> None:
        self.changes = [*self.changes, change][-MAX_CHANGES:]

    def with_metric(self, metric: str, goal: Goal, now: datetime) -> Charter:
        """The charter with the built-in trainer's metric for the model's task, fixed at its first decision, so that
        every later version is judged on the same one (and a request may name it)."""
        fixed = self.model_copy(deep=True)
        fixed.rule = self.rule.model_copy(update={"metric": metric, "goal": goal})
        changes = {"metric": [None, metric], "goal": [self.rule.goal, goal]}
        message = f"the metric is {metric} ({goal}), the built-in trainer's for the model's task"
        fixed.record(Change(time=now, by="controller", action="metric_fixed", changes=changes, message=message))
        return fixed


def judged_by(snapshot: Rule, current: Rule) -> bool:
    """Whether a run admitted under `snapshot` is judged by the model's `current` rule: the same rule, or the same
    but for the metric the first decision fixed."""
    if snapshot.metric is None and current.metric is not None:
        snapshot = snapshot.model_copy(update={"metric": current.metric, "goal": current.goal})
    return snapshot == current


def disagreements(block: ModelBlock, rule: Rule) -> list[str]:
    """The fields a request's model block sets otherwise than the model's rule, as `model.<field>: …` errors. A
    field the request leaves out takes the rule's value; naming the rule's own value is allowed."""
    found = []
    for name in RULE_FIELDS:
        if name not in block.model_fields_set:
            continue
        mine, theirs = getattr(block, name), getattr(rule, name)
        if name == "goal" and mine is not None and theirs is None:
            theirs = BUILTIN_METRIC_GOALS.get(rule.metric or "")
        if mine != theirs:
            found.append(f"model.{name}: {mine!r} is not the model's rule ({name}: {theirs!r})")
    return found


def deploy_disagreement(block: ModelBlock, deploy: DeployBlock | None) -> list[str]:
    """A request's `model.deploy` that is not the model's, as an error; leaving it out takes the model's."""
    if "deploy" not in block.model_fields_set or block.deploy == deploy:
        return []
    theirs = deploy.model_dump(mode="json") if deploy else None
    return [
        f"model.deploy: {block.deploy.model_dump(mode='json') if block.deploy else None!r} is not the model's rollout "
        f"({theirs!r}); its owner changes it: `trainctl models deploy {block.name} --endpoint NAME …`"
    ]


def reference_id(model_id: str, source: str, by: str) -> str:
    return hashlib.sha256(f"{model_id}|{source}|{by}".encode()).hexdigest()[:16]
