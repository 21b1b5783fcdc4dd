"""`trainctl report` on the local stack: a mix of outcomes run for real, and every figure of the report checked
against what this test works out from the events it saw on the events topic."""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import timedelta

import matplotlib.image
import pytest
from google.cloud.aiplatform_v1.types import JobState

from local.jobservice.client import wait_for_state
from schemas.events import TERMINAL_STATES, Accepted, JobEvent
from tests.integration.deployment import fake_node_request

METRICS = '{"val_accuracy": 0.9}'
FINAL_STATES = TERMINAL_STATES | {"rejected"}


def _nearest_rank(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[math.ceil(p / 100 * len(ordered)) - 1]


def _expected(events: list[JobEvent], requests: list[str]) -> dict[str, dict]:
    """The report's figures for each team (and "all"), worked out from the events alone."""
    rows = []
    for request_id in requests:
        mine = [e for e in events if e.request_id == request_id]
        final = [e for e in mine if e.state in FINAL_STATES][-1]
        accepted = next((e for e in mine if isinstance(e, Accepted)), None)
        stamps = final.timestamps
        started, ended = (stamps.started, stamps.ended) if stamps else (None, None)
        run = (ended - started).total_seconds() if started and ended else None
        rows.append(
            {
                "team": (accepted.labels or {}).get("team", "(none)") if accepted else "(none)",
                "state": final.state,
                "reason": getattr(final, "reason", None),
                "start": (started - accepted.time).total_seconds() if started and accepted else None,
                "run": run,
                "gpu_seconds": accepted.cost.gpus * run if accepted and run else 0,
                "usd_seconds": accepted.cost.hourly_usd * run if accepted and run else 0,
            }
        )

    def figures(group: list[dict]) -> dict:
        states = Counter(r["state"] for r in group)
        got_a_job = states["succeeded"] + states["failed"] + states["cancelled"]
        starts = [r["start"] for r in group if r["start"] is not None]
        runs = [r["run"] for r in group if r["run"] is not None]
        return {
            "requests": len(group),
            "by_state": {s: states[s] for s in ("succeeded", "failed", "cancelled", "rejected", "skipped")},
            "failures_by_reason": dict(sorted(Counter(r["reason"] for r in group if r["state"] == "failed").items())),
            "success_rate": round(states["succeeded"] / got_a_job, 4) if got_a_job else None,
            "time_to_start_seconds": {"p50": _nearest_rank(starts, 50), "p95": _nearest_rank(starts, 95)},
            "run_time_seconds": {"p50": _nearest_rank(runs, 50), "p95": _nearest_rank(runs, 95)},
            "gpu_hours": sum(r["gpu_seconds"] for r in group) / 3600,
            "estimated_cost_usd": sum(r["usd_seconds"] for r in group) / 3600,
        }

    teams = sorted({r["team"] for r in rows})
    return {"all": figures(rows)} | {team: figures([r for r in rows if r["team"] == team]) for team in teams}


def _assert_same(reported: dict, expected: dict) -> None:
    for key in ("requests", "by_state", "failures_by_reason", "success_rate"):
        assert reported[key] == expected[key], key
    for key in ("time_to_start_seconds", "run_time_seconds"):
        for p in ("p50", "p95"):
            assert reported[key][p] == pytest.approx(expected[key][p]), f"{key} {p}"
    assert reported["gpu_hours"] == pytest.approx(expected["gpu_hours"], abs=0.0001)  # reported to 4 places
    # Reported in cents, summed from each outcome's cost kept to 4 places (functions/ledger/record.py): the sum may
    # sit half a cent away, plus half of the fourth place for each request.
    rounding = 0.005 + 0.00005 * expected["requests"]
    assert reported["estimated_cost_usd"] == pytest.approx(expected["estimated_cost_usd"], abs=rounding)


def _report(deployment, monkeypatch, *args: str) -> str:
    return deployment.cli(monkeypatch, "report", *args)


def test_the_report_of_a_mix_of_outcomes_matches_the_events(
    deployment, job_client, jobservice_control, monkeypatch, tmp_path
):
    """Guards issue 15 item 4: requests by final state, failures by reason (two reasons), success rate,
    p50/p95 time to start and run time, GPU-hours and estimated cost, in total and by team, each equal to
    what the events say; rejected requests (which have no ledger record) are counted too; --png draws."""
    events = deployment.events()
    team_a, team_b = {"labels": {"team": "a"}}, {"labels": {"team": "b"}}
    requests = {
        "ok-a": fake_node_request("ok-a", "--sleep", "1", "--metrics", METRICS, **team_a),
        "ok-b": fake_node_request("ok-b", "--sleep", "2", "--metrics", METRICS, **team_b),
        "user-a": fake_node_request("user-a", "--exit-code", "3", **team_a),
        "quota-b": fake_node_request("quota-b", **team_b),
        "cancel-a": fake_node_request("cancel-a", "--sleep", "120", **team_a),
        "bad-b": fake_node_request("bad-b", **team_b, resources={"machine_type": "no-such-machine"}),
    }
    for request_id, document in requests.items():
        if request_id == "quota-b":
            jobservice_control.fail_next_for_quota()
        assert deployment.request(document) == 200
    job = deployment.record("request:cancel-a")["job_name"]
    wait_for_state(job_client, job, [JobState.JOB_STATE_RUNNING])
    events.wait_for("cancel-a", "running", act=deployment.reconcile)
    job_client.cancel_custom_job(name=job)
    for request_id, state in {
        "ok-a": "succeeded", "ok-b": "succeeded", "user-a": "failed", "quota-b": "failed",
        "cancel-a": "cancelled", "bad-b": "rejected",
    }.items():  # fmt: skip
        events.wait_for(request_id, state, timeout=120, act=deployment.reconcile)
    seen = [event for event, _ in events.drain()]
    expected = _expected(seen, list(requests))
    assert expected["all"]["failures_by_reason"] == {"quota": 1, "user": 1}  # the mix this test meant to make

    chart = tmp_path / "report.png"
    report = json.loads(
        _report(deployment, monkeypatch, "--since", "1h", "--by", "team", "--json", "--png", str(chart))
    )

    _assert_same(report["total"], expected["all"])
    # A request rejected at intake has no ledger record and so no labels: it counts under "(none)".
    assert set(report["groups"]) == {"a", "b", "(none)"} == set(expected) - {"all"}
    for team in report["groups"]:
        _assert_same(report["groups"][team], expected[team])
    (day,) = report["per_day"].values()
    assert day["by_state"] == expected["all"]["by_state"]
    assert day["gpu_hours"] == pytest.approx(expected["all"]["gpu_hours"], abs=0.0001)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(chart).shape
    assert height > 300 and width > 500

    text = _report(deployment, monkeypatch, "--since", "1h")
    assert "6 requests" in text and "failures         quota 1, user 1" in text


def test_a_window_that_ends_before_the_requests_finished_reports_nothing(deployment, monkeypatch):
    """Guards issue 15 item 4: --since bounds the listing; outside it nothing is counted."""
    events = deployment.events()
    assert deployment.request(fake_node_request("bad-window", resources={"machine_type": "no-such-machine"})) == 200
    events.wait_for("bad-window", "rejected")
    from trainctl.report import report_from_ledger

    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    assert report_from_ledger(timedelta(hours=1))["total"]["by_state"]["rejected"] >= 1
    assert report_from_ledger(timedelta(seconds=0))["total"]["requests"] == 0
