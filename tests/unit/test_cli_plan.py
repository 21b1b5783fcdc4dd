"""`trainctl plan`: the decision in words, the JSON, and refusal of invalid files."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.docs import doc

ROOT = Path(__file__).parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainctl", "plan", *args], capture_output=True, text=True, env=ENV)


def test_plan_says_the_reduction_server_decision_and_the_cost():
    result = plan(str(ROOT / "examples/reduction-server-4x8a100.yaml"))
    assert result.returncode == 0, result.stderr
    # The figure itself is test_catalog's (reducers_needed); here, that the plan says how it came and uses it.
    found = re.search(
        r"reduction server  on \(auto\): 4-node A2 job; ceil\(4 nodes × 100 Gbps / 32 Gbps\) = (\d+)", result.stdout
    )
    assert found, result.stdout
    assert f"  2 reducers {found[1]} × n1-highcpu-16" in result.stdout
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


def test_plan_shows_the_ladder_with_each_rungs_cost():
    """Guards issue 14 item 1: the worked example of docs/capacity.md, as `trainctl plan` prints it."""
    result = plan(str(ROOT / "examples/ladder-spot-l4-to-a100.yaml"))
    assert result.returncode == 0, result.stderr
    ladder = result.stdout.split("capacity ladder", 1)[1].splitlines()[1:]
    assert ladder == [
        "  0  1 × g2-standard-24 with 2 × NVIDIA_L4, spot, us-central1              about $0.93/h, at most $5.58",
        "  1  1 × g2-standard-24 with 2 × NVIDIA_L4, standard, us-central1          about $2.32/h, at most $13.92",
        "  2  1 × a2-highgpu-2g with 2 × NVIDIA_TESLA_A100, standard, europe-west4  about $8.82/h, at most $52.92",
    ]
    page = doc("capacity.md")
    assert all(line in page for line in ladder), "docs/capacity.md's example is what plan prints"
