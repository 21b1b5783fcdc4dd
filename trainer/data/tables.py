"""Reading the tabular dataset: CSV or Parquet, one file or a folder of shards, from `gs://…`, `/gcs/…` or a
local path; splitting it into seeded train/validation parts; and deciding which rows each rank owns.

Two ways to divide the data, decided by the number of shards:
- *sharded*: at least as many shards as ranks, so each rank reads only its own shards (`shards[rank::world]`);
- *replicated*: fewer shards than ranks, so every rank holds the whole table. Remote data is then fetched once
  per node by local rank 0 into a node-local folder, and the other local ranks read that copy after a barrier.

The train/validation split is made per shard from the seed and the shard's position, so it depends on the data
and the seed only — not on the world size or on who reads which shard.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import torch
import torch.distributed as dist

from trainer import logs
from trainer.distributed import collectives
from trainer.storage.folders import download_to, is_file, is_gcs, open_folder, read_uri

FORMATS = ("auto", "csv", "parquet")
_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class Shard:
    uri: str
    format: str  # csv | parquet


@dataclass
class RankData:
    """The rows this rank holds, already split."""

    train_parts: list[pa.Table]  # one per shard, so each can be released once converted
    validation: pa.Table
    sharded: bool  # True: each rank holds different rows; False: every rank holds the whole table
    data_format: str = "csv"  # csv | parquet: the first file's (a folder may mix them; that is rare)

    @property
    def train(self) -> pa.Table:
        return concat_tables(self.train_parts)

    @property
    def rows(self) -> pa.Table:
        """Every row this rank holds, both splits: what the dataset's statistics are taken over."""
        return concat_tables([*self.train_parts, self.validation])


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables, promote_options="permissive")


def _format_of(name: str, requested: str) -> str | None:
    if requested != "auto":
        return requested
    return _SUFFIXES.get(Path(name).suffix.lower())


def list_shards(uri: str, data_format: str = "auto") -> list[Shard]:
    """The data files at `uri`: the file itself, or every CSV/Parquet file below the folder (sorted by name;
    markers such as `_SUCCESS` and hidden files are left out)."""
    if is_file(uri):
        file_format = _format_of(uri, data_format)
        if file_format is None:
            raise ValueError(f"cannot tell the format of {uri!r}: name it .csv or .parquet, or pass --format")
        return [Shard(uri, file_format)]
    folder = open_folder(uri)
    shards = []
    for name in folder.list():
        basename = name.rsplit("/", 1)[-1]
        if basename.startswith(("_", ".")):
            continue
        file_format = _format_of(basename, data_format)
        if file_format:
            shards.append(Shard(folder.uri(name), file_format))
    if not shards:
        raise FileNotFoundError(f"no CSV or Parquet files at {uri!r} (looked for *.csv, *.parquet, *.pq)")
    return shards


def read_table(source: bytes | str, file_format: str) -> pa.Table:
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    if file_format == "parquet":
        return pq.read_table(stream)
    return pa_csv.read_csv(stream)


def _read_shard(shard: Shard) -> pa.Table:
    """One shard's table, read from a file so that the file's bytes are never held beside the table they decode
    into (a Parquet file of float columns is as large as its table: held, it raised a rank's loading peak by a
    shard's size). An object in Cloud Storage is downloaded to a temporary file first."""
    if not is_gcs(shard.uri):
        return read_table(shard.uri, shard.format)
    with tempfile.TemporaryDirectory(prefix="trainctl-shard-") as folder:
        local = Path(folder) / Path(shard.uri).name
        download_to(shard.uri, local)
        return read_table(str(local), shard.format)


def _is_remote(uri: str) -> bool:
    return is_gcs(uri) or uri.startswith("/gcs/")


def _fetch_once_per_node(shards: list[Shard]) -> list[Shard]:
    """Copy remote shards to a node-local folder, by local rank 0 only; everyone else waits at a barrier."""
    if not any(_is_remote(s.uri) for s in shards):
        return shards
    run = os.environ.get("TORCHELASTIC_RUN_ID", f"pid{os.getppid()}")
    node = os.environ.get("GROUP_RANK", "0")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    cache = Path(tempfile.gettempdir()) / "trainctl-data" / f"{run}-node{node}-attempt{attempt}"
    local = [Shard(str(cache / f"{i:05d}-{Path(s.uri).name}"), s.format) for i, s in enumerate(shards)]
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        cache.mkdir(parents=True, exist_ok=True)
        for remote, copy in zip(shards, local, strict=True):
            Path(copy.uri).write_bytes(read_uri(remote.uri))
        logs.log("dataset fetched for this node", shards=len(shards), folder=str(cache))
    collectives.wait_for_all()
    return local


def _remove_node_copy(shards: list[Shard]) -> None:
    collectives.wait_for_all()  # every local rank has read its copy
    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and shards:
        shutil.rmtree(Path(shards[0].uri).parent, ignore_errors=True)


def _split(table: pa.Table, shard_index: int, seed: int, validation_fraction: float) -> tuple[pa.Table, pa.Table]:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + shard_index)
    order = torch.randperm(table.num_rows, generator=generator).numpy()
    n_val = round(table.num_rows * validation_fraction)
    return table.take(np.sort(order[n_val:])), table.take(np.sort(order[:n_val]))


def load_rank_data(uri: str, data_format: str, seed: int, validation_fraction: float) -> RankData:
    rank, world = dist.get_rank(), dist.get_world_size()
    shards = list_shards(uri, data_format)
    sharded = len(shards) >= world
    # Each shard is split as soon as it is read, so only one shard's unsplit table is held at a time.
    if sharded:
        mine = list(enumerate(shards))[rank::world]
        parts = [_split(_read_shard(s), i, seed, validation_fraction) for i, s in mine]
    else:
        local = _fetch_once_per_node(shards)
        parts = [_split(read_table(s.uri, s.format), i, seed, validation_fraction) for i, s in enumerate(local)]
        if local is not shards:
            _remove_node_copy(local)
    train_parts = [p[0] for p in parts]
    validation = concat_tables([p[1] for p in parts])
    logs.log(
        "dataset loaded",
        uri=uri,
        shards=len(shards),
        mode="sharded" if sharded else "replicated",
        train_rows=sum(p.num_rows for p in train_parts),
        validation_rows=validation.num_rows,
    )
    del parts
    return RankData(train_parts=train_parts, validation=validation, sharded=sharded, data_format=shards[0].format)
