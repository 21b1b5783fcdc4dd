"""Cold start: data shards and duplicates are handled without importing the Vertex client (DESIGN.md §4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from local.functions_host import REPO_ROOT

HANDLE_TWO_EVENTS = """
import json, sys
from cloudevents.http import CloudEvent
import main  # the deploy archive's root main.py, as Cloud Functions imports it
events = json.loads(sys.argv[1])
for attributes, data in events:
    main.on_dataset_upload(CloudEvent(attributes, data))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("google.cloud.aiplatform"))))
"""


def test_a_shard_and_a_duplicate_leave_the_vertex_client_unimported(deployment, tmp_path):
    marker = deployment.upload_marker("churn/cold/")
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200  # the first delivery
    events = []
    for blob in (deployment.upload("churn/cold/part-0001.csv", "a,y\n1,0\n"), marker):
        headers, body = deployment.storage_event(blob)
        attributes = {k.removeprefix("ce-"): v for k, v in headers.items() if k.startswith("ce-")}
        events.append((attributes, json.loads(body)))
    log, loaded = handle_in_a_fresh_process(deployment, tmp_path, events)
    assert loaded == []
    assert any('"not a marker; ignored"' in line for line in log)
    assert any('"duplicate delivery; starts nothing"' in line for line in log)


def test_a_submission_calls_vertex_without_importing_its_client_library(deployment, tmp_path):
    """Guards issue 13 item 5: the submitting path calls Vertex's REST API; google.cloud.aiplatform, most of a
    cold submission before, is not imported by the function at all."""
    marker = deployment.upload("churn/cold-submit/part-0000.csv", "a,y\n1,0\n") and deployment.upload(
        "churn/cold-submit/_SUCCESS"
    )
    headers, body = deployment.storage_event(marker)
    attributes = {k.removeprefix("ce-"): v for k, v in headers.items() if k.startswith("ce-")}

    log, loaded = handle_in_a_fresh_process(deployment, tmp_path, [(attributes, json.loads(body))])

    assert any('"message": "submitted"' in line for line in log), log
    assert loaded == []


def handle_in_a_fresh_process(deployment, tmp_path, events: list) -> tuple[list[str], list[str]]:
    """(log lines, google.cloud.aiplatform modules loaded) of a new process handling `events` in turn."""
    # The deploy archive's layout: a root main.py re-exporting functions/main.py (terraform/root_main.py).
    (tmp_path / "main.py").write_text((REPO_ROOT / "terraform" / "root_main.py").read_text())
    env = {**os.environ, **deployment.settings_env(), "PYTHONPATH": f"{tmp_path}:{REPO_ROOT}"}
    result = subprocess.run(
        [sys.executable, "-c", HANDLE_TWO_EVENTS, json.dumps(events)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    return lines[:-1], json.loads(lines[-1])
