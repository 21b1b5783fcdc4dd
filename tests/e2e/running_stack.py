"""Driving a local stack the way a user does: the `trainctl` command (from this .venv, on PATH) in a clean
environment whose only link to the stack is `TRAINCTL_LOCAL_DIR`, shells that `eval "$(trainctl local env)"`
before running stock `gcloud`, and `trainctl watch --json` to see the events. The JobService (jobs and their
labels) and the functions' logs are read directly, to check what the commands caused."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from functions.settings import env_names
from local.fake_gcs import create_bucket
from local.jobservice.client import job_service_client
from local.stack_state import LOCAL_DIR_VAR, STACK_MARKER_VAR, StackState, read_state
from tests.conftest import REPO_ROOT, TEST_IMAGE_MAP
from tests.integration.deployment import (
    DATA_SHARD,
    FAKE_NODE_IMAGE,
    PINNED_FAKE_NODE_IMAGE,
    SHARED_DATA_BUCKET,
    accuracy,
)

VENV_BIN = Path(sys.executable).parent
# What a marker under gs://<data bucket>/fake/ starts: the test image, quick, with metrics.
FAKE_NODE_TEMPLATE = {
    "dataset": {"target": "y"},
    "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.5", "--metrics", '{"rows": 3}']},
    "resources": {"machine_type": "g2-standard-24"},
}
# What markers under gs://<data bucket>/burst/ start: one run per quiet window of 20 s (issue 42, coalescing).
BURST_TEMPLATE = {**FAKE_NODE_TEMPLATE, "policy": {"quiet_window": "20s", "coalesce": "newest"}}
# What an alert for ALERTED_MODEL starts, on the newest marker under gs://<data bucket>/alerted/ (issue 42): the test
# image (pinned, as a model's own code must be), registering a version of the model.
ALERTED_MODEL = "e2e-alerted"
ALERTED_TEMPLATE = FAKE_NODE_TEMPLATE | {
    "trainer": {"image": PINNED_FAKE_NODE_IMAGE, "args": ["--sleep", "0.5", "--metrics", json.dumps(accuracy(0.9))]},
    "model": {"name": ALERTED_MODEL, "metric": "val_accuracy", "goal": "maximize"},
}
# Variables of this test session that would point a command elsewhere than the stack under test.
_FOREIGN = ("PUBSUB_EMULATOR_HOST", "PUBSUB_PROJECT_ID", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")


def user_env(local_dir: Path) -> dict[str, str]:
    """This session's environment, without anything naming another deployment, with `trainctl` on PATH."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in _FOREIGN and name not in env_names() and not name.startswith("CLOUDSDK_")
    }
    env[LOCAL_DIR_VAR] = str(local_dir)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CLOUDSDK_CORE_DISABLE_PROMPTS"] = "1"
    return env


# The local Secret Manager's one secret in the session's stack (`local up --secret`).
E2E_SECRET = "e2e-token"
E2E_SECRET_VALUE = "e2e-secret-value-61d0c4f2"


def up_args(data_bucket: str) -> list[str]:
    """`trainctl local up` options for tests: the test image, and trigger rules that start it (one coalescing)."""
    return [
        "--reconcile-every", "2",
        # Nothing kept: the session's stack lives in a test's temporary folder, and its buckets stay versioned as in
        # the cloud (tests/e2e/test_local_state_lasts.py drives the lasting default).
        "--ephemeral",
        "--image-map", TEST_IMAGE_MAP,
        "--allow-image-prefix", FAKE_NODE_IMAGE.rsplit("/", 1)[0] + "/",
        "--allow-python-packages",  # issue 31: tests/e2e/test_own_code_on_the_local_stack.py
        "--secret", f"{E2E_SECRET}={E2E_SECRET_VALUE}",  # issue 40: tests/e2e/test_secrets_on_the_local_stack.py
        # Google's executors are all past their end of availability (issue 40, point 8): the local stack's own list
        "--executors", str(REPO_ROOT / "examples" / "ddp-package" / "local-executors.yaml"),
        "--trigger-rules", json.dumps({
            f"gs://{data_bucket}/fake/": FAKE_NODE_TEMPLATE,
            f"gs://{data_bucket}/burst/": BURST_TEMPLATE,
            f"gs://{data_bucket}/alerted/": ALERTED_TEMPLATE,
        }),
    ]  # fmt: skip


