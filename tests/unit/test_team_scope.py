"""What a team may read and where its markers may lie (issue 40, point 5): a team's requests name data only under its
own folders and the operator's grants, a folder ends at a '/' boundary, a marker starts jobs only for the team whose
folder it lies in, and the shared topic spends the default team's quota only where the operator opened it; every
event of a team's request carries its team as an attribute, which each team's events subscription filters on."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from functions.jobs.admission import admission_problems
from functions.settings import Settings, SettingsError
from functions.teams import parse_teams
from schemas.events import Accepted, Running, to_pubsub_message
from tests.unit.conftest import RECORD_TIME, make_record, make_request

DATA = "data-bucket"
TEAMS: dict[str, Any] = {
    "default_team": "shared",
    "data_bucket": DATA,
    "teams": {
        "shared": {"data_prefixes": ["shared/"]},
        "red": {"data_prefixes": ["red/"], "reads": ["reference/", "blue/public/"]},
        "blue": {"data_prefixes": ["blue/", "vision/"], "reads": ["gs://extra-bucket/tables/"]},
    },
}


def teams_settings(settings: Settings, **changes: Any) -> Settings:
    return replace(settings, teams=parse_teams(TEAMS | changes))


def data_problems(request: Any, settings: Settings, team: str | None) -> list[str]:
    """The team_data problems admission finds (its other guardrails are other tests' business)."""
    found = admission_problems(request, settings, "gs://c/runs/r/", f"request:{team}/r", team)
    return [str(p) for p in found if "guardrail team_data" in p.message]


# ---- the setting ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("team", "field"),
    [
        ({"data_prefixes": ["vision"]}, "data_prefixes: 'vision' must be a folder that ends in '/'"),
        ({"data_prefixes": ["gs://data-bucket/red/"]}, "data_prefixes: 'gs://data-bucket/red/' must be a folder of"),
        ({"data_prefixes": ["/red/"]}, "must be a folder that ends in '/'"),
        ({"data_prefixes": ["red/../blue/"]}, "must not hold '.' or '..' parts"),
        ({"reads": ["gs://extra-bucket"]}, "reads: 'gs://extra-bucket' must name a folder inside the bucket"),
        ({"reads": ["gs://extra-bucket/tables"]}, "reads: 'gs://extra-bucket/tables' must be a folder that ends"),
        ({"data_prefixes": ["packages/red/"]}, "reaches into packages/"),
        ({"data_prefixes": ["blue/red/"]}, "overlaps 'blue/' of team blue"),
        ({"data_prefixes": ["blue/"]}, "overlaps 'blue/' of team blue"),
    ],
)
def test_a_folder_without_its_boundary_or_one_another_team_holds_is_refused_naming_the_field(settings, team, field):
    """Issue 40, point 5: `vision` would cover `vision-evil/`; a folder is one team's (its uploaders write there)."""
    teams = json.loads(json.dumps(TEAMS))
    teams["teams"]["red"] = team
    with pytest.raises(SettingsError, match="TRAINCTL_TEAMS") as raised:
        Settings.from_env({"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "c", "TRAINCTL_EVENTS_TOPIC": "e",
                           "TRAINCTL_TRAINER_IMAGE": "i", "TRAINCTL_TEAMS": json.dumps(teams)})  # fmt: skip
    assert field in str(raised.value)


def test_folders_need_the_data_bucket_they_are_folders_of():
    with pytest.raises(ValueError, match="data_bucket: the data bucket must be named"):
        parse_teams({k: v for k, v in TEAMS.items() if k != "data_bucket"})
    assert parse_teams({"default_team": "a", "teams": {"a": {}}}).data_bucket is None


def test_local_up_fills_in_the_data_bucket_as_terraform_does():
    from local.names import Names
    from local.stack import StackOptions, controller_settings

    names = Names("p")
    env = controller_settings(StackOptions(teams=TEAMS), names, "http://127.0.0.1:1")
    assert parse_teams(env["TRAINCTL_TEAMS"]).data_bucket == names.data_bucket


# ---- what a team's requests may read ----------------------------------------------------------------------------


def test_a_team_reads_its_own_folders_and_the_operators_grants_and_nothing_else():
    teams = parse_teams(TEAMS)
    assert teams.readable("red") == [f"gs://{DATA}/red/", f"gs://{DATA}/reference/", f"gs://{DATA}/blue/public/"]
    assert teams.data_problem("red", f"gs://{DATA}/red/2026/part-0.csv") is None
    assert teams.data_problem("red", f"gs://{DATA}/blue/public/ref.csv") is None  # the operator's grant
    assert teams.data_problem("blue", "gs://extra-bucket/tables/t1/") is None
    problem = teams.data_problem("red", f"gs://{DATA}/blue/secret/")
    assert problem is not None and "guardrail team_data" in problem and "team blue's data" in problem
    assert "teams.red.data_prefixes, teams.red.reads" in problem


