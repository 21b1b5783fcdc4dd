"""The controller's own copies of what a model is judged and served by (issue 38, point 4): a run's model folder is
copied before it is registered, and the first version's validation rows become the model's reference set.

A job may rewrite its own output folder at any time, and the control bucket's lifecycle rule deletes run folders
after `run_retention_days`; Vertex keeps only the serving container, never the artifacts (ModelContainerSpec:
"binaries … copied and stored internally"; the artifacts stay at artifactUri, the user's to keep). So the version
is registered from a copy under model-artifacts/, a prefix no job account may write and the lifecycle rule does not
match (terraform/iam.tf, storage.tf), and the champion's scoring, the data contract and serving all read that copy.
"""

from __future__ import annotations

from datetime import datetime

from functions.cloud.errors import Transient
from functions.cloud.ports import Storage
from functions.ledger.model_charter import Change, Charter, Reference, reference_id
from functions.ledger.model_records import ModelCharters
from functions.settings import Settings
from schemas.rules import split_gs_uri

# The built-in trainer's model folder holds a handful of files; your own code's may hold more, but not a dataset.
MAX_ARTIFACT_OBJECTS = 1000
SUCCESS_MARKER = "_SUCCESS"
# The built-in trainer's sample of its validation rows (trainer/README.md), when it was given no reference set.
REFERENCE_FILE = "reference.parquet"
# A reference set is rows to score, not a dataset to train on: what is copied is bounded.
MAX_REFERENCE_OBJECTS = 100
MAX_REFERENCE_BYTES = 256 * 2**20


class NothingToCopy(ValueError):
    """The run's model folder cannot be copied as a version's artifacts; the message says why."""


def copy_model_folder(gcs: Storage, source: str, destination: str) -> None:
    """Copy every object under `source` to `destination` (server-side), `_SUCCESS` last, so a copy with its marker is
    whole. Idempotent: a copy interrupted is made again over itself."""
    bucket, prefix = split_gs_uri(source)
    to_bucket, to_prefix = split_gs_uri(destination)
    names = []
    for name, _ in gcs.objects_under(bucket, prefix):
        names.append(name)
        if len(names) > MAX_ARTIFACT_OBJECTS:
            raise NothingToCopy(f"{source} holds more than {MAX_ARTIFACT_OBJECTS} objects: not a model folder")
    if not names:
        raise NothingToCopy(f"the run wrote nothing to {source}")
    names.sort(key=lambda n: (n.rsplit("/", 1)[-1] == SUCCESS_MARKER, n))
    for name in names:
        if gcs.copy(bucket, name, to_bucket, to_prefix + name[len(prefix) :]) is None:
            raise Transient(f"gs://{bucket}/{name} vanished while it was copied; copying again")


def reference_from_version(
    gcs: Storage, charters: ModelCharters, charter: Charter, artifact_uri: str, version: str, now: datetime
) -> Charter:
    """The charter with the version's validation rows (its reference.parquet, copied) as the model's reference set,
    or, when the version has none (your own code, a trainer from before issue 38), with none and a note; the caller
    writes it by compare-and-swap."""
    bucket, prefix = split_gs_uri(artifact_uri)
    source = f"gs://{bucket}/{prefix}{REFERENCE_FILE}"
    ref_id = reference_id(charter.model_id, source, version)
    uri = charters.reference_uri(charter.model_id, ref_id)
    to_bucket, to_prefix = split_gs_uri(uri)
    copied = gcs.copy(bucket, prefix + REFERENCE_FILE, to_bucket, to_prefix + REFERENCE_FILE) is not None
    update = charter.model_copy(deep=True)
    update.reference_from_first_version = False
    if copied:
        update.reference = Reference(id=ref_id, uri=uri, source=f"version {version}'s validation rows", time=now)
        message = f"version {version}'s validation rows became the model's reference set"
    else:
        message = (
            f"version {version} wrote no {REFERENCE_FILE}: the model has no reference set, so no later version is "
            f"promoted until its owner sets one (`trainctl models rule {charter.model_id} --reference URI`)"
        )
    changes = {"reference": [None, uri if copied else None]}
    update.record(Change(time=now, by="controller", action="reference", changes=changes, message=message))
    return update


def copy_reference(
    gcs: Storage, charters: ModelCharters, model_id: str, source: str, by: str, now: datetime, settings: Settings
) -> Reference:
    """An owner's reference rows (a folder or a file of data), copied under the control bucket (bounded), so that no
    later write to `source` changes what the model is judged on. NothingToCopy when it holds no data or too much."""
    bucket, prefix = split_gs_uri(source)
    objects = []
    for name, size in gcs.objects_under(bucket, prefix):
        if size > 0 and name.rsplit("/", 1)[-1] not in settings.marker_names:
            objects.append((name, size))
        if len(objects) > MAX_REFERENCE_OBJECTS:
            break
    total = sum(size for _, size in objects)
    if not objects:
        raise NothingToCopy(f"{source} holds no data")
    if len(objects) > MAX_REFERENCE_OBJECTS or total > MAX_REFERENCE_BYTES:
        raise NothingToCopy(
            f"{source} holds more than a reference set may: at most {MAX_REFERENCE_OBJECTS} objects and "
            f"{MAX_REFERENCE_BYTES:,} bytes (rows to score, not a dataset to train on)"
        )
    ref_id = reference_id(model_id, source, by)
    uri = charters.reference_uri(model_id, ref_id)
    to_bucket, to_prefix = split_gs_uri(uri)
    for name, _ in objects:
        relative = name[len(prefix) :].lstrip("/") or name.rsplit("/", 1)[-1]
        if gcs.copy(bucket, name, to_bucket, to_prefix + relative) is None:
            raise Transient(f"gs://{bucket}/{name} vanished while the reference set was copied; copying again")
    return Reference(id=ref_id, uri=uri, source=source, time=now)
