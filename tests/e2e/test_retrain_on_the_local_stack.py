"""Issue 42, point 5 on the local stack, as README's "Retrain on an alert" shows it: in a shell that ran `eval
"$(trainctl local env)"`, an incident in Cloud Monitoring's shape published with the stock `gcloud pubsub topics publish
$TRAINCTL_RETRAIN_TOPIC` reaches on_retrain through the stack's push subscription and starts one run of the rule that
trains its model, on the rule's newest marker, the incident named in its trigger; published again, it starts nothing
more."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path

import pytest

from tests.e2e.running_stack import ALERTED_MODEL, RunningStack

pytestmark = pytest.mark.integration


def test_an_incident_published_with_gcloud_starts_its_models_rule_once(stack: RunningStack, tmp_path: Path):
    folder = f"alerted/week-{uuid.uuid4().hex[:8]}"
    (tmp_path / "part-0.csv").write_text("a,y\n1,0\n")
    (tmp_path / "_SUCCESS").write_text("")
    incident_id = f"0.e2e{uuid.uuid4().hex[:10]}"
    incident = {
        "version": "1.2",
        "incident": {
            "incident_id": incident_id,
            "policy_name": "e2e drift",
            "state": "open",
            "summary": "Prediction drift is above the threshold.",
            "policy_user_labels": {"trainctl-model": ALERTED_MODEL},
        },
    }
    publish = f"gcloud pubsub topics publish $TRAINCTL_RETRAIN_TOPIC --message {shlex.quote(json.dumps(incident))}"
    request_id = f"alert.{ALERTED_MODEL}-{incident_id}"
    with stack.watch() as watch:
        uploaded = stack.shell(
            f'gcloud storage cp {tmp_path / "part-0.csv"} "gs://$TRAINCTL_DATA_BUCKET/{folder}/part-0.csv"\n'
            f'gcloud storage cp {tmp_path / "_SUCCESS"} "gs://$TRAINCTL_DATA_BUCKET/{folder}/_SUCCESS"'
        )
        assert uploaded.returncode == 0, uploaded.stdout + uploaded.stderr
        marker_run = f"gcs.{folder.replace('/', '-')}-"
        # The marker's own run first, so that the stack is idle again when the test ends.
        watch.wait_for(lambda e: e["request_id"].startswith(marker_run) and e["state"] in ("promoted", "held"))
        published = stack.shell(f"{publish}\n{publish}")  # the same incident, notified twice
        assert published.returncode == 0, published.stdout + published.stderr
        accepted = watch.wait_for(lambda e: e["request_id"] == request_id and e["state"] == "accepted")
        watch.wait_for(lambda e: e["request_id"] == request_id and e["state"] in ("promoted", "held"))

    assert accepted["trigger"]["kind"] == "alert" and accepted["trigger"]["incident"] == incident_id
    assert accepted["trigger"]["rule"].endswith("/alerted/")
    assert watch.states(request_id).count("accepted") == 1 and watch.states(request_id).count("submitted") == 1
    assert len(stack.jobs_of(request_id.replace(".", "-"))) == 1  # label values take no '.'
