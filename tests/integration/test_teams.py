"""Teams on the local stack (issue 32, acceptance): two teams, each with its own request topic, sharing the GPU
quota of the JobService's capacity model through trainctl's pool — one over its share waits while the other is
admitted, one borrows what the other leaves idle, both waiting are admitted in fair order, a budget refuses, and a
forged team label is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.deployment import Deployment, fake_node_request, serving

V100 = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 2}
P100 = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_P100", "accelerator_count": 2}
V100_METRIC, P100_METRIC = "custom_model_training_nvidia_v100_gpus", "custom_model_training_nvidia_p100_gpus"
CAPACITY: dict[str, Any] = {"regions": {"us-central1": {"quotas": {V100_METRIC: 8, P100_METRIC: 4}}}}
TEAMS = {
    "default_team": "shared",
    "teams": {
        "shared": {},
        # V100 (limit 8): a owns 2 and may borrow 2 more; b owns 6. P100 (limit 4): each is promised all of it,
        # with equal weights, so that only fair share decides between them.
        "a": {"topic": "it-requests-a", "quota": {V100_METRIC: 2, P100_METRIC: 4}, "borrow_limit": 2},
        "b": {"topic": "it-requests-b", "quota": {V100_METRIC: 6, P100_METRIC: 4}},
        "c": {"topic": "it-requests-c", "monthly_budget_usd": 1},
    },
}


@pytest.fixture(scope="module")
def teams(jobservice, tmp_path_factory) -> Iterator[Deployment]:
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(jobservice, log_dir, CAPACITY, TRAINCTL_TEAMS=json.dumps(TEAMS)) as deployment:
        yield deployment


def ask(deployment: Deployment, team: str, request_id: str, resources: dict[str, Any], sleep: str = "30") -> None:
    document = fake_node_request(request_id, "--sleep", sleep, resources=resources)
    assert deployment.request(document, topic=f"it-requests-{team}") == 200


def test_a_forged_team_label_is_refused(teams):
    """Issue 32, point 1: a request on team a's topic that says labels.team b is rejected; the same on b's topic
    is accepted as b's."""
    events = teams.events()
    document = fake_node_request("forged", labels={"team": "b"}, resources={"machine_type": "g2-standard-24"})
    assert teams.request(document, topic="it-requests-a") == 200
    rejected = events.wait_for("forged", "rejected")
    assert (rejected.reason, rejected.team) == ("invalid", "a")
    assert "labels.team: 'b' disagrees with where the request arrived, which is team 'a'" in rejected.errors[0]


def test_a_request_that_would_pass_its_teams_monthly_budget_is_rejected_with_the_figures(teams):
    """Issue 32, point 4: team c's budget is $1; a request whose worst case is more is rejected (reason budget)."""
    events = teams.events()
    ask(teams, "c", "over-budget", V100)
    rejected = events.wait_for("over-budget", "rejected")
    assert rejected.reason == "budget" and rejected.budget is not None
    assert (rejected.budget.team, rejected.budget.budget_usd, rejected.budget.spent_usd) == ("c", 1.0, 0.0)
    assert rejected.budget.request_usd > 1.0 and "monthly_budget_usd" in rejected.errors[0]
    assert teams.record("request:over-budget") is None, "a budget rejection claimed nothing"


def test_a_team_borrows_what_the_other_leaves_idle_and_over_its_share_waits_while_the_other_is_admitted(teams):
    """Issue 32, points 2 and 5, on V100 (limit 8): team a owns 2 and may borrow 2. With b idle, a's second request
    borrows; its third waits on its team's share though 4 GPUs are free; b's request is admitted meanwhile."""
    events = teams.events()
    for index in range(3):
        ask(teams, "a", f"a-v{index}", V100)
    assert events.states("a-v0")[-1] == "submitted" and events.states("a-v1")[-1] == "submitted"
    waiting = events.wait_for("a-v2", "queued")
    assert (waiting.held_by, waiting.team, waiting.held) == ("team_share", "a", 4)
    ask(teams, "b", "b-v0", V100)
    assert events.states("b-v0")[-1] == "submitted", "b waited behind a's request over its share"
    teams.reconcile()
    assert teams.record("request:a-v2")["state"] == "queued"


def test_when_both_teams_wait_the_one_holding_less_goes_first(teams, job_client):
    """Issue 32, point 3, on P100 (limit 4, equal weights): a holds the whole quota and has two more waiting; b's
    two come after them. When a's short job ends, b (holding nothing) goes before a's older waiting request, which
    first come first served would have let in."""
    events = teams.events()
    ask(teams, "a", "a-p0", P100, sleep="1")
    ask(teams, "a", "a-p1", P100)
    for request_id in ("a-p2", "a-p3"):
        ask(teams, "a", request_id, P100)
    for request_id in ("b-p0", "b-p1"):
        ask(teams, "b", request_id, P100)
    queued = events.of("b-p0", "queued")[0]
    assert (queued.held_by, queued.ahead) == ("project_quota", 0), "b holds less: it is next once there is room"
    deadline = time.monotonic() + 90
    while "submitted" not in events.states("b-p0"):
        assert time.monotonic() < deadline, {r: events.states(r) for r in ("a-p0", "a-p2", "b-p0")}
        teams.reconcile()
        time.sleep(0.5)
    assert teams.record("request:a-p2")["state"] == "queued", "a's older request went before b's"
    assert teams.record("request:b-p1")["state"] == "queued"
