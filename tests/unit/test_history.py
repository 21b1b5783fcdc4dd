"""The history index (functions/ledger/history.py) within Cloud Storage's custom-metadata limits, and a history write
that fails unable to keep a final event republished or its record active (issue 24, point 8).

fake-gcs-server enforces none of these limits, so the encoding is held to them here, against the documented
figures written out below rather than imported: google.storage.v2 ServiceConstants.Values
MAX_CUSTOM_METADATA_FIELD_NAME_BYTES (1 KiB), MAX_CUSTOM_METADATA_FIELD_VALUE_BYTES (4 KiB),
MAX_CUSTOM_METADATA_TOTAL_SIZE_BYTES (8 KiB, all keys and values of one object), in UTF-8 bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from functions.cloud.errors import Transient
from functions.cloud.gcs import StorageError
from functions.ledger.history import Outcome, history_entry
from functions.ledger.outbox import Outbox
from functions.ledger.output_claims import OutputClaims
from functions.ledger.record import Record
from functions.ledger.requests import ACTIVE_PREFIX, Ledger
from local.memory_gcs import MemoryGcs
from schemas.events import Succeeded
from schemas.rules import MAX_LABELS
from tests.unit.conftest import make_record

KEY_BYTES, VALUE_BYTES, TOTAL_BYTES = 1024, 4096, 8192
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
BUCKET = "control"


def longest_labels(count: int) -> dict[str, str]:
    """`count` labels with 63-character keys and values, the most GCP label rules allow."""
    return {f"k{i:02d}".ljust(63, "k"): f"v{i:02d}".ljust(63, "v") for i in range(count)}


def outcome(labels: dict[str, str]) -> Outcome:
    return Outcome(
        request_id="r" * 128,  # the longest request id
        state="failed",
        reason="preemption",
        time=NOW,
        accepted=NOW - timedelta(hours=3),
        started=NOW - timedelta(hours=2),
        ended=NOW,
        gpus=64,
        hourly_usd=123456.78,
        attempt=10,
        labels=labels,
    )


def documented_problems(metadata: dict[str, str]) -> list[str]:
    problems = [f"key {k[:20]!r}" for k in metadata if len(k.encode()) > KEY_BYTES]
    problems += [f"value of {k[:20]!r}" for k, v in metadata.items() if len(v.encode()) > VALUE_BYTES]
    if sum(len(k.encode()) + len(v.encode()) for k, v in metadata.items()) > TOTAL_BYTES:
        problems.append("total")
    return problems


@dataclass
class CloudLikeStorage(MemoryGcs):
    """The in-memory Cloud Storage, refusing a write past the documented limits of custom metadata with 400, as
    Cloud Storage does; `refuse_history` makes every history write fail with that error."""

    refuse_history: Exception | None = None

    def write(self, bucket, name, data, if_generation_match, custom_metadata=None):  # type: ignore[no-untyped-def]
        if self.refuse_history is not None and name.startswith("history/"):
            raise self.refuse_history
        if problems := documented_problems(custom_metadata or {}):
            raise StorageError(f"400: custom metadata too large: {problems}", 400)
        return super().write(bucket, name, data, if_generation_match, custom_metadata)


def test_an_outcome_with_64_labels_of_the_longest_kind_fits_cloud_storages_limits():
    """Issue 24, point 8: the outcome was one metadata value holding the labels; about 30 long labels exceeded
    the 4 KiB a value may hold, 60 the 8 KiB of the whole. Now every key, every value and the total fit, and
    the labels are all kept (in the object's content when they do not fit its metadata)."""
    whole = outcome(longest_labels(MAX_LABELS))
    content, metadata = history_entry(whole)
    assert documented_problems(metadata) == []
    assert Outcome.model_validate_json(content) == whole
    assert metadata["labels"] == "in-content"


def test_an_outcome_with_a_few_labels_keeps_them_in_its_metadata():
    few = outcome({"team": "fraud", "cost-center": "42"})
    content, metadata = history_entry(few)
    assert documented_problems(metadata) == [] and "labels" not in metadata
    assert Outcome.model_validate_json(metadata["outcome"]) == few == Outcome.model_validate_json(content)


@pytest.mark.parametrize("labels", [60, MAX_LABELS])
def test_the_ledger_files_an_outcome_with_many_long_labels_and_the_report_reads_them_back(labels):
    """Issue 24, point 8: the write used to be refused (the report never saw the request)."""
    storage = CloudLikeStorage()
    ledger = Ledger(storage, BUCKET)
    many, few = outcome(longest_labels(labels)), outcome({"team": "a"}).model_copy(update={"request_id": "few"})
    ledger.record_outcome(many, "many")
    ledger.record_outcome(few, "few")
    assert sorted(ledger.outcomes(NOW - timedelta(days=1)), key=lambda o: o.request_id) == [few, many]


def final_record(storage: CloudLikeStorage) -> tuple[Record, int, str]:
    """A request with 60 long labels that has just succeeded, its `succeeded` event waiting in the outbox."""
    record = make_record(request={"labels": longest_labels(60)}, state="succeeded", created=NOW, updated=NOW)
    event = Succeeded(
        request_id="r1", request_key="request:r1", time=NOW, message="job 1 succeeded", artifacts=record.artifacts
    )
    [ce_id] = record.add_events([event])
    ledger = Ledger(storage, BUCKET)
    generation = ledger.create(record)
    ledger.mark_active(record.key_hash)
    return record, generation, ce_id


@dataclass
class Published:
    source: str = "test"
    ids: list[str] = field(default_factory=list)

    def publish(self, event) -> str:  # type: ignore[no-untyped-def]
        self.ids.append(event.ce_id)
        return event.ce_id


@pytest.mark.parametrize(
    "refusal",
    [StorageError("Cloud Storage answered 403: permission denied", 403), Transient("failed 5 times; the last: 503")],
)
def test_a_history_write_that_fails_neither_republishes_the_final_event_nor_keeps_the_record_active(refusal):
    """Issue 24, point 8: record_outcome raised, so the outbox was never cleared: the final event went out again
    every tick and the record stayed active (its GPU quota held). Now the failure is logged and the flow goes
    on; an outage of Cloud Storage fails the outbox's own save right after, which retries everything."""
    storage = CloudLikeStorage(refuse_history=refusal)
    ledger, publisher = Ledger(storage, BUCKET), Published()
    claims = OutputClaims(storage, ledger, lambda: NOW, timedelta(minutes=10), timedelta(days=1))
    outbox = Outbox(ledger, publisher, lambda: NOW, timedelta(seconds=5), claims)
    record, generation, ce_id = final_record(storage)

    record, generation = outbox.flush(record, generation, {ce_id})
    outbox.retire_when_done(record)

    assert publisher.ids == [ce_id]
    stored, _ = ledger.read("abc") or (None, 0)
    assert stored is not None and stored.outbox == [] and ce_id in stored.published
    assert storage.names(BUCKET, ACTIVE_PREFIX) == []


def test_a_history_object_whose_content_is_unreadable_is_reported_without_its_labels():
    storage = CloudLikeStorage()
    ledger = Ledger(storage, BUCKET)
    many = outcome(longest_labels(60))
    _, metadata = history_entry(many)
    storage.write(BUCKET, "history/2026-11-22/junk", b"not an outcome", 0, metadata)
    assert ledger.outcomes(NOW - timedelta(days=1)) == [many.model_copy(update={"labels": {}})]
