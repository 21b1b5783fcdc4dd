"""The one in-memory Cloud Storage (local/memory_gcs.py) that trainctl replay's dry run, the unit tests' controller
and bench/reconcile_sweep.py all stand on: what the ledger relies on of Cloud Storage, kept as Cloud Storage keeps
it (issue 39: the dry run and the sweep bench each had their own)."""

from __future__ import annotations

import pytest

from functions.cloud.gcs import Conflict, TooLarge
from functions.cloud.ports import Storage
from local.memory_gcs import MemoryGcs
from trainctl.replay import DryRunGcs


def test_a_write_is_a_compare_and_swap_on_the_generation():
    gcs = MemoryGcs()
    first = gcs.write("b", "ledger/k.json", "one", 0)
    with pytest.raises(Conflict):
        gcs.write("b", "ledger/k.json", "two", 0)  # it exists
    second = gcs.write("b", "ledger/k.json", "two", first)
    with pytest.raises(Conflict):
        gcs.write("b", "ledger/k.json", "three", first)  # a stale generation
    assert second > first and gcs.read("b", "ledger/k.json") == (b"two", second)
    assert gcs.read("b", "ledger/k.json", generation=first) is None  # only the newest generation is kept
    with pytest.raises(TooLarge):
        gcs.read("b", "ledger/k.json", max_bytes=2)


def test_listings_are_sorted_by_name_from_the_start_offset_with_each_objects_metadata():
    gcs = MemoryGcs()
    for name in ("history/2026-01-03/c", "history/2026-01-01/a", "history/2026-01-02/b", "ledger/x.json"):
        gcs.write("b", name, b"", 0, {"outcome": name[-1]})
    gcs.set_metadata("b", "history/2026-01-02/b", {"seen": "yes"})

    assert gcs.names("b", "history/") == ["history/2026-01-01/a", "history/2026-01-02/b", "history/2026-01-03/c"]
    assert list(gcs.metadata_under("b", "history/", "history/2026-01-02")) == [
        ("history/2026-01-02/b", {"outcome": "b", "seen": "yes"}),
        ("history/2026-01-03/c", {"outcome": "c"}),
    ]
    gcs.delete("b", "history/2026-01-02/b")
    assert not gcs.set_metadata("b", "history/2026-01-02/b", {"seen": "again"})
    assert gcs.names("b", "history/2026-01-02") == [] and gcs.any_under("b", "history/")


def test_the_dry_run_assumes_the_users_data_and_packages_it_cannot_see():
    gcs: Storage = DryRunGcs()
    assert isinstance(gcs, MemoryGcs)
    assert list(gcs.objects_under("data", "churn/")) == [("churn/assumed-data", 1)]
    assert gcs.digest("data", "pkg/trainer.tar.gz", 1024) is not None
    gcs.write("data", "churn/part-0.csv", b"a,y\n", 0)
    assert list(gcs.objects_under("data", "churn/")) == [("churn/part-0.csv", 4)]
