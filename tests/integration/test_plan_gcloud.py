"""`trainctl plan --gcloud` writes a config that the stock gcloud CLI accepts and submits unchanged.

gcloud is pointed at a small HTTP server that records the CreateCustomJob call it makes; the recorded
job spec must equal our plan, field for field.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from google.cloud.aiplatform_v1 import CustomJob

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")


class _Recorder(BaseHTTPRequestHandler):
    calls: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _Recorder.calls.append({"path": self.path, "body": body})
        reply = json.dumps(body | {"name": "projects/p/locations/us-central1/customJobs/1"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorder():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = HTTPServer(("127.0.0.1", port), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.calls = []
    yield f"http://127.0.0.1:{port}/", _Recorder.calls
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("example", ["reduction-server-4x8a100.yaml", "custom-image-2node-t4.yaml", "spot-2xl4.json"])
def test_gcloud_submits_exactly_the_planned_job(tmp_path, recorder, example):
    url, calls = recorder
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}
    trainctl = [sys.executable, "-m", "trainctl", "plan", str(ROOT / "examples" / example)]
    planned = json.loads(
        subprocess.run([*trainctl, "--json"], capture_output=True, text=True, check=True, env=env).stdout
    )
    printed = subprocess.run(
        [*trainctl, "--gcloud", str(tmp_path)], capture_output=True, text=True, check=True, env=env
    )
    command = shlex.split(printed.stdout.strip().splitlines()[-1])
    gcloud_env = env | {
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM": url,
        "CLOUDSDK_AUTH_ACCESS_TOKEN": "dummy",
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    }
    subprocess.run(command, capture_output=True, text=True, check=True, env=gcloud_env, timeout=120)
    (call,) = calls
    assert call["path"].startswith("/v1/projects/trainctl-local/locations/us-central1/customJobs")
    sent = CustomJob.from_json(json.dumps(call["body"]))
    expected = CustomJob.from_json(json.dumps(planned["custom_job"]))
    assert sent == expected
