"""Secrets by reference on the local stack started as a user starts it (issue 40, point 7): `trainctl local up
--secret NAME=VALUE`, then `trainctl submit --wait` of a request whose trainer.secret_env names it: the job's program
finds the value in its environment; `trainctl status` shows the reference and the secret-looking env value redacted;
no log of the stack holds either value."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from local.names import LOCAL_PROJECT
from tests.e2e.running_stack import E2E_SECRET, E2E_SECRET_VALUE, RunningStack
from tests.integration.deployment import FAKE_NODE_IMAGE, fake_node_request

pytestmark = pytest.mark.integration

PLAIN_VALUE = "given-in-env-0a9b8c7d"


def test_a_job_gets_its_secret_and_status_and_logs_show_no_value(stack: RunningStack, tmp_path: Path):
    request_id = f"secret-env-{uuid.uuid4().hex[:8]}"
    reference = f"projects/{LOCAL_PROJECT}/secrets/{E2E_SECRET}/versions/1"
    record_dir = tmp_path / "env"
    trainer = {
        "image": f"{FAKE_NODE_IMAGE}:1",
        "command": ["python", "tests/local/programs/fake_node.py"],
        "args": ["--record-env", str(record_dir)],
        "env": {"SERVICE_PASSWORD": PLAIN_VALUE},
        "secret_env": {"E2E_TOKEN": reference},
    }
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(fake_node_request(request_id, trainer=trainer)))

    submitted = stack.trainctl("submit", str(path), "--wait", "--timeout", "150")

    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    seen = json.loads((record_dir / "workerpool0-0.json").read_text())
    assert (seen["E2E_TOKEN"], seen["SERVICE_PASSWORD"]) == (E2E_SECRET_VALUE, PLAIN_VALUE)
    status = stack.trainctl("status", request_id)
    assert "SERVICE_PASSWORD=<redacted>" in status.stdout and f"E2E_TOKEN from {reference}" in status.stdout
    listed = stack.trainctl("list", "--all", "--json").stdout
    node_logs = stack.trainctl("local", "logs", request_id).stdout
    stack_logs = "\n".join(Path(log).read_text(errors="replace") for log in stack.state.logs.values())
    for shown in (submitted.stdout, status.stdout, listed, node_logs, stack_logs):
        assert E2E_SECRET_VALUE not in shown and PLAIN_VALUE not in shown
    assert f"secret_env: set E2E_TOKEN from {reference}" in node_logs
