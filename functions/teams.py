"""Teams (issue 32): who asked, known by where the request arrived, and what each team may hold, spend and read.

The operator's settings (Terraform's variable `teams`, `trainctl local up --teams FILE`, read by the controller from
TRAINCTL_TEAMS as JSON): per team a weight, a nominal share of each GPU quota metric, how much it may borrow beyond
it, a monthly budget, its data folders and the operator's grants of other data, and (for Terraform) who may publish
to its topic, upload under its data prefixes and watch its events. A team is never taken from the message: a
request's team is its topic's (a push subscription per team topic, whose push path names the topic) or its marker
template's `team`. Requests on the shared topic, and markers outside every team's folders, count as the default
team's only where the operator opened them (`shared_intake_open`, issue 40 point 5): otherwise whoever may publish
there or upload there would spend the default team's quota and budget.

Pure: parsing, the team of an arrival, what a team's requests may read and where its markers may lie (issue 40,
point 5), and each team's share of one quota (functions/capacity/fair_share.py orders by it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schemas.request import BootDisk, Resources
from schemas.rules import parse_duration

TEAM_NAME_RE = r"^[a-z][a-z0-9-]{0,29}$"
# Without TRAINCTL_TEAMS every request belongs to this one team, which holds the whole quota: admission is first
# come, first served, as before teams existed.
NO_TEAMS = "default"
# The key of a trigger rule's template that names the team its markers belong to.
TEMPLATE_TEAM_KEY = "team"
TEAM_LABEL = "team"
# Each team's own folder of the data bucket for its code (`trainctl submit --source`, issue 38): only its uploaders
# may create objects there (terraform/teams.tf), and its requests may install packages from there.
PACKAGES_PREFIX = "packages/"


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


# A warm pool's keep_alive: at least 10 s (it is deleted at the first reconcile tick after), at most a day (an idle
# pool is paid for by the minute; SageMaker's warm pools keep at most an hour).
KEEP_ALIVE_BOUNDS = (10, 86_400)


class WarmPool(BaseModel):
    """Capacity a team keeps warm (issue 43, point 2): a Vertex persistent resource of `replicas` nodes of one shape,
    which trainctl creates when a request of that shape arrives, routes the team's later jobs of that shape to, and
    deletes once it has been idle `keep_alive`; its idle time is charged to the team's budget
    (functions/capacity/warm_pools.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    machine_type: str = Field(description="A GPU machine type from the catalog, as a request's resources name it.")
    accelerator_type: str | None = Field(None, description="Default: the machine's built-in GPU.")
    accelerator_count: int | None = Field(None, ge=1, le=16, description="GPUs per node; default: built-in count.")
    boot_disk: BootDisk = Field(
        default_factory=BootDisk, description="The nodes' boot disk; a job runs on the pool only with the same one."
    )
    replicas: int = Field(ge=1, le=64, description="Nodes the pool holds (all started when it is created).")
    keep_alive: int = Field(
        description="How long the pool stays after its last job ends before trainctl deletes it: '10m', '1h', or "
        f"seconds; {KEEP_ALIVE_BOUNDS[0]} s to {KEEP_ALIVE_BOUNDS[1]:,} s."
    )

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int:
        seconds = parse_duration(value)
        low, high = KEEP_ALIVE_BOUNDS
        if not low <= seconds <= high:
            raise ValueError(f"must be {low} s to {high:,} s, got {seconds} s")
        return seconds

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        """The shape read as a request's resources read it (catalog checks, the built-in GPUs filled in)."""
        if not isinstance(data, dict) or not isinstance(data.get("machine_type"), str):
            return data
        keys = ("machine_type", "accelerator_type", "accelerator_count", "boot_disk")
        # Its replicas as a job's nodes: a pool that could not hold one job (two GPUs at least) is refused too.
        shape = Resources.model_validate(
            {**{k: data[k] for k in keys if k in data}, "replica_count": data.get("replicas", 1)}
        )
        return {**data, "accelerator_type": shape.accelerator_type, "accelerator_count": shape.accelerator_count}

    def shape(self) -> tuple[str, str | None, int | None, str | None, int]:
        """What a job's nodes must be to run on the pool: machine, GPU type and count, boot disk type and size."""
        disk = self.boot_disk
        return (self.machine_type, self.accelerator_type, self.accelerator_count, disk.type, disk.size_gb)


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
        default_factory=list,
        description="Folders of the data bucket that are the team's, each ending in '/' (`vision/`): its uploaders "
        "may write there (Terraform), its requests may read there, and a marker there starts a job for this team only.",
    )
    reads: list[str] = Field(
        default_factory=list,
        description="The operator's grant of data beyond its own folders: folders its requests may read too, each "
        "ending in '/': of the data bucket (`shared/reference/`, another team's `vision/public/`) or of another "
        "allowed data bucket (`gs://bucket/folder/`).",
    )
    watchers: dict[str, str] = Field(
        default_factory=dict,
        description="Terraform: name => IAM member; each gets a pull subscription on the events topic that receives "
        "this team's events only (a filter on the `team` attribute), and may pull from it alone.",
    )
    warm_pools: list[WarmPool] = Field(
        default_factory=list,
        description="Capacity kept warm for this team's jobs, one pool per shape (issue 43): created when a request "
        "of its shape arrives, deleted after keep_alive idle, its idle time charged to this team's budget.",
    )

    @model_validator(mode="after")
    def _whole_shares(self) -> Team:
        shapes = [pool.shape() for pool in self.warm_pools]
        if len(set(shapes)) != len(shapes):
            raise ValueError("warm_pools: one pool per shape (machine, GPUs, boot disk): two name the same")
        negative = [metric for metric, gpus in self.quota.items() if gpus < 0]
        if negative:
            raise ValueError(f"quota of {', '.join(negative)} must be 0 or more GPUs")
        for field, prefixes in (("data_prefixes", self.data_prefixes), ("reads", self.reads)):
            for prefix in prefixes:
                if problem := _folder_problem(prefix, absolute_allowed=field == "reads"):
                    raise ValueError(f"{field}: {prefix!r} {problem}")
        return self


