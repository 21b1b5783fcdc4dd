"""Spend that cannot be dropped (issue 40, point 2): `code_digest` is bounded whatever a request's package list, and an
outcome's history entry fits Cloud Storage's custom-metadata limits whatever the request filled in, the fields that do
not fit moving into the object's content. (The budget itself counts from the team's month record, settled from the
outbox: tests/unit/test_budget_reservations.py.)"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from functions.cloud.gcs import metadata_problems
from functions.ledger.history import LABELS_IN_CONTENT, LABELS_KEY, Outcome, history_entry, outcome_of
from functions.ledger.requests import Ledger
from local.memory_gcs import MemoryGcs
from schemas.events import Spend, Succeeded
from schemas.request import LIST_DIGEST_PREFIX, MAX_LISTED_DIGESTS, code_digest
from tests.unit.conftest import make_record

DIGEST = "ab" * 32
URI = f"gs://code/packages/sha256-{DIGEST}/pkg-1.0.tar.gz"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def package_request(uris: list[str]) -> dict[str, object]:
    return {"trainer": {"python_package": {"uris": uris, "module": "pkg.train", "executor": "pytorch-2.4"}}}


def test_code_digest_lists_a_few_packages_and_digests_the_list_of_many():
    """Issue 40, point 2: up to MAX_LISTED_DIGESTS packages are listed as before; the review's request, one URI
    repeated 60 times (~4 KiB listed), carries one digest of the list instead; 100 packages (Vertex's most) too."""
    few = code_digest(package_request([URI] * MAX_LISTED_DIGESTS))
    assert few == ",".join([f"sha256:{DIGEST}"] * MAX_LISTED_DIGESTS)
    listed = ",".join([f"sha256:{DIGEST}"] * 60)
    many = code_digest(package_request([URI] * 60))
    assert many == LIST_DIGEST_PREFIX + hashlib.sha256(listed.encode()).hexdigest()
    for count in range(1, 101):
        assert len(code_digest(package_request([URI] * count)) or "") <= 575


def test_the_review_requests_outcome_fits_its_metadata_with_its_digest():
    """Issue 40, point 2, the review's scenario: 60 package URIs made the outcome's metadata pass 4 KiB; filing it
    failed and was only logged, so the run never counted. Now its metadata fits whole, digest included."""
    record = make_record(request=package_request([URI] * 60), team="vision")
    event = Succeeded(**record.envelope(NOW), message="done", artifacts=record.artifacts)
    _, metadata = history_entry(outcome_of(event, record))
    assert metadata_problems(metadata) == []
    assert LABELS_KEY not in metadata, "shortened, though it fits"
    assert Outcome.model_validate_json(metadata["outcome"]).code_digest == code_digest(record.request)


def test_an_outcome_whose_request_filled_fields_do_not_fit_moves_them_into_the_content_and_is_read_back_whole():
    """Issue 40, point 2: whatever text a request fills an outcome with (here a digest far past any bound), the
    history entry's metadata keeps within Cloud Storage's limits, with its figures, and the report reads the
    whole outcome back from the content."""
    outcome = Outcome(
        request_id="r1",
        state="succeeded",
        time=NOW,
        team="vision",
        spent=Spend(gpu_hours=2.0, estimated_cost_usd=7.5),
        code_digest="sha256:" + "f" * 9000,
        labels={f"k{i:02d}".ljust(63, "k"): "v" * 63 for i in range(60)},
    )
    _, metadata = history_entry(outcome)
    assert metadata_problems(metadata) == [] and metadata[LABELS_KEY] == LABELS_IN_CONTENT
    shortened = Outcome.model_validate_json(metadata["outcome"])
    assert (shortened.cost_usd, shortened.team, shortened.code_digest) == (7.5, "vision", None)

    gcs = MemoryGcs()
    ledger = Ledger(gcs, "control")
    ledger.record_outcome(outcome, "abc")
    (read,) = ledger.outcomes(NOW)
    assert read == outcome
