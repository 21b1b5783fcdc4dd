"""The history index is listed once for all it is asked: finished requests, model decisions and coalesced triggers
come from one listing (a page or a report over 10,000 requests in history listed it three times: bench/RESULTS.md,
console_pages), each as `Ledger.outcomes` finds it alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from functions.ledger.history import METADATA_KEY, MODEL_DECISION_KEY, TRIGGER_POLICY_KEY, Outcome
from functions.ledger.requests import Ledger
from local.memory_gcs import MemoryGcs

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
BUCKET = "control"
KEYS = (METADATA_KEY, MODEL_DECISION_KEY, TRIGGER_POLICY_KEY)


class CountingGcs(MemoryGcs):
    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    def metadata_under(self, bucket, prefix, start_offset=""):
        self.listings += 1
        return super().metadata_under(bucket, prefix, start_offset)


def filed(gcs: CountingGcs) -> Ledger:
    ledger = Ledger(gcs, BUCKET)
    for i in range(12):
        ended = NOW - timedelta(hours=10 * i)  # some before the window, some in it
        outcome = Outcome(request_id=f"r{i}", state="succeeded", time=ended)
        ledger.record_outcome(outcome, f"request-{i}", KEYS[i % 3])
    return ledger


def test_one_listing_answers_every_key_as_each_alone_would():
    gcs = CountingGcs()
    ledger = filed(gcs)
    since = NOW - timedelta(days=2)
    alone = {key: ledger.outcomes(since, key) for key in KEYS}
    assert gcs.listings == 3
    together = ledger.outcomes_by_key(since, KEYS)
    assert gcs.listings == 4  # one more, for all three
    assert together == alone
    assert sum(len(found) for found in together.values()) == 5  # r0..r4: within the last 48 hours
    assert sorted(o.request_id for o in together[METADATA_KEY]) == ["r0", "r3"]


def test_the_report_lists_the_history_once(monkeypatch):
    from trainctl import report

    gcs = CountingGcs()
    filed(gcs)

    class Settings:
        project, control_bucket, teams = "proj", BUCKET, None

    monkeypatch.setattr("trainctl.context.cli_settings", lambda: Settings)
    monkeypatch.setattr("functions.cloud.gcs.Gcs", lambda project: gcs)
    found = report.report_from_ledger(timedelta(days=2))
    assert gcs.listings == 1
    assert found["total"]["requests"] == 2
