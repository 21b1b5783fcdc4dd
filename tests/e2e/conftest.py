"""One local stack per test session (per worker under pytest-xdist), shared by the modules that drive one,
started and stopped with the user's commands: `trainctl local up --detach` with the test image mapped and
allowed, then `trainctl local down`. Each module's requests have ids of their own and every test waits for
what it starts to end, so a module finds the stack as the previous one left it: idle.

Stopping it is checked as a user would see it: `local down` says so, no process of the stack is left (the
session-wide leftover check would catch that too, but later and less precisely), its state file is gone and
`local env` has nothing to print. A failure there is reported as an error of the session's last test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local.names import LOCAL_PROJECT, Names
from tests.e2e.running_stack import RunningStack, marker_processes, up_args


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    running = RunningStack(tmp_path_factory.mktemp("local-stack"))
    started = running.trainctl("local", "up", "--detach", *up_args(Names(LOCAL_PROJECT).data_bucket))
    assert started.returncode == 0, started.stdout + started.stderr
    stack_id = running.state.stack_id
    try:
        running.land_shared_dataset()
        yield running
    finally:
        assert len(marker_processes(stack_id)) >= 7  # supervisor, emulator, storage, JobService, four functions
        stopped = running.trainctl("local", "down")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert stopped.stdout == "local stack stopped\n"
        assert marker_processes(stack_id) == []
        assert not (running.local_dir / "state.json").exists()
        assert running.trainctl("local", "env").returncode == 1  # nothing to print any more
