"""The data check at admission (issue 27, point 2): before any claim, a request whose model has a champion with a
recorded schema has its new dataset's header compared with that schema — bad data is `rejected` (reason `data`)
and never reaches a GPU.

Only the header is read, with bounded ranged reads: for CSV the first bytes of the first data file (its header line
and a few rows, to see each column's type), for Parquet its footer. The first data file is the one the trainer reads
first (trainer/data/tables.py list_shards: every CSV or Parquet object below the folder, by name, leaving out names that
start with `_` or `.`).

Whatever cannot be read here — a champion without a schema.json (trained before it was written, or by a custom
image that writes none), one that is not the contract's, a header longer than the bound, a footer this parser
cannot follow — leaves the request unchecked, never rejected: the check stops bad data, it must not stop good
data. A file that is certainly not what its format says (a .parquet that does not end in PAR1) is rejected: the
trainer could not read it either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from functions import logs
from functions.cloud import deadline
from functions.cloud.gcs import StorageError, TooLarge
from functions.cloud.ports import Storage
from functions.data.contract import MAX_SCHEMA_BYTES, SCHEMA_FILE, compare_header, parse_schema
from functions.data.header import Column, HeaderUnreadable, csv_columns
from functions.data.parquet_footer import MAGIC, TAIL_BYTES, FooterUnreadable, footer_columns, footer_length
from functions.untrusted.job_outputs import Unreadable, clip
from schemas.request import TrainingJobRequest
from schemas.rules import split_gs_uri

# A CSV header line and the first rows after it; a Parquet file's last bytes (footer length, magic and, for most
# files, the whole footer), and at most this much of a longer footer's beginning, where the schema is.
CSV_HEAD_BYTES = 64 * 1024
PARQUET_TAIL_BYTES = 64 * 1024
PARQUET_FOOTER_BYTES = 1024 * 1024
_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
MAX_NEW_COLUMNS = 100
# What typing a CSV head's columns, or reading the schema of a Parquet footer, may take at most: 64 KiB read in one
# pass each, values over MAX_VALUE_CHARS skipped (functions/data/header.py), or a footer of at most 1 MiB read once
# (parquet_footer.py: every length bounded by the bytes left), is well under it.
TYPING_SECONDS = 1.0


# Names that say a column is an ID: trainer/data/column_flags.py's ID_NAME (the trainer, which reads the values, judges
# by them too; tests/unit/test_admission_id_features.py keeps the two patterns the same: neither package may import
# the other). A name is all admission knows of a feature without reading the data (issue 44, point 2).
ID_NAME = re.compile(r"(?i:^(id|uuid|guid|key|index|row|rowid)$|[_\-. ]id$|uuid|guid)|[a-z](Id|ID)$")


def id_named_features(request: TrainingJobRequest) -> list[str]:
    """The request's chosen features (`dataset.features`) named like an ID: accepted, with a warning."""
    return [name for name in request.dataset.features or [] if ID_NAME.search(name)]


@dataclass(frozen=True)
class DataCheck:
    """The check's outcome: `errors` (one per column; [] when the header keeps the contract), the columns the
    champion never saw, and what was compared — or why nothing was — in words."""

    errors: list[str] = field(default_factory=list)
    new_columns: list[str] = field(default_factory=list)
    summary: str = ""
    checked: bool = False


