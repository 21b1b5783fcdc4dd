"""Argument lists are never passed through a shell: shell syntax in a request's command and args reaches the
program as literal text, from the request through the plan and the JobService to the process."""

from __future__ import annotations

import json

from local.jobservice.client import wait_for_state
from tests.integration.deployment import fake_node_request

RECORD_ARGV = "import json, sys, pathlib; pathlib.Path(sys.argv[1]).write_text(json.dumps(sys.argv[2:]))"


def test_shell_syntax_in_arguments_stays_literal(deployment, job_client, tmp_path):
    recorded, planted = tmp_path / "argv.json", tmp_path / "pwned"
    hostile = [f"$(touch {planted})", f"; touch {planted}", f"`touch {planted}`", "| cat /etc/passwd", "${HOME}"]
    request = fake_node_request("no-shell-1")
    request["trainer"] |= {"command": ["python3", "-c", RECORD_ARGV, str(recorded)], "args": hostile}
    assert deployment.request(request) == 200
    job = wait_for_state(job_client, deployment.record("request:no-shell-1")["job_name"])
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error.message
    assert json.loads(recorded.read_text()) == hostile
    assert not planted.exists()
