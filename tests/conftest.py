"""Session-wide fixtures: the real local stack, started once per test session (once per worker under
pytest-xdist) on free ports and always stopped, plus a final check that no process the session started
outlived it.

- `pubsub_emulator` → local.pubsub_emulator.PubSubEmulator (`.host`, `.project`, `.create_topic()`, …);
  PUBSUB_EMULATOR_HOST is set for the session, so google-cloud-pubsub clients in tests reach it.
- `fake_gcs` → local.fake_gcs.FakeGcs (`.url`, `.notifications_topic`); STORAGE_EMULATOR_HOST is set.
  Every upload publishes an OBJECT_FINALIZE notification to `.notifications_topic`.
- `jobservice` → local.jobservice.standalone.JobServiceProcess (`.address`, `.control`, `.state_dir`),
  the local Vertex JobService as its own process, announcing state changes on the job-state topic.
- `job_client_factory` → `factory(address=None)` making a real JobServiceClient (default: `jobservice`);
  `job_client` is one such client.
- `jobservice_control` → the control API client (faults), with faults cleared after each test.
- `private_jobservice` → `start(*extra_args)` starting a JobService process of the test's own (to crash,
  restart or stop it), stopped after the test.

The helpers live in local/; these fixtures only start, hand over and stop.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

from local.fake_gcs import FakeGcs, start_fake_gcs
from local.jobservice.client import JobServiceControl, job_service_client
from local.jobservice.standalone import JobServiceProcess, start_jobservice_process
from local.names import LOCAL_PROJECT, Names
from local.processes import SESSION_MARKER_VAR, leftover_processes
from local.pubsub_emulator import PubSubEmulator, start_pubsub_emulator

pytest_plugins = ["tests.file_order"]  # longest test files first (see there)

# Local job-state topic the JobService announces on, named as the whole system names it.
JOB_STATE_TOPIC = Names(LOCAL_PROJECT).job_state_topic
# Images the session's JobService maps to test programs (image map: prefix → entry point).
TEST_IMAGE_MAP = '{"localhost/tests/fake-node": ["python", "tests/local/programs/fake_node.py"]}'
REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # Inherited by every process the session starts, however deep; pytest_sessionfinish looks for it.
    os.environ.setdefault(SESSION_MARKER_VAR, uuid.uuid4().hex)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After every fixture is torn down: fail the run if any process the session started still runs. With
    pytest-xdist only the controller looks, once every worker is done: the workers inherit its marker, and
    one worker's live processes are not another's leftovers."""
    if hasattr(session.config, "workerinput"):
        return
    leftovers = leftover_processes(os.environ[SESSION_MARKER_VAR])
    if not leftovers:
        return
    for leftover in leftovers:
        os.kill(leftover.pid, 9)  # leave the machine clean, but still fail
    lines = "\n".join(f"  pid {leftover.pid}: {leftover.command[:200]}" for leftover in leftovers)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nprocesses left running after the test session (now killed):\n{lines}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def pubsub_emulator(stack_dir: Path) -> Iterator[PubSubEmulator]:
    emulator = start_pubsub_emulator(LOCAL_PROJECT, stack_dir / "pubsub")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in emulator.env.items():
            patch.setenv(name, value)
        try:
            yield emulator
        finally:
            emulator.stop()


@pytest.fixture(scope="session")
def fake_gcs(pubsub_emulator: PubSubEmulator, stack_dir: Path) -> Iterator[FakeGcs]:
    server = start_fake_gcs(stack_dir / "fake-gcs", pubsub=pubsub_emulator)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STORAGE_EMULATOR_HOST", server.url)
        try:
            yield server
        finally:
            server.stop()


def jobservice_args(*extra: str) -> list[str]:
    return ["--cancel-grace", "3", "--image-map", TEST_IMAGE_MAP, "--workdir", str(REPO_ROOT), *extra]


@pytest.fixture(scope="session")
def jobservice(pubsub_emulator: PubSubEmulator, fake_gcs: FakeGcs, stack_dir: Path) -> Iterator[JobServiceProcess]:
    topic = pubsub_emulator.create_topic(JOB_STATE_TOPIC)
    env = {**os.environ, **pubsub_emulator.env, **fake_gcs.env}
    service = start_jobservice_process(
        stack_dir / "jobservice", env=env, extra_args=jobservice_args("--announce-topic", topic)
    )
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def private_jobservice(tmp_path: Path) -> Iterator[Callable[..., JobServiceProcess]]:
    """A factory of JobService processes of the test's own (to crash, restart, stop), configured like
    the session one but without emulators; each one is stopped after the test."""
    started: list[JobServiceProcess] = []

    def start(*extra_args: str) -> JobServiceProcess:
        service = start_jobservice_process(
            tmp_path / f"jobservice-{len(started)}", extra_args=jobservice_args(*extra_args)
        )
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


@pytest.fixture(scope="session")
def job_client_factory(jobservice: JobServiceProcess) -> Callable[..., JobServiceClient]:
    def factory(address: str | None = None) -> JobServiceClient:
        return job_service_client(address or jobservice.address)

    return factory


@pytest.fixture(scope="session")
def job_client(job_client_factory: Callable[..., JobServiceClient]) -> JobServiceClient:
    return job_client_factory()


@pytest.fixture
def jobservice_control(jobservice: JobServiceProcess) -> Iterator[JobServiceControl]:
    yield jobservice.control
    jobservice.control.clear_faults()
