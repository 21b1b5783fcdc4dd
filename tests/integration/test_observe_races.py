"""Two observers of one job at once — on_job_state and reconcile, which the local stack runs side by side —
must not fail the loser: when the ledger record changed after it was read, the observer reads it again and
carries on, and every state change is still published once."""

from __future__ import annotations

from functions.cloud.gcs import Gcs
from functions.controller import Controller
from functions.ledger.keys import key_hash
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from functions.settings import Settings
from local.jobservice.client import wait_for_state
from tests.integration.deployment import fake_node_request


class LedgerChangedAfterEachFirstRead(Ledger):
    """Another observer rewrites a record right after this one first reads it, so this one's
    compare-and-swap of that read must fail."""

    def __init__(self, gcs: Gcs, bucket: str):
        super().__init__(gcs, bucket)
        self.raced: set[str] = set()

    def read(self, khash: str) -> tuple[Record, int] | None:
        found = super().read(khash)
        if found is not None and khash not in self.raced:
            self.raced.add(khash)
            self.replace(*found)  # the same record under a new generation
        return found


def observer(deployment, ledger_type: type[Ledger]) -> Controller:
    settings = Settings.from_env(deployment.settings_env())
    return Controller.from_settings(settings, ledger=ledger_type(Gcs(settings.project), settings.control_bucket))


def test_an_observer_whose_record_changed_meanwhile_reads_it_again_and_reports_once(deployment, job_client):
    assert deployment.request(fake_node_request("raced-observer-1", "--sleep", "0.1")) == 200
    record = deployment.record("request:raced-observer-1")
    wait_for_state(job_client, record["job_name"])
    events = deployment.events()

    state = observer(deployment, LedgerChangedAfterEachFirstRead).observe_record(key_hash("request:raced-observer-1"))

    assert state == "succeeded"
    assert deployment.record("request:raced-observer-1")["state"] == "succeeded"
    assert events.states("raced-observer-1") == ["running", "succeeded"]
