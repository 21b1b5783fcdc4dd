"""Cloud Storage reads of objects a requester or a job wrote are bounded (issue 24, point 6): the adapter streams
the download and stops past the limit, so a huge object is never held in memory; fake-gcs-server serves it."""

from __future__ import annotations

import base64
import os
import uuid

import pytest

from functions.cloud.gcs import Gcs, TooLarge
from local.fake_gcs import create_bucket
from local.names import LOCAL_PROJECT


@pytest.fixture(scope="module")
def bucket(fake_gcs) -> str:
    name = f"bounded-{uuid.uuid4().hex[:8]}"
    create_bucket(os.environ["STORAGE_EMULATOR_HOST"], LOCAL_PROJECT, name)
    return name


def test_an_object_within_the_bound_is_read_whole(bucket: str) -> None:
    gcs = Gcs(LOCAL_PROJECT)
    generation = gcs.write(bucket, "small.json", b'{"a": 1}', 0)
    assert gcs.read(bucket, "small.json", max_bytes=8) == (b'{"a": 1}', generation)
    assert gcs.read(bucket, "missing.json", max_bytes=8) is None


def test_an_object_past_the_bound_raises_with_its_size(bucket: str) -> None:
    gcs = Gcs(LOCAL_PROJECT)
    gcs.write(bucket, "big.json", b"x" * 100_000, 0)
    with pytest.raises(TooLarge) as raised:
        gcs.read(bucket, "big.json", max_bytes=1000)
    assert raised.value.limit == 1000 and raised.value.size == 100_000
    assert "gs://" in str(raised.value) and "the limit is 1000 bytes" in str(raised.value)


def test_an_empty_object_reads_as_empty(bucket: str) -> None:
    gcs = Gcs(LOCAL_PROJECT)
    generation = gcs.write(bucket, "empty", b"", 0)
    assert gcs.read(bucket, "empty", max_bytes=10) == (b"", generation)


def test_a_ranged_read_gets_only_its_bytes(bucket: str) -> None:
    """Issue 27, point 2: the data check reads a CSV's first bytes and a Parquet file's last ones with an HTTP Range
    (fake-gcs-server honours it, as Cloud Storage does); past the end it gets what is there, and None when missing."""
    gcs = Gcs(LOCAL_PROJECT)
    gcs.write(bucket, "ranged.bin", bytes(range(256)) * 400, 0)
    assert gcs.read_range(bucket, "ranged.bin", 0, 10) == bytes(range(10))
    assert gcs.read_range(bucket, "ranged.bin", 102_390, 100) == bytes(range(246, 256))
    assert gcs.read_range(bucket, "ranged.bin", 102_400, 8) == b""
    assert gcs.read_range(bucket, "missing.bin", 0, 8) is None


def test_a_listing_states_each_objects_generation_and_crc32c_as_the_memory_stand_in_does(bucket: str) -> None:
    """Issue 42: a dataset's fingerprint and a rule's newest marker come from one listing (generation, CRC32C, update
    time), never a read; the in-memory Cloud Storage (trainctl replay, unit tests) states the same CRC32C."""
    import google_crc32c

    from local.memory_gcs import MemoryGcs

    gcs, memory = Gcs(LOCAL_PROJECT), MemoryGcs()
    prefix = f"listing-{uuid.uuid4().hex[:8]}/"
    generations = {
        name: gcs.write(bucket, prefix + name, data, 0) for name, data in (("a.csv", b"x,y\n1,2\n"), ("b", b""))
    }
    memory.write(bucket, prefix + "a.csv", b"x,y\n1,2\n", 0)
    listed = {item.name.removeprefix(prefix): item for item in gcs.listing(bucket, prefix)}
    assert {name: item.generation for name, item in listed.items()} == generations
    expected = base64.b64encode(google_crc32c.value(b"x,y\n1,2\n").to_bytes(4, "big")).decode()
    assert listed["a.csv"].crc32c == expected == next(memory.listing(bucket, prefix)).crc32c
    assert listed["a.csv"].size == 8 and listed["a.csv"].updated
