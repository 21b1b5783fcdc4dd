"""A model's reference set (issue 38): rows the challenger does not choose, on which it and the champion are both
scored (trainer/judging/evidence.py).

- Reading one (`--reference-data`, a file or folder read like `--data`): rank 0 alone reads it — a reference set
  is small — within bounds (MAX_REFERENCE_BYTES stored, MAX_REFERENCE_ROWS rows, a Parquet file's decoded size
  from its footer before it is decoded), keeps its labelled rows, and tells every rank whether it could: a
  reference set that cannot be used stops every rank together before training (`ReferenceUnusable`, reason
  `data`), since the evidence the controller promotes on could not be made.
- Making one (`--write-reference-rows`): a seeded sample of at most SAMPLE_ROWS of the run's labelled validation
  rows with every column, gathered on rank 0 at set-up, which writes it as `reference.parquet` beside the model.
  Each rank gives its share in proportion to its rows, so the sample is spread over every rank's data.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch.distributed as dist

from trainer import logs
from trainer.data.tables import concat_tables, list_shards, read_table
from trainer.distributed import collectives
from trainer.outputs.model_folder import RunRefused
from trainer.storage.folders import open_folder

MAX_REFERENCE_ROWS = 100_000
MAX_REFERENCE_BYTES = 256 << 20  # stored; a Parquet file's decoded size is bounded by MAX_DECODED_BYTES
MAX_DECODED_BYTES = 1 << 30
SAMPLE_ROWS = 20_000
SAMPLE_SEED = 0  # fixed, like the bootstrap's: not a setting of the run


class ReferenceUnusable(RunRefused):
    """The reference set cannot be read or holds no usable rows: the run stops before training."""

    reason = "data"


def read_reference_set(uri: str, target: str) -> pa.Table:
    """The labelled rows of the reference set at `uri`, every column; raises ValueError beyond the bounds."""
    shards = list_shards(uri, "auto")
    tables, stored, rows = [], 0, 0
    for shard in shards:
        parent, _, name = shard.uri.rpartition("/")
        try:
            data = open_folder(parent).read_at_most(name, MAX_REFERENCE_BYTES - stored)
        except ValueError:
            too_large = f"its files hold more than {MAX_REFERENCE_BYTES:,} bytes (a reference set is a sample)"
            raise ValueError(too_large) from None
        stored += len(data)
        if shard.format == "parquet":
            _check_footer(data, shard.uri, MAX_REFERENCE_ROWS - rows)
        tables.append(read_table(data, shard.format))
        rows += tables[-1].num_rows
        if rows > MAX_REFERENCE_ROWS:
            raise ValueError(f"it holds more than {MAX_REFERENCE_ROWS:,} rows (a reference set is a sample)")
    table = concat_tables(tables)
    if target not in table.column_names:
        raise ValueError(f"it has no column {target!r} (the target); its columns are {table.column_names[:20]}")
    labelled = pc.is_valid(table[target])
    if pa.types.is_floating(table[target].type):
        labelled = pc.and_(labelled, pc.invert(pc.is_nan(table[target])))
    table = table.filter(labelled)
    if not table.num_rows:
        raise ValueError(f"it holds no rows with a value of {target!r}")
    return table


def _check_footer(data: bytes, source: str, rows_left: int) -> None:
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    decoded = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    if metadata.num_rows > rows_left:
        raise ValueError(f"it holds more than {MAX_REFERENCE_ROWS:,} rows (a reference set is a sample)")
    if decoded > MAX_DECODED_BYTES:
        raise ValueError(f"{source} decodes to {decoded:,} bytes, more than the {MAX_DECODED_BYTES:,} accepted")


def reference_on_rank_zero(uri: str, target: str) -> pa.Table | None:
    """Every rank calls this: rank 0 gets the reference rows, the others None; all raise ReferenceUnusable
    together when rank 0 could not use them."""
    table, error = None, None
    if dist.get_rank() == 0:
        try:
            table = read_reference_set(uri, target)
            logs.log("reference set read", uri=uri, rows=table.num_rows, columns=table.num_columns)
        except Exception as e:
            error = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
    error = collectives.from_rank_zero(error)
    if error is not None:
        raise ReferenceUnusable(f"--reference-data {uri} cannot be used: {error}; the run stopped before training")
    return table


def validation_sample(rows: pa.Table, sample_rows: int = SAMPLE_ROWS) -> pa.Table | None:
    """Every rank calls this with its labelled validation rows (every column); rank 0 gets a seeded sample of at
    most `sample_rows` of all ranks' rows, in rank order, the others None."""
    total = collectives.sum_across_ranks(rows.num_rows)
    share = rows.num_rows if total <= sample_rows else sample_rows * rows.num_rows // total
    picked = np.sort(np.random.default_rng(SAMPLE_SEED).choice(rows.num_rows, share, replace=False))
    parts = collectives.gather_objects(rows.take(picked))
    return concat_tables(parts) if dist.get_rank() == 0 else None


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()