def run(command: list[str], env: dict[str, str], timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


class RunningStack:
    def __init__(self, local_dir: Path):
        self.local_dir = local_dir
        self.env = user_env(local_dir)

    @property
    def state(self) -> StackState:
        state = read_state(self.local_dir)
        assert state is not None, f"no stack recorded in {self.local_dir}"
        return state

    def land_shared_dataset(self) -> None:
        """The dataset fake-node requests name (tests/integration/deployment.SHARED_DATASET), in this stack's
        Cloud Storage: admission refuses a dataset with no data in it."""
        url = self.state.storage_url
        create_bucket(url, self.state.project, SHARED_DATA_BUCKET)
        name = urllib.parse.quote("whatever/part-0.csv", safe="")
        upload = urllib.request.Request(
            f"{url.rstrip('/')}/upload/storage/v1/b/{SHARED_DATA_BUCKET}/o?uploadType=media&name={name}",
            data=DATA_SHARD.encode(),
            method="POST",
        )
        urllib.request.urlopen(upload, timeout=30).close()

    def trainctl(self, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
        return run(["trainctl", *args], self.env, timeout)

    def shell(self, script: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
        """`script` in bash, after `eval "$(trainctl local env)"` — a user's second terminal."""
        return run(["bash", "-c", f'set -euo pipefail\neval "$(trainctl local env)"\n{script}'], self.env, timeout)

    def jobs(self) -> list[Any]:
        state = self.state
        client = job_service_client(state.jobservice_address)
        return list(client.list_custom_jobs(parent=f"projects/{state.project}/locations/{state.region}"))

    def jobs_of(self, request_id: str) -> list[Any]:
        return [job for job in self.jobs() if job.labels.get("trainctl_request") == request_id]

    def log_entries(self, function: str) -> list[dict[str, Any]]:
        """The structured log lines a function has written so far."""
        entries = []
        for line in Path(self.state.logs[function]).read_text(errors="replace").splitlines():
            if line.startswith("{"):
                entries.append(json.loads(line))
        return entries

    @contextmanager
    def watch(self) -> Iterator[Watch]:
        watch = Watch(self.env)
        try:
            yield watch
        finally:
            watch.stop()


def _sigint_as_in_a_terminal() -> None:
    """In the child before it runs: SIGINT at its default, as a command in the foreground of a terminal has it.
    A test run started in the background (`cmd &`, nohup, a CI runner's job) has SIGINT ignored, an ignored signal
    stays ignored across exec, and a `trainctl watch` stopped with Ctrl-C would sit out stop()'s 30 s wait."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watch:
    """`trainctl watch --json` in the background: every event it prints, as dicts."""

    def __init__(self, env: dict[str, str], timeout: float = 60.0):
        self._process = subprocess.Popen(
            ["trainctl", "watch", "--json"],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=_sigint_as_in_a_terminal,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.events: list[dict[str, Any]] = []
        self.output: list[str] = []
        # Events published before its subscription exists never reach it: wait until it says it watches.
        self._next(lambda line: line.startswith("watching "), timeout)

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next(self, wanted: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"trainctl watch printed nothing wanted; it printed:\n{self.transcript}") from None
            if line is None:
                raise AssertionError(f"trainctl watch ended:\n{self.transcript}")
            self.output.append(line)
            if line.startswith("{"):
                self.events.append(json.loads(line))
            if wanted(line):
                return line

    @property
    def transcript(self) -> str:
        return "\n".join(self.output)

    def wait_for(self, wanted: Callable[[dict[str, Any]], bool], timeout: float = 120.0) -> dict[str, Any]:
        """The first event (already seen or still to come) for which `wanted` is true."""
        for event in self.events:
            if wanted(event):
                return event
        line = self._next(lambda line: line.startswith("{") and wanted(json.loads(line)), timeout)
        return json.loads(line)

    def states(self, request_id: str) -> list[str]:
        return [event["state"] for event in self.events if event["request_id"] == request_id]

    def stop(self) -> None:
        """Ctrl-C, as a person stops it; it deletes its subscription on the way out. A watch that Ctrl-C does not
        stop is killed and fails the test: a person would be left waiting too."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
                raise AssertionError(f"Ctrl-C did not stop trainctl watch within 30 s:\n{self.transcript}") from None


def marker_processes(stack_id: str) -> list[Any]:
    from local.processes import leftover_processes

    return leftover_processes(stack_id, var=STACK_MARKER_VAR)
