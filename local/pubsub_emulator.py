"""Google's Pub/Sub emulator (`gcloud beta emulators pubsub start`) as a managed process on a free port.

Clients reach it through `PUBSUB_EMULATOR_HOST=<host>`; the emulator also serves the REST API on the
same port, which is what the readiness check and the small topic/subscription helpers here use, so this
module needs no Pub/Sub client library.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from local.processes import ManagedProcess, on_free_port, require_ready, start_process

if TYPE_CHECKING:
    from google.cloud import pubsub_v1


class EmulatorUnavailable(RuntimeError):
    """Something the emulator needs is not installed; the message says what to install."""


def emulator_prerequisites_problem(path: str | None = None) -> str | None:
    """What is missing to run the Pub/Sub emulator, with the command that installs it; None when ready."""
    gcloud = shutil.which("gcloud", path=path)
    if gcloud is None:
        return (
            "the Pub/Sub emulator needs the Google Cloud CLI (gcloud), which is not on PATH. Install it: "
            "https://cloud.google.com/sdk/docs/install (Debian/Ubuntu: apt-get install google-cloud-cli "
            "google-cloud-cli-pubsub-emulator)"
        )
    if shutil.which("java", path=path) is None:
        return (
            "the Pub/Sub emulator runs on Java, which is not on PATH. Install a JRE 11 or newer "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
        )
    sdk_root = Path(os.path.realpath(gcloud)).parent.parent
    if not (sdk_root / "platform" / "pubsub-emulator").is_dir():
        return (
            f"the Pub/Sub emulator component is not installed in {sdk_root}. Install it: "
            "gcloud components install pubsub-emulator (or, when gcloud came from apt: "
            "apt-get install google-cloud-cli-pubsub-emulator)"
        )
    return None


@dataclass
class PubSubEmulator:
    """A running emulator. `host` is what PUBSUB_EMULATOR_HOST must be set to."""

    project: str
    host: str
    process: ManagedProcess

    @property
    def env(self) -> dict[str, str]:
        return {"PUBSUB_EMULATOR_HOST": self.host, "PUBSUB_PROJECT_ID": self.project}

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    def create_topic(self, topic: str) -> str:
        """Create the topic unless it exists; returns its path."""
        path = self.topic_path(topic)
        self._put(path, {})
        return path

    def create_subscription(
        self,
        subscription: str,
        topic: str,
        push_endpoint: str | None = None,
        ack_deadline_seconds: int | None = None,
        dead_letter_topic: str | None = None,
        max_delivery_attempts: int = 5,
        retry_backoff_seconds: tuple[int, int] | None = None,
        message_filter: str | None = None,
    ) -> str:
        """Create a pull subscription (or push, with `push_endpoint`) unless it exists; returns its path.

        With `dead_letter_topic`, a message that failed `max_delivery_attempts` times goes there (the emulator
        does dead-letter push subscriptions, reference/functions.md §4.3); `retry_backoff_seconds` is the
        (minimum, maximum) pause between redeliveries; `message_filter` is a Pub/Sub filter on attributes.
        """
        path = f"projects/{self.project}/subscriptions/{subscription}"
        body: dict = {"topic": self.topic_path(topic)}
        if push_endpoint:
            body["pushConfig"] = {"pushEndpoint": push_endpoint}
        if ack_deadline_seconds:
            body["ackDeadlineSeconds"] = ack_deadline_seconds
        if dead_letter_topic:
            body["deadLetterPolicy"] = {
                "deadLetterTopic": self.topic_path(dead_letter_topic),
                "maxDeliveryAttempts": max_delivery_attempts,
            }
        if retry_backoff_seconds:
            low, high = retry_backoff_seconds
            body["retryPolicy"] = {"minimumBackoff": f"{low}s", "maximumBackoff": f"{high}s"}
        if message_filter:
            body["filter"] = message_filter
        self._put(path, body)
        return path

    def delete_subscription(self, subscription: str) -> None:
        """Delete a subscription. A push subscription must go before its endpoint stops: the emulator retries an
        unreachable endpoint without pause for as long as it holds an unacknowledged message (tens of pushes and
        logged stack traces a second), which costs every later user of the emulator."""
        self._call("DELETE", f"projects/{self.project}/subscriptions/{subscription}", tolerated=404)

    def stop(self, grace: float = 5.0) -> None:
        self.process.stop(grace)

    def _put(self, path: str, body: dict) -> None:
        self._call("PUT", path, body, tolerated=409)  # 409: already exists, which is what we wanted

    def _call(self, method: str, path: str, body: dict | None = None, *, tolerated: int) -> None:
        """One REST call; the `tolerated` error status means the emulator is already as the call would leave it."""
        request = urllib.request.Request(
            f"http://{self.host}/v1/{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except urllib.error.HTTPError as error:
            if error.code != tolerated:
                raise RuntimeError(f"{method} {path} on the Pub/Sub emulator: {error.read().decode()}") from error


# The emulator is a short-lived JVM serving one machine's tests or stack: the client compiler alone (no C2) and one
# GC thread spend a third less CPU on it over a test file (bench/RESULTS.md, "The Pub/Sub emulator's JVM"), which
# on a small machine is CPU the jobs and functions beside it get. The emulator's launcher
# (platform/pubsub-emulator/bin/cloud-pubsub-emulator) passes JAVA_OPTS to java.
EMULATOR_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def emulator_jvm_options(env: Mapping[str, str]) -> dict[str, str]:
    """JAVA_OPTS for the emulator: the person's own when they set any, else EMULATOR_JVM_OPTIONS."""
    return {} if env.get("JAVA_OPTS") else {"JAVA_OPTS": EMULATOR_JVM_OPTIONS}


