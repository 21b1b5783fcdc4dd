"""`trainctl init DATA`: a request (or a `_SUCCESS` marker's content) for the built-in tabular trainer, proposed from a
sample of your data — the target, the features, and the columns left out because they look like an ID or a constant
(trainer/data/column_flags.py) — written with comments for a person to edit (issue 44, point 2).

Only a bounded sample is read, never a whole large file: the first SAMPLE_BYTES of a CSV (its header and the rows
that fit, at most SAMPLE_ROWS), the first SAMPLE_ROWS rows of a Parquet file. DATA is a CSV or Parquet file, or a
folder holding them (the first by name, as the trainer reads them: trainer/data/tables.py), on this disk or gs://."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.problems import Problem
from trainer.data.column_flags import flag_sample

SAMPLE_ROWS = 5000
SAMPLE_BYTES = 4 << 20
# A gs:// Parquet file is read whole (its rows are in row groups that only its footer locates): at most this large.
MAX_REMOTE_PARQUET_BYTES = 64 << 20
TARGET_NAMES = ("target", "label", "y", "class", "outcome")
_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
EXIT_USAGE, EXIT_NOT_FOUND, EXIT_REFUSED = 2, 3, 4


@dataclass
class Sample:
    source: str  # the file read
    data_format: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def values(self, index: int) -> list[Any]:
        return [row[index] if index < len(row) else None for row in self.rows]


@dataclass(frozen=True)
class Proposal:
    target: str
    target_reason: str
    features: list[str]
    left_out: dict[str, str]  # column → why


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "init", help="propose a request (or marker) from a sample of a CSV or Parquet file or folder, to edit"
    )
    cmd.add_argument("data", metavar="DATA", help="a CSV or Parquet file, or a folder of them (local or gs://)")
    cmd.add_argument("--target", help="the label column (default: one named target, label, y…, else the last)")
    cmd.add_argument(
        "--marker", action="store_true", help="write a `_SUCCESS` marker's content (overrides of the trigger rule)"
    )
    cmd.add_argument("--uri", help="the gs:// folder the data will be in (a local DATA's request needs one)")
    cmd.add_argument("--out", type=Path, metavar="FILE", help="write here instead of standard output")
    cmd.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    cmd.set_defaults(run=run_init)


def run_init(args: argparse.Namespace) -> int:
    sample = read_sample(args.data)
    proposal = propose(sample, args.target)
    text = marker_text(sample, proposal) if args.marker else request_text(sample, proposal, _dataset_uri(args))
    if args.out is None:
        sys.stdout.write(text)
    else:
        if args.out.exists() and not args.force:
            raise Problem(f"{args.out} exists: pass --force to overwrite it, or name another --out", EXIT_REFUSED)
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    for column, why in proposal.left_out.items():
        print(f"left out {column}: {why}", file=sys.stderr)
    return 0


def propose(sample: Sample, target: str | None) -> Proposal:
    """The target (`target`, else a conventional name, else the last column) and every other column as a feature
    but those flagged as an ID or a constant."""
    if target is not None:
        if target not in sample.columns:
            raise Problem(f"--target {target!r} is not a column of {sample.source}; columns: "
                          f"{', '.join(sample.columns)}", EXIT_USAGE)  # fmt: skip
        reason = "named by --target"
    else:
        by_name = {c.lower(): c for c in sample.columns}
        named = next((by_name[n] for n in TARGET_NAMES if n in by_name), None)
        target = named or sample.columns[-1]
        reason = "its name" if named else "the last column"
    if not sample.rows:
        raise Problem(f"{sample.source}: no rows after its header: nothing to learn from or to judge columns by",
                      EXIT_USAGE)  # fmt: skip
    features, left_out = [], {}
    for index, column in enumerate(sample.columns):
        if column == target:
            continue
        if why := flag_sample(column, sample.values(index)):
            left_out[column] = why
        else:
            features.append(column)
    if not features:
        flagged = "; ".join(f"{c}: {w}" for c, w in left_out.items()) or "it has one column"
        raise Problem(f"{sample.source}: no column but {target!r} is usable as a feature ({flagged})", EXIT_USAGE)
    return Proposal(target, reason, features, left_out)


def request_text(sample: Sample, proposal: Proposal, uri: str) -> str:
    stem = _slug(Path(sample.source.rstrip("/")).stem)
    lines = [
        f"# A training request for the built-in tabular trainer, proposed by `trainctl init` from {len(sample.rows)}",
        f"# sampled rows of {_comment(sample.source)}. Edit it, check it with `trainctl validate FILE`, send it with",
        "# `trainctl submit FILE`.",
        "api_version: trainctl/v1",
        f"request_id: {stem}-1  # a new id for every run: the same id never starts a second job",
        "dataset:",
        f"  uri: {json.dumps(uri)}  # the gs:// folder (or file) the trainer reads: your data must be there",
        *_dataset_lines(sample, proposal),
        "trainer:",
        "  builtin: tabular",
        "  hyperparameters:",
        "    epochs: 20  # early stopping keeps the best epoch",
        "resources:",
        "  machine_type: g2-standard-24  # 2 × L4",
        "scheduling:",
        "  timeout: 1h",
    ]
    return "\n".join(lines) + "\n"


def marker_text(sample: Sample, proposal: Proposal) -> str:
    lines = [
        f"# A `_SUCCESS` marker's content, proposed by `trainctl init` from {len(sample.rows)} sampled rows of",
        f"# {_comment(sample.source)}. Upload your data to a folder of the data bucket, then this file as",
        "# `_SUCCESS` beside it, last: the folder's trigger rule supplies the rest of the request (trainer,",
        "# resources), and the folder is the dataset. Markers may set `dataset` under every rule.",
        "dataset:",
        *_dataset_lines(sample, proposal),
    ]
    return "\n".join(lines) + "\n"


def _dataset_lines(sample: Sample, proposal: Proposal) -> list[str]:
    lines = [f"  target: {json.dumps(proposal.target)}  # the label column ({proposal.target_reason})"]
    if proposal.left_out:
        lines.append("  # Left out of the features (add one back to the list if it is a real feature):")
        lines += [f"  #   {_comment(c)}: {_comment(why)}" for c, why in proposal.left_out.items()]
    lines.append("  features:  # the columns the model learns from; without this list, every column but the target")
    lines += [f"    - {json.dumps(c)}" for c in proposal.features]
    if sample.data_format != "csv":
        lines.append(f"  format: {sample.data_format}")
    return lines


def _dataset_uri(args: argparse.Namespace) -> str:
    if args.uri:
        if not args.uri.startswith("gs://"):
            raise Problem(f"--uri {args.uri!r}: a gs:// folder or file, e.g. gs://my-data-bucket/churn/", EXIT_USAGE)
        return str(args.uri)
    if args.data.startswith("gs://"):
        return str(args.data)
    return f"gs://{data_bucket()}/{_slug(Path(Path(args.data.rstrip('/')).name).stem)}/"


def data_bucket() -> str:
    """Where a local DATA will be uploaded, for the request's uri: the running local stack's data bucket, the
    deployment's (TRAINCTL_DATA_BUCKET, or the first allowed data bucket), else a placeholder to edit."""
    from functions.settings import SettingsError
    from local.stack_state import running_stack
    from trainctl.context import cli_settings

    if bucket := os.environ.get("TRAINCTL_DATA_BUCKET"):
        return bucket
    stack = running_stack()
    if stack is not None and stack.names.get("data_bucket"):
        return stack.names["data_bucket"]
    try:
        buckets = cli_settings(offline=True).allowed_data_buckets
    except SettingsError:  # a project's settings half set: the placeholder
        buckets = ()
    return buckets[0] if buckets else "my-data-bucket"