def test_a_folder_ends_at_its_slash():
    """Issue 40, point 5: blue's `vision/` does not cover `vision-evil/`, nor does red's `red/` cover `red` itself
    (a dataset URI `gs://b/red` would list `red-ops/` too)."""
    teams = parse_teams(TEAMS)
    assert teams.owner_of(f"gs://{DATA}/vision-evil/_SUCCESS") is None
    assert teams.owner_of(f"gs://{DATA}/vision/_SUCCESS") == "blue"
    assert teams.data_problem("red", f"gs://{DATA}/red") is not None
    assert teams.data_problem("red", f"gs://{DATA}/red-ops/") is not None


def test_admission_rejects_a_request_naming_another_teams_data_naming_the_field_and_the_rule(settings):
    """Issue 40, point 5: red trained on blue's data. Now each data field of red's request is checked."""
    settings = teams_settings(settings)
    request = make_request(dataset={"uri": f"gs://{DATA}/blue/churn/", "target": "y"})
    assert data_problems(request, settings, "red") == [
        f"dataset.uri: guardrail team_data: gs://{DATA}/blue/churn/ is team blue's data; team red's requests read "
        f"only under gs://{DATA}/red/, gs://{DATA}/reference/, gs://{DATA}/blue/public/ (its data_prefixes and the "
        "operator's grants in the teams setting: teams.red.data_prefixes, teams.red.reads)"
    ]
    own = make_request(dataset={"uri": f"gs://{DATA}/red/churn/", "target": "y"})
    assert data_problems(own, settings, "red") == []
    assert data_problems(request, settings, "blue") == []


def test_a_reference_set_and_a_package_are_data_too(settings):
    settings = replace(teams_settings(settings), allow_python_packages=True)
    request = make_request(
        dataset={"uri": f"gs://{DATA}/red/churn/", "target": "y"},
        trainer={
            "python_package": {
                "executor": "pytorch-2.4",
                "uris": [f"gs://{DATA}/packages/red/p-1.tar.gz", f"gs://{DATA}/packages/blue/p-1.tar.gz"],
                "module": "p.train",
            }
        },
        model={"name": "churn", "metric": "loss", "goal": "minimize", "reference": f"gs://{DATA}/blue/holdout.csv"},
    )
    fields = {problem.partition(":")[0] for problem in data_problems(request, settings, "red")}
    assert fields == {"model.reference", "trainer.python_package.uris[1]"}


def test_without_teams_no_data_is_scoped(settings):
    request = make_request(dataset={"uri": f"gs://{DATA}/blue/churn/", "target": "y"})
    assert data_problems(request, settings, None) == []


# ---- where a team's markers may lie ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule_team", "open_", "refused"),
    [
        ("red/churn/_SUCCESS", "red", False, None),
        ("red/churn/_SUCCESS", "blue", False, "lies in team red's data folder, but its trigger rule"),
        ("datasets/churn/_SUCCESS", "red", False, "lies outside every team's data folders"),
        ("datasets/churn/_SUCCESS", "red", True, "which only the default team's rules may use"),
        ("datasets/churn/_SUCCESS", "shared", False, "shared intake is closed (teams.shared_intake_open)"),
        ("datasets/churn/_SUCCESS", "shared", True, None),
        ("vision-evil/_SUCCESS", "blue", False, "lies outside every team's data folders"),
    ],
)
def test_a_marker_starts_jobs_only_for_the_team_whose_folder_it_lies_in(name, rule_team, open_, refused):
    """Issue 40, point 5: the deployment's other uploaders (data_uploaders) may not plant a marker that spends a
    team's quota and budget, and one team's uploaders may not start another team's jobs."""
    teams = parse_teams(TEAMS | {"shared_intake_open": open_})
    problem = teams.marker_problem(DATA, name, rule_team, f"gs://{DATA}/")
    assert (problem is None) == (refused is None), problem
    if refused:
        assert refused in (problem or "") and (problem or "").startswith("marker: ")


def test_the_shared_topic_is_closed_unless_the_operator_opens_it():
    """Issue 40, point 5: the safest default; every team, the default one included, has its own topic."""
    teams = parse_teams(TEAMS | {"teams": TEAMS["teams"] | {"red": {"topic": "trainctl-requests-red"}}})
    assert teams.topic_team("projects/p/topics/trainctl-requests-red") == "red"
    assert teams.topic_team("projects/p/topics/trainctl-requests") is None
    assert "the shared requests topic is closed" in (teams.shared_topic_problem() or "")
    assert parse_teams(TEAMS | {"shared_intake_open": True}).shared_topic_problem() is None


# ---- every event of a team's request says its team ----------------------------------------------------------------


def test_every_event_of_a_teams_request_carries_the_team_attribute():
    """Issue 40, point 5: each team's events subscription filters on `attributes.team`; an event a record queues
    (running, say, which has no team of its own) takes the record's team."""
    record = make_record(team="red")
    running = Running(**record.envelope(RECORD_TIME), message="running")
    record.add_events([running])
    (queued,) = record.outbox_events()
    assert queued.team == "red"
    assert to_pubsub_message(queued, "//trainctl").attributes["team"] == "red"
    untouched = Accepted(**make_record().envelope(RECORD_TIME), message="m", cost=record.cost)
    assert "team" not in to_pubsub_message(untouched, "//trainctl").attributes
