"""The emulators of the local stack: fake-gcs-server notifications reach the Pub/Sub emulator, and a
machine without what the Pub/Sub emulator needs gets told what to install."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
from google.cloud import pubsub_v1, storage

from local.fake_gcs import FakeGcs
from local.pubsub_emulator import (
    EMULATOR_JVM_OPTIONS,
    EmulatorUnavailable,
    PubSubEmulator,
    emulator_jvm_options,
    emulator_prerequisites_problem,
    start_pubsub_emulator,
)

pytestmark = pytest.mark.integration


def pull_until(subscription: str, wanted, timeout: float = 20.0) -> list:
    subscriber = pubsub_v1.SubscriberClient()
    received, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = subscriber.pull(request={"subscription": subscription, "max_messages": 50}, timeout=5)
        if response.received_messages:
            subscriber.acknowledge(
                request={"subscription": subscription, "ack_ids": [m.ack_id for m in response.received_messages]}
            )
            received += [m.message for m in response.received_messages]
            if wanted(received):
                break
    return received


def test_an_upload_to_fake_gcs_publishes_object_finalize(pubsub_emulator: PubSubEmulator, fake_gcs: FakeGcs):
    subscription = pubsub_emulator.create_subscription(f"capture-{uuid.uuid4().hex[:8]}", "fake-gcs-notifications")
    bucket = storage.Client().create_bucket(f"uploads-{uuid.uuid4().hex[:8]}")
    bucket.blob("dataset/part-0.csv").upload_from_string("a,b\n1,2\n")

    messages = pull_until(subscription, lambda got: any(m.attributes.get("bucketId") == bucket.name for m in got))

    mine = [m for m in messages if m.attributes.get("bucketId") == bucket.name]
    assert len(mine) == 1
    assert mine[0].attributes["eventType"] == "OBJECT_FINALIZE"
    assert mine[0].attributes["objectId"] == "dataset/part-0.csv"
    assert json.loads(mine[0].data)["name"] == "dataset/part-0.csv"


def test_the_emulators_jvm_runs_with_the_client_compiler_and_one_gc_thread(pubsub_emulator: PubSubEmulator):
    """The options reach the java process the launcher starts (JAVA_OPTS), unless the person set their own."""
    port = pubsub_emulator.host.rsplit(":", 1)[1]
    commands = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
        except OSError:
            continue
    [java] = [c for c in commands if c and c[0].endswith(b"java") and f"--port={port}".encode() in c]
    assert all(option.encode() in java for option in EMULATOR_JVM_OPTIONS.split())
    assert emulator_jvm_options({"JAVA_OPTS": "-Xmx2g"}) == {}


def test_without_gcloud_the_problem_says_how_to_install_it(tmp_path: Path):
    problem = emulator_prerequisites_problem(path=str(tmp_path))

    assert "gcloud" in problem
    assert "install" in problem


def test_without_java_the_problem_says_how_to_install_it(tmp_path: Path):
    (tmp_path / "gcloud").symlink_to(shutil.which("gcloud"))

    problem = emulator_prerequisites_problem(path=str(tmp_path))

    assert "Java" in problem
    assert "apt-get install openjdk-17-jre-headless" in problem


def test_without_the_emulator_component_the_problem_names_the_component(tmp_path: Path):
    sdk_bin = tmp_path / "sdk" / "bin"
    sdk_bin.mkdir(parents=True)
    (sdk_bin / "gcloud").write_text("#!/bin/sh\n")
    (sdk_bin / "gcloud").chmod(0o755)
    (sdk_bin / "java").symlink_to(shutil.which("java"))

    problem = emulator_prerequisites_problem(path=str(sdk_bin))

    assert "gcloud components install pubsub-emulator" in problem


def test_starting_the_emulator_without_java_fails_before_starting_anything(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").symlink_to(shutil.which("gcloud"))

    with pytest.raises(EmulatorUnavailable, match="Java"):
        start_pubsub_emulator("p", tmp_path, env={**os.environ, "PATH": str(bin_dir)})

    assert not (tmp_path / "pubsub-emulator.log").exists()
