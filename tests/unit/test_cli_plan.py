"""`trainctl plan`: the decision in words, the JSON, and refusal of invalid files."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainctl", "plan", *args], capture_output=True, text=True, env=ENV)


def test_plan_says_the_reduction_server_decision_and_the_cost():
    result = plan(str(ROOT / "examples/reduction-server-4x8a100.yaml"))
    assert result.returncode == 0, result.stderr
    assert "reduction server  on (auto): 4-node A2 job; ceil(4 nodes × 100 Gbps / 32 Gbps) = 13" in result.stdout
    assert "  2 reducers 13 × n1-highcpu-16" in result.stdout
    assert "about $1,794.57 at most within the 12h timeout (approximate prices taken " in result.stdout


def test_plan_calls_its_prices_approximate_and_dates_them():
    """Guards issue 12 point 16: the plan no longer presents the catalog's prices as list prices."""
    result = plan(str(ROOT / "examples/tabular-2xa100.yaml"))
    assert result.returncode == 0, result.stderr
    assert "list prices" not in result.stdout
    assert "approximate prices taken 20" in result.stdout


def test_plan_json_is_the_custom_job():
    result = plan(str(ROOT / "examples/tabular-2xa100.yaml"), "--json")
    data = json.loads(result.stdout)
    assert data["reduction_server"]["enabled"] is False
    assert "single-node" in data["reduction_server"]["reason"]
    assert data["custom_job"]["job_spec"]["worker_pool_specs"][0]["machine_spec"]["machine_type"] == "a2-highgpu-2g"
    assert data["cost"]["gpus"] == 2


def test_plan_refuses_an_invalid_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("api_version: trainctl/v1\n")
    result = plan(str(bad))
    assert result.returncode == 2
    assert "request_id: required field is missing" in result.stdout