def check_dataset(
    gcs: Storage, control_bucket: str, request: TrainingJobRequest, champion_uri: str, champion_version: str | None
) -> DataCheck:
    """The request's dataset against the schema.json in the champion's artifact folder `champion_uri`."""
    schema_uri = champion_uri.rstrip("/") + "/" + SCHEMA_FILE
    champion = f"the champion (version {champion_version})" if champion_version else "the champion"
    if not schema_uri.startswith(f"gs://{control_bucket}/"):
        # Built-in trainer runs write in the control bucket; the intake functions read no operator output bucket.
        return _unchecked(f"{champion}'s artifacts are outside the control bucket ({champion_uri})")
    if not request.dataset.uri.startswith("gs://"):
        return _unchecked(f"the dataset {request.dataset.uri} is not in Cloud Storage")
    bucket, name = split_gs_uri(schema_uri)
    try:
        found = gcs.read(bucket, name, max_bytes=MAX_SCHEMA_BYTES)
        if found is None:
            return _unchecked(f"{champion} has no {SCHEMA_FILE} (it was trained before trainctl recorded one)")
        schema = parse_schema(found[0])
    except TooLarge:
        return _unchecked(f"{schema_uri} is larger than {MAX_SCHEMA_BYTES} bytes")
    except Unreadable as exc:
        return _unchecked(f"{schema_uri} cannot be used: {exc}")
    except StorageError as exc:
        return _unchecked(f"{schema_uri} cannot be read (Cloud Storage answered {exc.status})")
    found_header = _first_header(gcs, request)
    if isinstance(found_header, DataCheck):
        return found_header
    uri, header = found_header
    result = compare_header(schema, header, request.dataset.target, request.dataset.features)
    summary = f"the header of {uri} ({len(header)} columns) against {champion}'s schema ({len(schema.columns)} columns)"
    logs.info(f"data check: {summary}", errors=len(result.errors), new_columns=len(result.new_columns))
    return DataCheck(result.errors, result.new_columns[:MAX_NEW_COLUMNS], summary, checked=True)


def check_columns(gcs: Storage, request: TrainingJobRequest) -> DataCheck:
    """Without a champion to compare with: the target and the named features are columns of the dataset's first
    file, so a run that could only fail a minute into its job ("exited with a non-zero status") is refused first,
    naming the column. Whatever cannot be read here is left to the trainer, as the champion's check leaves it."""
    if not request.dataset.uri.startswith("gs://"):
        return _unchecked(f"the dataset {request.dataset.uri} is not in Cloud Storage")
    found_header = _first_header(gcs, request)
    if isinstance(found_header, DataCheck):
        return found_header
    uri, header = found_header
    names = {column.name for column in header}
    wanted = [(request.dataset.target, "dataset.target", "the column to predict")]
    wanted += [(name, "dataset.features", "a feature") for name in request.dataset.features or ()]
    shown = ", ".join(repr(clip(column.name, 40)) for column in header[:12]) + (", …" if len(header) > 12 else "")
    errors = [
        f"{field}: column {clip(name, 80)!r} ({why}) is not in the header of {uri} (its columns: {shown})"
        for name, field, why in wanted
        if name not in names
    ]
    summary = f"the header of {uri} ({len(header)} columns) for the target and features the request names"
    return DataCheck(errors[:MAX_NEW_COLUMNS], summary=summary, checked=True)


def _first_header(gcs: Storage, request: TrainingJobRequest) -> tuple[str, list[Column]] | DataCheck:
    """The first data file's URI and header, or the DataCheck saying why none was read (or its format is wrong)."""
    try:
        shard = first_data_file(request, gcs.objects_under(*_listing(request.dataset.uri)))
        if shard is None:
            return _unchecked(f"{request.dataset.uri} holds no CSV or Parquet file to read a header from")
        path, size, file_format = shard
        uri = f"gs://{split_gs_uri(request.dataset.uri)[0]}/{path}"
        return uri, _read_header(gcs, uri, size, file_format)
    except _NotItsFormat as exc:
        return DataCheck([f"dataset: {exc}"], summary=str(exc), checked=True)
    except (HeaderUnreadable, FooterUnreadable) as exc:
        return _unchecked(f"the header of {request.dataset.uri}'s first data file cannot be read here: {exc}")
    except StorageError as exc:
        # The job's service account may read what the functions' cannot: the trainer will say.
        return _unchecked(f"the dataset {request.dataset.uri} cannot be read (Cloud Storage answered {exc.status})")


