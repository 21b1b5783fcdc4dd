"""`trainctl local up` in the foreground, as a person runs it in a terminal: it prints every endpoint once
the stack is ready, and Ctrl-C stops everything it started — job nodes included — and removes the state.
Only one stack at a time uses a folder."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from local.names import LOCAL_PROJECT, Names
from local.processes import wait_until
from local.stack_state import LOCAL_DIR_VAR, read_state, take_stack_lock
from tests.conftest import REPO_ROOT
from tests.e2e.running_stack import RunningStack, marker_processes, up_args
from tests.integration.deployment import fake_node_request

pytestmark = pytest.mark.integration


def test_ctrl_c_stops_the_stack_and_the_jobs_it_runs(tmp_path: Path):
    stack = RunningStack(tmp_path / "local")
    up = subprocess.Popen(
        ["trainctl", "local", "up", *up_args(Names(LOCAL_PROJECT).data_bucket)],
        env=stack.env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert wait_until(lambda: read_state(stack.local_dir) is not None or up.poll() is not None, timeout=120)
        state = stack.state
        stack.land_shared_dataset()
        request = tmp_path / "long.yaml"
        request.write_text(yaml.safe_dump(fake_node_request("runs-until-stopped", "--sleep", "600")))
        assert stack.trainctl("submit", str(request)).returncode == 0
        assert wait_until(lambda: any("fake_node.py" in p.command for p in marker_processes(state.stack_id)), 60)

        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=120)
    finally:
        if up.poll() is None:  # the test failed before Ctrl-C: stop it the way a user would
            up.send_signal(signal.SIGINT)
            up.communicate(timeout=120)

    assert up.returncode == 0, output
    assert f"  on_job_request     {state.function_urls['on_job_request']}" in output
    assert f"  Vertex JobService  {state.jobservice_address}" in output
    assert output.rstrip().endswith("stopping the local stack…\nlocal stack stopped")
    assert marker_processes(state.stack_id) == []
    assert read_state(stack.local_dir) is None


def test_local_up_refuses_while_another_stack_is_starting_in_the_same_folder(tmp_path: Path, monkeypatch):
    stack = RunningStack(tmp_path / "local")
    monkeypatch.setenv(LOCAL_DIR_VAR, str(stack.local_dir))
    starting = take_stack_lock()  # what a `local up` still starting (no state file yet) holds
    assert starting is not None

    refused = stack.trainctl("local", "up", timeout=60)

    assert refused.returncode == 1
    assert refused.stderr == f"another local stack is starting in {stack.local_dir}\n"
    assert read_state(stack.local_dir) is None
