"""A dataset's fingerprint (issue 42, model.skip_unchanged; functions/data/fingerprint.py): the objects the trainer
would read — the selection of trainer/data/tables.py list_shards and admission's first_data_file — by name,
generation and CRC32C, from one bounded listing."""

from __future__ import annotations

from functions.cloud.gcs import ListedObject
from functions.data.fingerprint import data_objects, dataset_fingerprint, fingerprint_of
from local.memory_gcs import MemoryGcs
from schemas.request import TrainingJobRequest

URI = "gs://data/churn/2026-11-27/"


def listed(name: str, size: int = 10, generation: int = 1, crc32c: str = "AAAAAA==") -> ListedObject:
    return ListedObject(name, size, generation, crc32c, "2026-11-27T00:00:00Z")


def request(uri: str = URI, data_format: str = "auto") -> TrainingJobRequest:
    return TrainingJobRequest.model_validate(
        {
            "api_version": "trainctl/v1",
            "request_id": "r1",
            "dataset": {"uri": uri, "target": "y", "format": data_format},
            "trainer": {"builtin": "tabular"},
            "resources": {"machine_type": "g2-standard-24"},
            "model": {"name": "churn", "skip_unchanged": True},
        }
    )


def test_only_the_objects_the_trainer_reads_are_fingerprinted():
    """CSV and Parquet objects below the folder, in subfolders too; markers, hidden files, empty objects, other
    suffixes and "folder" placeholders are left out, as list_shards and first_data_file leave them out."""
    folder = "churn/2026-11-27/"
    objects = [
        listed(folder + "part-0.csv"),
        listed(folder + "sub/part-1.parquet"),
        listed(folder + "part-2.pq"),
        listed(folder + "_SUCCESS", size=0),
        listed(folder + "_SUCCESS.json"),
        listed(folder + ".hidden.csv"),
        listed(folder + "empty.csv", size=0),
        listed(folder + "notes.txt"),
        listed(folder + "sub/"),
        listed("churn/2026-11-27-other/part-0.csv"),  # a sibling folder sharing the prefix
    ]
    chosen = [o.name for o in data_objects(URI, "auto", objects)]
    assert chosen == [folder + "part-0.csv", folder + "sub/part-1.parquet", folder + "part-2.pq"]


def test_a_uri_naming_one_object_fingerprints_that_object_alone():
    objects = [listed("churn/all.csv"), listed("churn/all.csv.bak")]
    assert [o.name for o in data_objects("gs://data/churn/all.csv", "auto", objects)] == ["churn/all.csv"]


def test_a_stated_format_reads_every_data_object_whatever_its_suffix():
    objects = [listed("churn/2026-11-27/part-0"), listed("churn/2026-11-27/_SUCCESS")]
    assert [o.name for o in data_objects(URI, "csv", objects)] == ["churn/2026-11-27/part-0"]


def test_a_new_generation_or_content_changes_it_and_a_marker_or_the_order_does_not():
    base = [listed("a/part-0.csv"), listed("a/part-1.csv", generation=7)]
    same = fingerprint_of(base)
    assert same is not None and same.startswith("sha256:")
    assert fingerprint_of(list(reversed(base))) == same
    assert fingerprint_of([base[0], listed("a/part-1.csv", generation=8)]) != same  # written again, same bytes
    assert fingerprint_of([base[0], listed("a/part-1.csv", generation=7, crc32c="BBBBBB==")]) != same
    assert fingerprint_of([base[0]]) != same  # a partition removed
    assert fingerprint_of([]) is None


def test_the_listing_is_bounded_and_a_larger_dataset_is_never_taken_for_unchanged():
    gcs = MemoryGcs()
    for i in range(5):
        gcs.write("data", f"churn/2026-11-27/part-{i}.csv", "a,y\n1,0\n", 0)
    gcs.write("data", "churn/2026-11-27/_SUCCESS", "", 0)
    whole = dataset_fingerprint(gcs, request())
    assert whole is not None
    assert dataset_fingerprint(gcs, request(), limit=6) == whole  # 6 objects listed, the marker included
    assert dataset_fingerprint(gcs, request(), limit=5) is None  # one more than the bound: unknown
    gcs.write("data", "churn/2026-11-27/_SUCCESS", "{}", gcs.read("data", "churn/2026-11-27/_SUCCESS")[1])
    assert dataset_fingerprint(gcs, request()) == whole, "a marker written again leaves the data unchanged"
    gcs.write("data", "churn/2026-11-27/part-3.csv", "a,y\n1,0\n", gcs.read("data", "churn/2026-11-27/part-3.csv")[1])
    assert dataset_fingerprint(gcs, request()) != whole, "one object's new generation changes it"
