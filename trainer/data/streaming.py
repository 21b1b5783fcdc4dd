"""Training on a share of the data larger than a rank's memory budget (issue 30, point 2): the rank's files are
read in turn, block by block (Parquet row groups, CSV blocks), never whole.

- *Layout* (reading no data but Parquet footers; a CSV file is counted once): the blocks each rank reads — its
  own files' when there are at least as many files as ranks, else every `world`-th block of them all — and
  each file's train/validation split, drawn exactly as for data held in memory (trainer/data/tables.py `_split`), so
  the same rows are validation rows either way.
- *The statistics pass*: one read of every block gives schema.json's description (trainer/data/schema.py
  `fold_summaries`) and the preprocessing (trainer/data/preprocess.py `FitAccumulator`); the validation rows are kept
  (as tensors, with their Arrow rows only for a champion) — the share held in memory is validation_fraction of it.
- *Training*: every epoch the rank's files come in a seeded order, their blocks in turn, cut into windows of at
  most `window_rows` training rows; a window's rows are shuffled with a seed of (seed, epoch, rank, window) and
  served in order, while a background thread reads and converts the next window. The order is a pure function
  of (seed, epoch, rank) and the window size, so the micro-batch a step needs — hence the file and row a resumed
  run restarts at — follows from the step alone: nothing but the step is saved, and a resume is bitwise.
"""

from __future__ import annotations

import math
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import torch

from trainer import logs
from trainer.data.preprocess import FitAccumulator, Preprocessor, _is_numeric, drop_unlabelled, keep_columns
from trainer.data.schema import ColumnType, fold_summaries, local_summaries
from trainer.data.tables import Shard
from trainer.storage.folders import download_to, is_gcs

CSV_BLOCK_BYTES = 16 << 20  # one CSV block: what pyarrow's streaming reader parses at a time
TENSOR_COPIES = 3  # a window as tensors, its shuffled copy while it is made, and the next window being read


@dataclass(frozen=True)
class Block:
    shard: int  # the file's position in the dataset's listing (what its split is seeded with)
    index: int  # row group, or CSV block, within the file
    start: int  # its first row within the file
    rows: int


@dataclass
class StreamedFile:
    """One data file, on a node-local disk (a remote object is copied there once, streaming, never into memory)."""

    shard: int
    path: str
    format: str
    rows: int = 0
    blocks: list[Block] = field(default_factory=list)
    schema: pa.Schema | None = None
    validation: np.ndarray | None = None  # True for each validation row, drawn as trainer/data/tables.py `_split` does

    def read_blocks(self, first: int = 0):
        """(block, table) from block `first` on. A CSV file is parsed from its start (its blocks have no index)."""
        if self.format == "parquet":
            parquet = pq.ParquetFile(self.path)
            for block in self.blocks[first:]:
                yield block, parquet.read_row_group(block.index)
            return
        reader = pa_csv.open_csv(self.path, read_options=pa_csv.ReadOptions(block_size=CSV_BLOCK_BYTES))
        for index, batch in enumerate(reader):
            if index >= first:
                yield self.blocks[index], pa.Table.from_batches([batch])


def open_files(shards: list[tuple[int, Shard]], cache: Path) -> list[StreamedFile]:
    """The files a rank reads, with their blocks and row counts (Parquet: the footer; CSV: one counting read)."""
    files = []
    for shard_index, shard in shards:
        path = shard.uri
        if is_gcs(shard.uri):
            cache.mkdir(parents=True, exist_ok=True)
            local = cache / f"{shard_index:05d}-{Path(shard.uri).name}"
            if not local.exists():
                download_to(shard.uri, local)
            path = str(local)
        file = StreamedFile(shard_index, path, shard.format)
        if shard.format == "parquet":
            meta = pq.ParquetFile(path).metadata
            file.schema = pq.ParquetFile(path).schema_arrow
            sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        else:
            reader = pa_csv.open_csv(path, read_options=pa_csv.ReadOptions(block_size=CSV_BLOCK_BYTES))
            file.schema = reader.schema
            sizes = [batch.num_rows for batch in reader]
        start = 0
        for index, rows in enumerate(sizes):
            file.blocks.append(Block(shard_index, index, start, rows))
            start += rows
        file.rows = start
        files.append(file)
    return files


