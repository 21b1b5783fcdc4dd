"""`trainctl local up` options a new user needs for the examples as typed (issue 44, point 3): `--regions` lets a
capacity ladder's rungs name other regions, as Terraform's allowed_regions; the banner names each team's own request
topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions.jobs.admission import admission_problems
from functions.settings import Settings
from local import stack
from local.names import Names
from tests.conftest import REPO_ROOT
from trainctl import local_stack
from trainctl.cli import build_parser
from trainctl.validate import load_request_file

LADDER = REPO_ROOT / "examples" / "ladder-spot-l4-to-a100.yaml"


def settings_of(argv: list[str]) -> Settings:
    options = local_stack._options(build_parser().parse_args(["local", "up", *argv]))
    return Settings.from_env(stack.controller_settings(options, Names("p", "trainctl"), "http://127.0.0.1:1"))


def region_problems(settings: Settings) -> list[str]:
    request = load_request_file(LADDER)
    return [str(p) for p in admission_problems(request, settings, "gs://c/runs/x/") if "region" in str(p)]


def test_the_ladder_example_is_refused_on_a_default_stack_and_admitted_with_regions():
    assert region_problems(settings_of([])), "the default stack allows its own region only"
    settings = settings_of(["--regions", "europe-west4"])
    assert settings.allowed_regions == ("europe-west4",)
    assert region_problems(settings) == []


@pytest.mark.parametrize("given", ["Europe-West4", "europe west4", "eu"])
def test_a_region_that_is_no_region_name_is_refused_by_local_up(given):
    with pytest.raises(ValueError, match="--regions takes region names"):
        settings_of(["--regions", given])


def test_the_banner_names_each_teams_request_topic(tmp_path: Path):
    teams = tmp_path / "teams.yaml"
    teams.write_text("default_team: ml\nteams:\n  ml: {}\n  vision: {}\n")
    options = local_stack._options(build_parser().parse_args(["local", "up", "--teams", str(teams)]))
    env = stack.controller_settings(options, Names("p", "trainctl"), "http://127.0.0.1:1")
    rows = dict(local_stack.team_topic_rows(env["TRAINCTL_TEAMS"]))
    assert rows == {
        "team ml": "topic trainctl-requests-ml  (trainctl submit --team ml)",
        "team vision": "topic trainctl-requests-vision  (trainctl submit --team vision)",
    }
    assert local_stack.team_topic_rows("") == []
