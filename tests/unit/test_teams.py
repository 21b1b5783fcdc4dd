"""The teams setting (functions/teams.py; issue 32, point 1): parsed with errors that name the field, and a
request's team taken from where it arrived, never from its labels; what an active request counts against a budget."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.capacity.budgets import costliest_attempt_usd, worst_case_usd
from functions.settings import Settings, SettingsError
from functions.teams import label_problem, parse_teams
from tests.unit.conftest import make_record, make_request

TEAMS = {
    "default_team": "shared",
    "teams": {
        "shared": {},
        "vision": {"weight": 2, "quota": {"custom_model_training_nvidia_l4_gpus": 8}, "borrow_limit": 4,
                   "monthly_budget_usd": 500, "topic": "trainctl-requests-vision"},
    },
}  # fmt: skip


def test_the_team_of_a_message_is_its_topics_and_any_other_topic_is_the_default_teams():
    """Issue 32, point 1."""
    teams = parse_teams(TEAMS)
    assert teams.team_of_topic("projects/p/topics/trainctl-requests-vision") == "vision"
    assert teams.team_of_topic("projects/p/topics/trainctl-requests") == "shared"
    assert teams.team_of_topic(None) == "shared"


def test_a_teams_share_of_a_metric_it_was_not_given_is_none_of_it():
    """Issue 32, point 2: a team may be given none of a GPU type (it may still borrow, up to its limit)."""
    teams = parse_teams(TEAMS)
    assert teams.share("vision", "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus").nominal == 8
    a100 = teams.share("vision", "custom_model_training_nvidia_a100_gpus")
    assert (a100.nominal, a100.cap(16)) == (0, 4)
    assert teams.share("shared", "custom_model_training_nvidia_l4_gpus").cap(16) == 16


def test_a_label_that_disagrees_with_the_arrival_is_a_problem_and_one_that_agrees_is_not():
    """Issue 32, point 1: labels.team never chooses the team."""
    assert label_problem({"team": "vision"}, "vision") is None
    assert label_problem(None, "vision") is None
    assert "disagrees" in (label_problem({"team": "vision"}, "shared") or "")


@pytest.mark.parametrize(
    ("teams", "names"),
    [
        ({"default_team": "nobody", "teams": {"a": {}}}, "default_team"),
        ({"default_team": "a", "teams": {"a": {"weight": 0}}}, "teams.a.weight"),
        ({"default_team": "A b", "teams": {"A b": {}}}, "team names"),
        ({"default_team": "a", "teams": {"a": {"quota": {"m": -1}}}}, "quota of m"),
    ],
)
def test_a_malformed_teams_setting_names_what_is_wrong(teams, names):
    with pytest.raises(SettingsError, match="TRAINCTL_TEAMS") as raised:
        Settings.from_env({"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "c", "TRAINCTL_EVENTS_TOPIC": "e",
                           "TRAINCTL_TRAINER_IMAGE": "i", "TRAINCTL_TEAMS": json.dumps(teams)})  # fmt: skip
    assert names in str(raised.value)


def test_local_up_teams_gives_each_team_the_topic_terraform_gives_it():
    """Issue 32, point 6: `trainctl local up --teams FILE` sets TRAINCTL_TEAMS as Terraform does, each team's topic
    <prefix>-requests-<team> (terraform/teams.tf), so a message on it is that team's."""
    from local.names import Names
    from local.stack import StackOptions, controller_settings
    from tests.terraform.tfconfig import load

    names = Names("p")
    env = controller_settings(StackOptions(teams=TEAMS), names, "http://127.0.0.1:1")
    teams = parse_teams(env["TRAINCTL_TEAMS"])
    assert teams.team_of_topic(f"projects/p/topics/{names.team_requests_topic('vision')}") == "vision"
    assert load().resource("google_pubsub_topic", "team_requests")["name"] == "${var.name_prefix}-requests-${each.key}"
    assert controller_settings(StackOptions(), names, "http://127.0.0.1:1")["TRAINCTL_TEAMS"] == ""


def test_report_by_team_groups_by_arrival_and_shows_spend_against_budget():
    """Issue 32, point 4: `trainctl report --by team` groups by the team a request arrived as (not its label) and
    shows the month's spend against each budget, as the budget counts it (issue 40: the team's month record, with
    what its active requests hold reserved)."""
    from datetime import UTC, datetime, timedelta

    from functions.ledger.budget_records import Held, MonthSpend
    from functions.ledger.history import Outcome
    from trainctl.report import budgets, build_report, format_report

    now = datetime(2025, 6, 20, tzinfo=UTC)
    ran = {"started": now - timedelta(hours=3), "ended": now - timedelta(hours=1), "hourly_usd": 10.0, "gpus": 2}
    outcomes = [
        Outcome(request_id="v1", state="succeeded", time=now, team="vision", labels={"team": "x"}, **ran),
        Outcome(request_id="s1", state="failed", time=now, team="shared", **ran),
    ]
    months = {"vision": MonthSpend(reserved={"k2": Held(12.5, now)}, spent={"k1": Held(20.0, now)})}
    months["vision"].charge_idle("tc-vision-1#1", 5400, 3.0)  # a warm pool's idle time (issue 43): in the spend
    report = build_report(outcomes, now - timedelta(days=7), now, "team")
    report["budgets"] = budgets(lambda team: months.get(team, MonthSpend()), parse_teams(TEAMS), now)
    assert set(report["groups"]) == {"vision", "shared"}
    assert report["budgets"] == {
        "vision": {
            "month": "2025-06",
            "spent_usd": 23.0,
            "reserved_usd": 12.5,
            "budget_usd": 500.0,
            "pool_idle_seconds": 5400,
            "pool_idle_usd": 3.0,
        }
    }
    text = format_report(report)
    assert "budget 2025-06  spent $23.00 and up to $12.50 reserved, of $500.00" in text
    assert "warm pools idle  90.0m  $3.00 (in the spend)" in text


def test_a_markers_team_is_its_templates_and_a_template_naming_no_team_is_the_default_teams():
    """Issue 32, point 1, markers: the template of the rule a marker matched carries the team (and is applied
    without it); a template naming no team gives the default team, one naming an unknown team is an error naming the
    rule, so an operator's typo never files one team's runs under another."""
    from types import SimpleNamespace

    from functions.intake.markers import Markers
    from functions.untrusted.documents import DocumentInvalid

    markers: Any = SimpleNamespace(settings=SimpleNamespace(teams=parse_teams(TEAMS)))
    template = {"dataset": {"target": "y"}, "team": "vision"}
    assert Markers.template_team(markers, template, "gs://d/vision/") == ({"dataset": {"target": "y"}}, "vision")
    assert Markers.template_team(markers, {"dataset": {"target": "y"}}, "gs://d/x/")[1] == "shared"
    with pytest.raises(DocumentInvalid, match="the template of rule gs://d/x/: team 'visoin' must be one of"):
        Markers.template_team(markers, {"team": "visoin"}, "gs://d/x/")


def test_an_active_requests_budget_figure_counts_what_its_ended_attempts_ran():
    """Issue 32, point 4: an active request on its second of three attempts counts what its first attempt ran (it is
    not in the history yet: the request has not ended) and, at worst, its two attempts left."""
    request = make_request(scheduling={"max_attempts": 3})
    record = make_record(request=request.model_dump(mode="json"), attempt=2, max_attempts=3, earlier_cost_usd=12.5)
    assert worst_case_usd(record) == pytest.approx(12.5 + 2 * costliest_attempt_usd(request))
