"""A dataset's fingerprint (issue 42, model.skip_unchanged): sha256 over the sorted lines "name generation crc32c" of
the objects the trainer would read under dataset.uri — the selection admission's first_data_file and the trainer's
list_shards make — from one bounded listing, so that no object is read. A new generation of any data object (the
same bytes written again included: "the new object always has a different generation assigned to it",
https://cloud.google.com/storage/docs/generations-preconditions) changes it; a marker or a hidden file does not.

A dataset of more objects than the bound, or one that cannot be listed, has no fingerprint (None): it is never
taken for unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from functions.cloud.gcs import ListedObject, StorageError
from functions.cloud.ports import Storage
from functions.data.admission import data_format_below
from schemas.request import TrainingJobRequest
from schemas.rules import split_gs_uri

# The most objects a fingerprint lists under a dataset (any object below it counts, data or not): one listing page of
# Cloud Storage's is 1,000, so this is at most ten calls.
MAX_FINGERPRINT_OBJECTS = 10_000


def data_objects(uri: str, requested: str, listed: Iterable[ListedObject]) -> list[ListedObject]:
    """The objects of `listed` the trainer reads for a dataset at `uri`: the object the URI names, when it names one;
    else every CSV or Parquet object below it as a folder, markers, hidden files and empty objects left out."""
    _, prefix = split_gs_uri(uri)
    folder = prefix if prefix.endswith("/") or not prefix else prefix + "/"
    found = []
    for listed_object in listed:
        if listed_object.name == prefix and not prefix.endswith("/"):
            return [listed_object]
        if data_format_below(folder, listed_object.name, listed_object.size, requested) is not None:
            found.append(listed_object)
    return found


def fingerprint_of(objects: Iterable[ListedObject]) -> str | None:
    """sha256 of the sorted "name generation crc32c" lines; None for no objects (nothing to compare)."""
    lines = sorted(f"{o.name} {o.generation} {o.crc32c}" for o in objects)
    if not lines:
        return None
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def dataset_fingerprint(gcs: Storage, request: TrainingJobRequest, limit: int = MAX_FINGERPRINT_OBJECTS) -> str | None:
    """The request's dataset fingerprint from one listing of at most `limit` objects; None when it has none."""
    uri = request.dataset.uri
    if not uri.startswith("gs://"):
        return None  # file:// in local mode: nothing to list
    bucket, prefix = split_gs_uri(uri)
    listed = []
    try:
        for listed_object in gcs.listing(bucket, prefix):
            listed.append(listed_object)
            if len(listed) > limit:
                return None
    except StorageError:
        return None  # admission's own preflight has listed it already; a refusal now leaves it unknown
    return fingerprint_of(data_objects(uri, request.dataset.format, listed))
