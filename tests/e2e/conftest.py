"""One local stack per test module, started and stopped with the user's commands: `trainctl local up
--detach` with the test image mapped and allowed, then `trainctl local down`, after which no process of
the stack may be left (the session-wide leftover check would catch it too, but later and less precisely)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local.names import LOCAL_PROJECT, Names
from tests.e2e.running_stack import RunningStack, marker_processes, up_args


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    running = RunningStack(tmp_path_factory.mktemp("local-stack"))
    started = running.trainctl("local", "up", "--detach", *up_args(Names(LOCAL_PROJECT).data_bucket))
    assert started.returncode == 0, started.stdout + started.stderr
    stack_id = running.state.stack_id
    try:
        running.land_shared_dataset()
        yield running
    finally:
        stopped = running.trainctl("local", "down")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert marker_processes(stack_id) == []