def read_sample(data: str) -> Sample:
    if data.startswith("gs://"):
        return _remote_sample(data)
    path = Path(data)
    if not path.exists():
        raise Problem(f"{data}: no such file or folder", EXIT_NOT_FOUND)
    file = path if path.is_file() else _first_data_file(path)
    file_format = _SUFFIXES.get(file.suffix.lower())
    if file_format is None:
        raise Problem(f"{file}: not a .csv or .parquet file", EXIT_USAGE)
    if file_format == "csv":
        with file.open("rb") as stream:
            head = stream.read(SAMPLE_BYTES + 1)
        return csv_sample(str(file), head[:SAMPLE_BYTES], whole=len(head) <= SAMPLE_BYTES)
    return _parquet_sample(str(file), file)


def _first_data_file(folder: Path) -> Path:
    for candidate in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = candidate.relative_to(folder).parts
        if any(part.startswith(("_", ".")) for part in relative) or candidate.stat().st_size == 0:
            continue
        if candidate.suffix.lower() in _SUFFIXES:
            return candidate
    raise Problem(f"{folder}: no .csv or .parquet file in it", EXIT_NOT_FOUND)


def csv_sample(source: str, head: bytes, whole: bool) -> Sample:
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if not whole:  # the last line may be cut short
        text = text[: text.rfind("\n") + 1]
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    except csv.Error as exc:
        raise Problem(f"{source}: not CSV that the trainer can read: {exc}", EXIT_USAGE) from None
    if not rows:
        raise Problem(f"{source}: no header line", EXIT_USAGE)
    return Sample(source, "csv", rows[0], rows[1 : 1 + SAMPLE_ROWS])