def validation_mask(rows: int, shard_index: int, seed: int, validation_fraction: float) -> np.ndarray:
    """The rows of a file that are validation rows: trainer/data/tables.py `_split`'s draw, as a mask."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + shard_index)
    order = torch.randperm(rows, generator=generator).numpy()
    mask = np.zeros(rows, dtype=bool)
    mask[order[: round(rows * validation_fraction)]] = True
    return mask


def default_cache() -> Path:
    return Path(tempfile.gettempdir()) / "trainctl-stream"


@dataclass
class StatisticsPass:
    """What the one read of every block gives."""

    summaries: dict[str, dict]  # this rank's summary of each column (schema.json)
    fit: FitAccumulator
    validation: list[pa.Table]  # labelled validation rows, every column
    train_rows: dict[Block, int]  # labelled training rows of each block


def statistics_pass(
    files: list[StreamedFile],
    mine: set[Block],
    types: dict[str, ColumnType],
    accumulator: FitAccumulator,
    target: str,
    features: list[str] | None,
    seed: int,
) -> StatisticsPass:
    parts, validation, train_rows = [], [], {}
    for file in files:
        assert file.validation is not None
        for block, table in file.read_blocks():
            if block not in mine:
                continue
            parts.append(local_summaries(table, types, seed))
            is_validation = file.validation[block.start : block.start + block.rows]
            validation.append(drop_unlabelled(table.filter(pa.array(is_validation)), target))
            train = keep_columns(drop_unlabelled(table.filter(pa.array(~is_validation)), target), target, features)
            accumulator.add(train)
            train_rows[block] = train.num_rows
    return StatisticsPass(fold_summaries(types, parts), accumulator, validation, train_rows)


def numeric_columns(types: dict[str, ColumnType], schemas: list[pa.Schema], features: list[str]) -> list[str]:
    """Feature columns read as numbers: every file that has the column holds numbers (or only nulls) in it, as
    Preprocessor.fit decides from every rank's tables."""
    numeric = []
    for column in features:
        found = [s.field(column).type for s in schemas if column in s.names]
        if all(_is_numeric(t) or pa.types.is_null(t) for t in found):
            numeric.append(column)
    return numeric


@dataclass(frozen=True)
class Window:
    blocks: tuple[Block, ...]
    rows: int  # training rows
    start: int  # its first position in the epoch's stream