def _in_time(seconds: float, what: str) -> None:
    """The check works inside the handler's deadline (functions/cloud/deadline.py), as its reads do: when `seconds`
    no longer fit it raises DeadlineReached (Transient) before any claim, and the redelivery checks again — rather
    than the function being stopped mid-way by its timeout while the event is redelivered beside it."""
    if not deadline.allows(seconds):
        raise deadline.DeadlineReached(f"the handler's deadline came before {what}; the redelivery checks the data")


def _unchecked(why: str) -> DataCheck:
    logs.info(f"the dataset's header is not checked: {why}")
    return DataCheck(summary=f"not checked: {why}")


def _listing(uri: str) -> tuple[str, str]:
    """(bucket, prefix) to list the dataset's objects: a folder's, or the one object a file URI names."""
    return split_gs_uri(uri)


def first_data_file(request: TrainingJobRequest, objects: Iterable[tuple[str, int]]) -> tuple[str, int, str] | None:
    """(name, size, format) of the file the trainer reads first, from the listing under the dataset's URI: the
    object the URI names when there is one, else the first CSV or Parquet object below it as a folder (its format
    from its suffix, or the request's format), leaving out markers and hidden files; None when there is none."""
    _, prefix = split_gs_uri(request.dataset.uri)
    requested = request.dataset.format
    folder = prefix if prefix.endswith("/") or not prefix else prefix + "/"
    for name, size in objects:
        if name == prefix and not prefix.endswith("/"):
            file_format = requested if requested != "auto" else _suffix_format(name)
            return (name, size, file_format) if file_format else None
        if (file_format := data_format_below(folder, name, size, requested)) is not None:
            return name, size, file_format
    return None


def data_format_below(folder: str, name: str, size: int, requested: str) -> str | None:
    """The format of an object below the dataset's folder that the trainer reads (trainer/data/tables.py
    list_shards): a CSV or Parquet object (by its suffix, or the request's format), not empty, not a marker nor a
    hidden file; None for any other object."""
    if not name.startswith(folder) or name.endswith("/"):
        return None
    basename = name.rsplit("/", 1)[-1]
    if basename.startswith(("_", ".")) or size == 0:
        return None
    return requested if requested != "auto" else _suffix_format(basename)


def _suffix_format(name: str) -> str | None:
    dot = name.rfind(".")
    return _SUFFIXES.get(name[dot:].lower()) if dot >= 0 else None


class _NotItsFormat(ValueError):
    """The file is certainly not in the format it is read as."""


def _read_header(gcs: Storage, uri: str, size: int, file_format: str) -> list[Column]:
    bucket, name = split_gs_uri(uri)
    if file_format == "csv":
        head = gcs.read_range(bucket, name, 0, min(size, CSV_HEAD_BYTES)) or b""
        _in_time(TYPING_SECONDS, f"typing the columns of {uri}")
        return csv_columns(head, whole=size <= CSV_HEAD_BYTES, pace=lambda: _in_time(0.0, f"typing {uri}'s columns"))
    tail_bytes = min(size, PARQUET_TAIL_BYTES)
    tail = gcs.read_range(bucket, name, size - tail_bytes, tail_bytes) or b""
    if len(tail) < TAIL_BYTES or tail[-4:] not in (MAGIC, b"PARE"):
        raise _NotItsFormat(f"{uri} is not a Parquet file: it does not end in {MAGIC.decode()}")
    length = footer_length(tail)
    if length + TAIL_BYTES > size:
        raise _NotItsFormat(f"{uri} is not a Parquet file: its footer would be {length} bytes, more than the file")
    if length + TAIL_BYTES <= len(tail):
        footer = tail[-TAIL_BYTES - length : -TAIL_BYTES]
    else:
        start = size - TAIL_BYTES - length
        footer = gcs.read_range(bucket, name, start, min(length, PARQUET_FOOTER_BYTES)) or b""
    _in_time(TYPING_SECONDS, f"reading the schema in {uri}'s footer")
    return footer_columns(footer)