def _parquet_sample(source: str, file: Any) -> Sample:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise Problem(
            "reading Parquet needs pyarrow, which trainctl's `trainer` extra installs (`uv tool install '.[trainer]'`"
            " or `pipx install '.[trainer]'`): install that, or give a CSV file"
        ) from None
    try:
        parquet = pq.ParquetFile(file)
        batch = next(parquet.iter_batches(batch_size=SAMPLE_ROWS), None)
    except Exception as exc:  # pyarrow's errors are many; all mean the same here
        raise Problem(f"{source}: not a Parquet file the trainer can read: {exc}", EXIT_USAGE) from None
    columns = parquet.schema_arrow.names
    if batch is None:
        return Sample(source, "parquet", columns)
    values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    return Sample(source, "parquet", columns, [list(row) for row in zip(*values, strict=True)])


def _remote_sample(uri: str) -> Sample:
    from functions.cloud.gcs import Gcs
    from functions.data.admission import data_format_below
    from schemas.rules import split_gs_uri
    from trainctl.context import cli_settings, refuse_a_stopped_stack

    # Only the project is needed: a deployment's other settings need not be set to read its data. Without one, the
    # running local stack's (cli_settings points this process at its emulators), or a Problem saying how to get one.
    if project := os.environ.get("TRAINCTL_PROJECT"):
        refuse_a_stopped_stack()
    gcs = Gcs(project or cli_settings().project)
    bucket, prefix = split_gs_uri(uri)
    folder = prefix if prefix.endswith("/") or not prefix else prefix + "/"
    chosen = None
    for name, size in gcs.objects_under(bucket, prefix):
        if name == prefix and not prefix.endswith("/"):
            chosen = (name, size, _SUFFIXES.get(Path(name).suffix.lower()))
            break
        if (file_format := data_format_below(folder, name, size, "auto")) is not None:
            chosen = (name, size, file_format)
            break
    if chosen is None or chosen[2] is None:
        raise Problem(f"{uri}: no .csv or .parquet object there", EXIT_NOT_FOUND)
    name, size, file_format = chosen
    source = f"gs://{bucket}/{name}"
    if file_format == "csv":
        head = gcs.read_range(bucket, name, 0, min(size, SAMPLE_BYTES)) or b""
        return csv_sample(source, head, whole=size <= SAMPLE_BYTES)
    if size > MAX_REMOTE_PARQUET_BYTES:
        raise Problem(f"{source} is {size >> 20} MiB: copy one smaller Parquet file (or its first rows) to this "
                      "disk and run `trainctl init` on that", EXIT_USAGE)  # fmt: skip
    return _parquet_sample(source, io.BytesIO(gcs.read_range(bucket, name, 0, size) or b""))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")[:100] or "dataset"


def _comment(text: str) -> str:
    """Text safe inside a YAML comment: one line."""
    return " ".join(str(text).split())[:200]
