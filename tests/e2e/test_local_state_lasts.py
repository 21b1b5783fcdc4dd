"""`trainctl local up` keeps its state across a restart (issue 44, point 4): a dataset uploaded, a model trained and
registered, and a request's record and history before `local down` are all there after the next `local up`; a request
whose job was still running when the stack stopped is followed after the restart (reconcile finds it in the ledger,
as the Pub/Sub emulator starts empty) and resubmitted, its job having failed as Vertex fails a job whose machines went
away (an internal error, not the user's). One stack restart; `--fresh` and a forged older format are
tests/unit/test_saved_state.py's."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from local.names import LOCAL_PROJECT, Names
from local.processes import wait_until
from local.saved_state import FORMAT_FILE
from tests.e2e.running_stack import RunningStack, up_args
from tests.e2e.test_builtin_tabular_on_the_local_stack import churn_csv
from tests.integration.deployment import fake_node_request

pytestmark = pytest.mark.integration

FINAL = ("succeeded", "failed", "cancelled", "rejected", "promoted", "held")


def lasting_up_args() -> list[str]:
    return [arg for arg in up_args(Names(LOCAL_PROJECT).data_bucket) if arg != "--ephemeral"]


def status(stack: RunningStack, request_id: str) -> dict:
    shown = stack.trainctl("status", request_id, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return json.loads(shown.stdout)


def test_models_data_and_requests_outlast_a_restart(tmp_path: Path):
    stack = RunningStack(tmp_path / "local")
    model = f"kept-{uuid.uuid4().hex[:8]}"
    data_bucket = Names(LOCAL_PROJECT).data_bucket
    dataset = f"gs://{data_bucket}/{model}/"
    shard = tmp_path / "part-0.csv"
    shard.write_text(churn_csv(300, seed=5))
    trained, stopped = f"{model}-trained", f"{model}-stopped"
    requests = {
        trained: {
            "api_version": "trainctl/v1",
            "request_id": trained,
            "dataset": {"uri": dataset, "target": "churned"},
            "trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 2}},
            "resources": {"machine_type": "g2-standard-24"},
            "model": {"name": model},
        },
        stopped: fake_node_request(stopped, "--sleep", "30") | {"dataset": {"uri": dataset, "target": "churned"}},
    }
    for request_id, document in requests.items():
        (tmp_path / f"{request_id}.yaml").write_text(yaml.safe_dump(document))

    started = stack.trainctl("local", "up", "--detach", *lasting_up_args())
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        saved = tmp_path / "local" / "saved"
        assert ["kept", str(saved)] in [line.split() for line in started.stdout.splitlines()]  # the banner says where
        assert json.loads((saved / FORMAT_FILE).read_text())["format"] == 1
        copied = stack.shell(f"gcloud storage cp {shard} {dataset}")
        assert copied.returncode == 0, copied.stderr
        assert stack.trainctl("submit", str(tmp_path / f"{trained}.yaml")).returncode == 0

        # Its end and its model's decision (promotion follows the final state): nothing left to change it.
        def settled() -> bool:
            record = status(stack, trained)
            return record["state"] in FINAL and (record.get("model") or {}).get("decision") != "pending"

        assert wait_until(settled, 300, interval=2)
        before = status(stack, trained)
        assert before["state"] in ("succeeded", "promoted"), before
        assert stack.trainctl("submit", str(tmp_path / f"{stopped}.yaml")).returncode == 0
        assert wait_until(lambda: any(j.state.name == "JOB_STATE_RUNNING" for j in stack.jobs_of(stopped)), 120)
        listed_before = stack.trainctl("models", "list", "--json")

        assert stack.trainctl("local", "down").returncode == 0
        again = stack.trainctl("local", "up", "--detach", *lasting_up_args())
        assert again.returncode == 0, again.stdout + again.stderr

        listed = stack.trainctl("models", "list", "--json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert model in listed.stdout
        assert json.loads(listed.stdout) == json.loads(listed_before.stdout)
        data = stack.shell(f"gcloud storage cat {dataset}part-0.csv")
        assert data.returncode == 0 and data.stdout == shard.read_text(), data.stderr
        after = status(stack, trained)
        assert after == before  # the ledger's record, history and artifacts, as they were
        # The request accepted before the restart is followed after it: its job's machines went away with the stack,
        # an infrastructure failure as Vertex reports a job whose VMs were lost (code INTERNAL), never the user's, so
        # the controller resubmits it — attempt 2 into the same outputs — instead of ending it `failed` (reason user).
        assert wait_until(lambda: status(stack, stopped)["attempt"] >= 2, 120, interval=2), status(stack, stopped)
        assert status(stack, stopped)["state"] != "failed"
        first = min(stack.jobs_of(stopped), key=lambda job: job.create_time)
        assert first.state.name == "JOB_STATE_FAILED" and first.error.code == 13, first.error  # google.rpc INTERNAL
    finally:
        stack.trainctl("local", "down")
