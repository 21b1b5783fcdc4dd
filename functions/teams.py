"""Teams (issue 32): who asked, known by where the request arrived, and what each team may hold and spend.

The operator's settings (Terraform's variable `teams`, `trainctl local up --teams FILE`, read by the controller from
TRAINCTL_TEAMS as JSON): per team a weight, a nominal share of each GPU quota metric, how much it may borrow beyond
it, a monthly budget, and (for Terraform) who may publish to its topic and upload under its data prefixes. A team
is never taken from the message: a request's team is its topic's (a push subscription per team topic, whose push
path names the topic) or its marker template's `team`; requests on the shared topic belong to `default_team`.

Pure: parsing, the team of an arrival, and each team's share of one quota (functions/capacity/fair_share.py orders by
it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

TEAM_NAME_RE = r"^[a-z][a-z0-9-]{0,29}$"
# Without TRAINCTL_TEAMS every request belongs to this one team, which holds the whole quota: admission is first
# come, first served, as before teams existed.
NO_TEAMS = "default"
# The key of a trigger rule's template that names the team its markers belong to.
TEMPLATE_TEAM_KEY = "team"
TEAM_LABEL = "team"


@dataclass(frozen=True)
class Share:
    """A team's share of one quota metric. `nominal` None: the whole quota is its own (no teams configured)."""

    nominal: int | None
    borrow_limit: int | None
    weight: float = 1.0

    def cap(self, limit: int) -> int:
        if self.nominal is None or self.borrow_limit is None:
            return limit
        return min(limit, self.nominal + self.borrow_limit)

    def borrows(self, held_after: int) -> bool:
        return self.nominal is not None and held_after > self.nominal


class TeamsError(ValueError):
    """TRAINCTL_TEAMS (or a --teams file) is not a valid teams setting; the message names the field."""


class Team(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(1.0, gt=0, description="Fair share: admission goes to the lowest GPUs held ÷ weight.")
    quota: dict[str, int] = Field(
        default_factory=dict,
        description="Nominal GPUs per Vertex quota metric (its last part, e.g. custom_model_training_nvidia_l4_gpus), "
        "in each region; a metric not named is 0 (the team only borrows it, if borrow_limit lets it).",
    )
    borrow_limit: int | None = Field(
        None, ge=0, description="GPUs beyond its nominal share it may hold of a metric; null: up to the quota."
    )
    monthly_budget_usd: float | None = Field(None, ge=0, description="null: no budget.")
    topic: str | None = Field(
        None, description="Its request topic; Terraform and `trainctl local up` set it: <prefix>-requests-<team>."
    )
    custom_service_account: str | None = Field(
        None,
        description="What its own code (an image or a package) runs as; Terraform sets it for every team but the "
        "default: <prefix>-custom-<team>, which may write only custom-runs/_teams/<team>/. None: the custom images' "
        "account.",
    )
    publishers: list[str] = Field(default_factory=list, description="Terraform: IAM members that publish to its topic.")
    uploaders: list[str] = Field(
        default_factory=list, description="Terraform: IAM members that upload under its data_prefixes."
    )
    data_prefixes: list[str] = Field(
        default_factory=list, description="Terraform: folders of the data bucket its uploaders may write to."
    )

    @model_validator(mode="after")
    def _whole_shares(self) -> Team:
        negative = [metric for metric, gpus in self.quota.items() if gpus < 0]
        if negative:
            raise ValueError(f"quota of {', '.join(negative)} must be 0 or more GPUs")
        return self


class ModelOwner(BaseModel):
    """The operator's word on who owns a model (issue 38): it outranks what the model's charter recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str = Field(description="The team whose requests may add versions and whose rule judges them.")
    grants: list[str] = Field(default_factory=list, description="Other teams whose requests may add versions.")


class Teams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    default_team: str = Field(description="The team of requests on the shared topic and of templates naming none.")
    teams: dict[str, Team]
    models: dict[str, ModelOwner] = Field(
        default_factory=dict,
        description="Model Registry model ids and their owners; a model not named belongs to the team whose request "
        "created it.",
    )

    @model_validator(mode="after")
    def _names(self) -> Teams:
        import re

        bad = [name for name in self.teams if not re.fullmatch(TEAM_NAME_RE, name)]
        if bad:
            raise ValueError(f"team names must match {TEAM_NAME_RE} (topic and label rules): {', '.join(bad)}")
        if self.default_team not in self.teams:
            raise ValueError(f"default_team {self.default_team!r} is not one of the teams ({', '.join(self.teams)})")
        for model, declared in self.models.items():
            unknown = [t for t in [declared.owner, *declared.grants] if t not in self.teams]
            if unknown:
                raise ValueError(
                    f"models.{model}: {', '.join(unknown)} is not one of the teams ({', '.join(self.teams)})"
                )
        return self

    def team_of_topic(self, topic: str | None) -> str:
        """The team whose request topic a message arrived on; the default team for any other topic."""
        name = (topic or "").rsplit("/", 1)[-1]
        return next((team for team, t in self.teams.items() if t.topic and t.topic == name), self.default_team)

    def share(self, team: str, metric: str) -> Share:
        t = self.teams.get(team) or self.teams[self.default_team]
        return Share(nominal=t.quota.get(metric.rsplit("/", 1)[-1], 0), borrow_limit=t.borrow_limit, weight=t.weight)


def parse_teams(raw: str | dict[str, Any]) -> Teams:
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
        return Teams.model_validate(data)
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'teams'}: {e['msg']}" for e in exc.errors())
            raise TeamsError(where) from None
        raise TeamsError(f"not JSON: {exc}") from None


def with_topics(teams: dict[str, Any], topic_of: Callable[[str], str]) -> dict[str, Any]:
    """The teams setting (Terraform's variable's shape) with each team's request topic filled in, as Terraform
    does for TRAINCTL_TEAMS (terraform/locals.tf)."""
    named = {name: {**team, "topic": topic_of(name)} for name, team in dict(teams.get("teams") or {}).items()}
    return {**teams, "teams": named}


def everyone_shares(team: str) -> Share:
    """The one team there is without teams configured (any name): the whole quota, nothing borrowed."""
    return Share(nominal=None, borrow_limit=None, weight=1.0)


def label_problem(labels: dict[str, str] | None, team: str) -> str | None:
    """A request's `labels.team` that disagrees with where it arrived (issue 32, point 1)."""
    claimed = (labels or {}).get(TEAM_LABEL)
    if claimed is None or claimed == team:
        return None
    return (
        f"labels.team: {claimed!r} disagrees with where the request arrived, which is team {team!r}'s; a team is "
        "known by its request topic (or its marker template), never by a label: publish to your team's topic, or "
        "leave labels.team out"
    )