def start_pubsub_emulator(
    project: str,
    work_dir: Path,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> PubSubEmulator:
    """Start the emulator on 127.0.0.1 (a free port unless `port` is given) and wait until it answers.

    Its data directory and log live under `work_dir`. Raises EmulatorUnavailable when gcloud, Java or
    the emulator component is missing, StartupError when it does not come up.
    """
    base_env = dict(os.environ if env is None else env)
    problem = emulator_prerequisites_problem(base_env.get("PATH"))
    if problem:
        raise EmulatorUnavailable(problem)
    data_dir = work_dir / "pubsub-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    # No prompts, no update check: the launcher must never wait for a person or the network.
    base_env.update(CLOUDSDK_CORE_DISABLE_PROMPTS="1", CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="1")
    base_env.update(emulator_jvm_options(base_env))

    def start(port: int) -> PubSubEmulator:
        host = f"127.0.0.1:{port}"
        command = ["gcloud", "beta", "emulators", "pubsub", "start"]
        command += [f"--project={project}", f"--host-port={host}", f"--data-dir={data_dir}"]
        process = start_process("pubsub-emulator", command, work_dir / "pubsub-emulator.log", env=base_env)
        emulator = PubSubEmulator(project, host, process)
        require_ready(process, lambda: _answers(host, project), timeout, f"the Pub/Sub emulator on {host}", port=port)
        return emulator

    return on_free_port(start, port)


def _answers(host: str, project: str) -> bool:
    with urllib.request.urlopen(f"http://{host}/v1/projects/{project}/topics", timeout=2) as response:
        return response.status == 200


def pull_now(
    subscriber: pubsub_v1.SubscriberClient, subscription: str, max_messages: int
) -> pubsub_v1.types.PullResponse:
    """What the emulator holds for `subscription` now. A pull that finds nothing is held about 4 s; with
    `return_immediately` the emulator answers at once with every message it has stored. Deprecated for the
    real service, which may then return fewer than it has: for the emulator only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return subscriber.pull(
            request={"subscription": subscription, "max_messages": max_messages, "return_immediately": True},
            timeout=5,
        )