class WindowedStream:
    """The training rows of one rank, one window in memory at a time (and the next being read)."""

    def __init__(
        self,
        files: list[StreamedFile],
        train_rows: dict[Block, int],
        prep: Preprocessor,
        target: str,
        features: list[str] | None,
        window_rows: int,
        seed: int,
        rank: int,
        device: torch.device,
    ):
        self.files = {f.shard: f for f in files}
        self.train_rows, self.prep, self.target, self.features = train_rows, prep, target, features
        self.window_rows, self.seed, self.rank, self.device = max(window_rows, 1), seed, rank, device
        self.rows = sum(train_rows.values())
        if self.rows == 0:
            raise ValueError(f"rank {rank} would get no training rows; use fewer ranks or more data")
        self._loaded: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._pending: dict[tuple[int, int], Future] = {}
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-reader")
        self._lock = threading.Lock()
        self._windows: tuple[int, list[Window]] | None = None  # the last epoch's, computed once

    def windows(self, epoch: int) -> list[Window]:
        """The epoch's windows: files in a seeded order, each file's blocks in turn, cut at `window_rows`."""
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) * 4099 + self.rank)
        shards = sorted({b.shard for b in self.train_rows})
        order = [shards[i] for i in torch.randperm(len(shards), generator=generator).tolist()]
        if self._windows is not None and self._windows[0] == epoch:
            return self._windows[1]
        windows: list[Window] = []
        current: list[Block] = []
        rows = start = 0
        for shard in order:
            for block in (b for b in self.files[shard].blocks if b in self.train_rows):
                if current and rows + self.train_rows[block] > self.window_rows:
                    windows.append(Window(tuple(current), rows, start))
                    start, current, rows = start + rows, [], 0
                current.append(block)
                rows += self.train_rows[block]
        if current:
            windows.append(Window(tuple(current), rows, start))
        windows = [w for w in windows if w.rows]
        with self._lock:
            self._windows = (epoch, windows)
        return windows

    def micro_batch(self, epoch: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions [first, first + size) of the epoch's stream; the stream repeats when the rank's rows run out
        (as an epoch in memory repeats its order), so every rank runs the same number of steps."""
        windows = self.windows(epoch)
        xs, ys = [], []
        position = first
        while position < first + size:
            within = position % self.rows
            index = next(i for i, w in enumerate(windows) if w.start <= within < w.start + w.rows)
            window = windows[index]
            take = min(first + size - position, window.start + window.rows - within)
            x, y = self._window(epoch, index, windows)
            offset = within - window.start
            xs.append(x[offset : offset + take])
            ys.append(y[offset : offset + take])
            position += take
        if len(xs) == 1:
            return xs[0], ys[0]
        return torch.cat(xs), torch.cat(ys)

    def position(self, epoch: int, first: int) -> dict:
        """Where stream position `first` of `epoch` lies: the file, its block and the row within the window."""
        windows = self.windows(epoch)
        within = first % self.rows
        index = next(i for i, w in enumerate(windows) if w.start <= within < w.start + w.rows)
        return {"window": index, "file": windows[index].blocks[0].shard, "block": windows[index].blocks[0].index,
                "offset_in_window": within - windows[index].start}  # fmt: skip

    def _window(self, epoch: int, index: int, windows: list[Window]) -> tuple[torch.Tensor, torch.Tensor]:
        key = (epoch, index)
        if key not in self._loaded:
            future = self._pending.pop(key, None)
            self._loaded = {key: future.result() if future else self._load(epoch, index, windows[index])}
            following = (epoch, index + 1) if index + 1 < len(windows) else (epoch + 1, 0)
            if following not in self._pending:
                self._pending = {following: self._reader.submit(self._load_key, *following)}
        return self._loaded[key]

    def _load_key(self, epoch: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._load(epoch, index, self.windows(epoch)[index])

    def _load(self, epoch: int, index: int, window: Window) -> tuple[torch.Tensor, torch.Tensor]:
        """A window's training rows as tensors, in its seeded order."""
        parts = []
        by_file: dict[int, list[Block]] = {}
        for block in window.blocks:
            by_file.setdefault(block.shard, []).append(block)
        for shard, blocks in by_file.items():
            file, wanted = self.files[shard], set(blocks)
            assert file.validation is not None
            for block, table in file.read_blocks(min(b.index for b in blocks)):
                if block in wanted:
                    is_validation = file.validation[block.start : block.start + block.rows]
                    train = drop_unlabelled(table.filter(pa.array(~is_validation)), self.target)
                    parts.append(keep_columns(train, self.target, self.features))
                if block.index >= max(b.index for b in blocks):
                    break
        inputs, targets = self.prep.tensors_of_parts(parts)
        generator = torch.Generator().manual_seed(((self.seed * 1_000_003 + epoch) * 4099 + self.rank) * 65_537 + index)
        order = torch.randperm(len(inputs), generator=generator)
        return inputs[order].to(self.device), targets[order].to(self.device)

    def close(self) -> None:
        self._reader.shutdown(wait=False, cancel_futures=True)


def window_rows_for(budget_bytes: int, prep: Preprocessor) -> int:
    """Training rows per window: the budget over the tensors a window costs (TENSOR_COPIES of a row's inputs and
    target), at least one micro-batch's worth being the caller's concern."""
    row_bytes = 4 * prep.num_features + 8
    return max(1, math.floor(budget_bytes / (TENSOR_COPIES * row_bytes)))


def log_layout(files: list[StreamedFile], mine: set[Block], window_rows: int, budget_bytes: int) -> None:
    logs.log("dataset streamed", files=len(files), blocks=len(mine), rows=sum(b.rows for b in mine),
             window_rows=window_rows, budget_mb=round(budget_bytes / 2**20, 1))  # fmt: skip