def _folder_problem(prefix: str, absolute_allowed: bool) -> str | None:
    """Why `prefix` cannot name a folder (None when it can). It must end in '/': `vision` would also cover
    `vision-evil/`, another team's folder (issue 40, point 5)."""
    path = prefix.removeprefix("gs://") if absolute_allowed else prefix
    if prefix.startswith("gs://") and not absolute_allowed:
        return "must be a folder of the data bucket (`vision/`), not a gs:// URI"
    if prefix.startswith("gs://") and "/" not in path.rstrip("/"):
        return "must name a folder inside the bucket (gs://bucket/folder/), not the whole bucket"
    if not path or path.startswith("/") or not path.endswith("/"):
        return "must be a folder that ends in '/' (`vision/`): without it `vision` would also cover `vision-evil/`"
    if any(part in (".", "..") for part in path.split("/")[:-1]):
        return "must not hold '.' or '..' parts"
    return None


class ModelOwner(BaseModel):
    """The operator's word on who owns a model (issue 38): it outranks what the model's charter recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str = Field(description="The team whose requests may add versions and whose rule judges them.")
    grants: list[str] = Field(default_factory=list, description="Other teams whose requests may add versions.")


class Teams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    default_team: str = Field(description="The team of requests on the shared topic and of templates naming none.")
    teams: dict[str, Team]
    data_bucket: str | None = Field(
        None,
        description="The bucket data_prefixes (and `reads` not written as gs://) are folders of: the data bucket, "
        "which Terraform and `trainctl local up` fill in.",
    )
    shared_intake_open: bool = Field(
        False,
        description="Whether requests on the shared topic, and markers outside every team's data_prefixes, count as "
        "the default team's (spend its quota and budget). False: they are rejected, and each team, the default one "
        "included, sends requests on its own topic and uploads markers under its own folders.",
    )
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
        owned = [(prefix, name) for name, team in self.teams.items() for prefix in team.data_prefixes]
        for index, (prefix, name) in enumerate(owned):
            if prefix.startswith(PACKAGES_PREFIX) or PACKAGES_PREFIX.startswith(prefix):
                raise ValueError(
                    f"teams.{name}.data_prefixes: {prefix!r} reaches into {PACKAGES_PREFIX}, each team's own folder "
                    "for its code"
                )
            for other, other_name in owned[index + 1 :]:
                if prefix.startswith(other) or other.startswith(prefix):
                    raise ValueError(
                        f"teams.{name}.data_prefixes: {prefix!r} overlaps {other!r} of team {other_name}: a folder "
                        "belongs to one team (its uploaders write there, and markers there start its jobs)"
                    )
        relative = bool(owned) or any(not r.startswith("gs://") for team in self.teams.values() for r in team.reads)
        if relative and not self.data_bucket:
            raise ValueError("data_bucket: the data bucket must be named to place data_prefixes and reads")
        return self

    def team_of_topic(self, topic: str | None) -> str:
        """The team whose request topic a message arrived on; the default team for any other topic."""
        return self.topic_team(topic) or self.default_team

    def topic_team(self, topic: str | None) -> str | None:
        """The team whose own request topic `topic` is; None for any other topic (the shared one)."""
        name = (topic or "").rsplit("/", 1)[-1]
        return next((team for team, t in self.teams.items() if t.topic and t.topic == name), None)

    # ---- what a team's requests may read, and where its markers may lie (issue 40, point 5) ----------------

    def _absolute(self, prefix: str) -> str:
        return prefix if prefix.startswith("gs://") else f"gs://{self.data_bucket}/{prefix}"

    def owned_folders(self, team: str) -> list[str]:
        """The team's own data folders, as gs:// prefixes."""
        found = self.teams.get(team)
        return [self._absolute(prefix) for prefix in (found.data_prefixes if found else [])]

    def readable(self, team: str) -> list[str]:
        """Every gs:// prefix the team's requests may name as data: its own folders, then the operator's grants."""
        found = self.teams.get(team)
        return self.owned_folders(team) + [self._absolute(prefix) for prefix in (found.reads if found else [])]

    def package_folders(self, team: str) -> list[str]:
        """Where the team's requests may install packages from: its own packages folder, and what it may read."""
        own = [f"gs://{self.data_bucket}/{PACKAGES_PREFIX}{team}/"] if self.data_bucket else []
        return own + self.readable(team)

    def owner_of(self, uri: str) -> str | None:
        """The team whose data folder holds `uri` (gs://bucket/name); None outside every team's folders."""
        return next((name for name in self.teams if any(uri.startswith(f) for f in self.owned_folders(name))), None)

    def data_problem(self, team: str, uri: str, folders: list[str] | None = None) -> str | None:
        """Why a request of `team` may not name `uri` as data (None when it may): it lies outside `folders` (default:
        what the team may read)."""
        allowed = self.readable(team) if folders is None else folders
        if any(uri.startswith(folder) for folder in allowed):
            return None
        owner = self.owner_of(uri)
        whose = f"team {owner}'s data" if owner and owner != team else "outside its folders"
        return (
            f"guardrail team_data: {uri} is {whose}; team {team}'s requests read only under "
            f"{', '.join(allowed) or 'nothing yet'} (its data_prefixes and the operator's grants in the teams "
            f"setting: teams.{team}.data_prefixes, teams.{team}.reads)"
        )

    def marker_problem(self, bucket: str, name: str, rule_team: str, rule: str) -> str | None:
        """Why a marker at gs://bucket/name, matched by `rule` whose team is `rule_team`, may not start a job (None
        when it may). A marker in a team's folder was put there by that team's uploaders: it starts that team's jobs
        only. A marker outside every team's folder was put there by the deployment's other uploaders (Terraform's
        data_uploaders): it is the default team's, and only where the operator opened shared intake."""
        uri = f"gs://{bucket}/{name}"
        owner = self.owner_of(uri)
        if owner == rule_team:
            return None
        if owner is not None:
            return (
                f"marker: {uri} lies in team {owner}'s data folder, but its trigger rule {rule} belongs to team "
                f"{rule_team}: a marker starts jobs only for the team whose folder it is in. Give the rule "
                f"`team: {owner}`, or upload the marker under team {rule_team}'s data_prefixes"
            )
        if rule_team == self.default_team and self.shared_intake_open:
            return None
        where = ", ".join(self.owned_folders(rule_team)) or "none yet"
        why = (
            "and shared intake is closed (teams.shared_intake_open)"
            if rule_team == self.default_team
            else "which only the default team's rules may use, where the operator opened shared intake"
        )
        return (
            f"marker: {uri} lies outside every team's data folders, where uploaders of no team may write, {why}; "
            f"team {rule_team}'s markers must lie under its data_prefixes ({where})"
        )

    def shared_topic_problem(self) -> str | None:
        """Why a request on the shared topic may not run (None where the operator opened shared intake)."""
        if self.shared_intake_open:
            return None
        return (
            "topic: the shared requests topic is closed in this deployment (teams.shared_intake_open is false): "
            "whoever may publish there would spend team "
            f"{self.default_team}'s quota and budget. Publish to your team's own topic (`trainctl submit --team "
            "NAME`, or TRAINCTL_REQUESTS_TOPIC)"
        )

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


def with_topics(
    teams: dict[str, Any], topic_of: Callable[[str], str], data_bucket: str | None = None
) -> dict[str, Any]:
    """The teams setting (Terraform's variable's shape) with each team's request topic and the data bucket filled in,
    as Terraform does for TRAINCTL_TEAMS (terraform/locals.tf)."""
    named = {name: {**team, "topic": topic_of(name)} for name, team in dict(teams.get("teams") or {}).items()}
    return {**teams, "teams": named} | ({"data_bucket": data_bucket} if data_bucket else {})


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
