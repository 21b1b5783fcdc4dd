"""Streaming a rank's share that does not fit its memory budget (issue 30, point 2): the statistics pass gives the
statistics of the rows in memory, the windows visit every training row once in a seeded order, a resume lands on
the same file and row, and a run under a small budget matches the run in memory."""

from __future__ import annotations

import json
import shutil
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from trainer_runs import assert_bitwise_equal, output_dirs, process_env, run, signal_table

from trainer.data import memory_budget, streaming
from trainer.data.preprocess import Combine, FitAccumulator, Preprocessor, drop_unlabelled
from trainer.data.schema import describe, description_of, merge_types
from trainer.data.streaming import WindowedStream, numeric_columns
from trainer.data.tables import Shard, _split, concat_tables

LOCAL = Combine(across_ranks=False)
SEED, VALIDATION = 3, 0.2


def table_with_gaps(rows: int) -> pa.Table:
    table = signal_table(rows)
    x0 = table["x0"].to_pylist()
    x0[::13] = [None] * len(x0[::13])  # missing numbers
    y = table["y"].to_pylist()
    y[::17] = [None] * len(y[::17])  # unlabelled rows
    return table.set_column(0, "x0", pa.array(x0)).set_column(table.num_columns - 1, "y", pa.array(y))


def write_files(table: pa.Table, folder, files: int, row_group_size: int) -> list[tuple[int, Shard]]:
    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for i, part in enumerate(np.array_split(np.arange(table.num_rows), files)):
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(table.take(part), path, row_group_size=row_group_size)
        shards.append((i, Shard(str(path), "parquet")))
    return shards


def streamed(shards, target="y"):
    files = streaming.open_files(shards, streaming.default_cache())
    for file in files:
        file.validation = streaming.validation_mask(file.rows, file.shard, SEED, VALIDATION)
    mine = {b for f in files for b in f.blocks}
    schemas = [f.schema for f in files]
    types = merge_types(schemas)
    features = [c for c in types if c != target]
    accumulator = FitAccumulator(target, features, numeric_columns(types, schemas, features), pa.float64())
    found = streaming.statistics_pass(files, mine, types, accumulator, target, None, SEED)
    return files, mine, types, found


def test_the_streaming_pass_gives_the_statistics_and_validation_rows_of_the_rows_in_memory(tmp_path):
    """Issue 30, point 2: preprocessing and schema.json statistics from one pass over row groups equal those taken
    from the same rows in memory (floating-point rounding aside), and the validation rows are the same rows."""
    table = table_with_gaps(3000)
    shards = write_files(table, tmp_path / "data", 3, row_group_size=250)
    _, _, types, found = streamed(shards)

    in_memory = [_split(pq.read_table(s.uri), i, SEED, VALIDATION) for i, s in shards]
    train = drop_unlabelled(concat_tables([p[0] for p in in_memory]), "y")
    validation = drop_unlabelled(concat_tables([p[1] for p in in_memory]), "y")
    expected = Preprocessor.fit(train, "y", "auto", LOCAL)
    got = found.fit.finish("auto", LOCAL)
    assert (got.task, got.numeric, got.categories, got.classes) == (
        expected.task, expected.numeric, expected.categories, expected.classes)  # fmt: skip
    assert got.means == pytest.approx(expected.means, rel=1e-12, abs=1e-12)
    assert got.stds == pytest.approx(expected.stds, rel=1e-12)
    assert (got.target_mean, got.target_std) == pytest.approx((expected.target_mean, expected.target_std), rel=1e-12)
    assert sum(found.train_rows.values()) == train.num_rows
    assert concat_tables(found.validation).equals(validation)

    rows = concat_tables([*[p[0] for p in in_memory], *[p[1] for p in in_memory]])
    whole = describe(rows, "y", None, "parquet", LOCAL, SEED).columns
    folded = description_of(table.num_rows, types, found.summaries, "y", None, "parquet", LOCAL).columns
    for a, b in zip(whole, folded, strict=True):
        assert (a["name"], a["type"], a["missing_rate"]) == (b["name"], b["type"], b["missing_rate"])
        if a["type"] == "number":
            assert b["stats"]["mean"] == pytest.approx(a["stats"]["mean"], rel=1e-9, abs=1e-12)
            assert b["stats"]["std"] == pytest.approx(a["stats"]["std"], rel=1e-9)
            assert (b["stats"]["min"], b["stats"]["max"]) == (a["stats"]["min"], a["stats"]["max"])
            spread = a["stats"]["quantiles"]["0.99"] - a["stats"]["quantiles"]["0.01"]
            for q, value in a["stats"]["quantiles"].items():  # a re-drawn sketch: within a fraction of the spread
                assert abs(b["stats"]["quantiles"][q] - value) < 0.02 * spread
        else:
            assert b["stats"] == a["stats"]


def row_ids(stream: WindowedStream, prep: Preprocessor, epoch: int, first: int, size: int) -> list[int]:
    _, y = stream.micro_batch(epoch, first, size)
    return [round(v) for v in (y.double() * prep.target_std + prep.target_mean).tolist()]


def test_windows_visit_every_training_row_once_in_a_seeded_order_and_a_resume_reads_the_same_rows(tmp_path):
    """Issue 30, point 2: an epoch's stream is every training row once (then repeats), shuffled in windows of at
    most window_rows, different each epoch; a fresh stream (a resumed run) asked for a position mid-file gives
    the same rows, bitwise."""
    ids = np.arange(2000, dtype=np.float64)
    table = pa.table({"a": np.sin(ids), "id": ids})
    shards = write_files(table, tmp_path / "data", 4, row_group_size=100)
    files, _, _, found = streamed(shards, target="id")
    prep = found.fit.finish("regression", LOCAL)

    def stream() -> WindowedStream:
        return WindowedStream(files, found.train_rows, prep, "id", None, 300, SEED, 0, torch.device("cpu"))

    first = stream()
    rows = first.rows
    assert rows == sum(found.train_rows.values()) == 1600
    assert max(w.rows for w in first.windows(0)) <= 300
    epoch0 = row_ids(first, prep, 0, 0, rows)
    train_ids = sorted(i for f in files for i in range(f.shard * 500, f.shard * 500 + 500)
                       if not f.validation[i - f.shard * 500])  # fmt: skip
    assert sorted(epoch0) == train_ids
    assert epoch0 != sorted(epoch0) and row_ids(first, prep, 1, 0, rows) != epoch0
    assert row_ids(first, prep, 0, rows, 64) == epoch0[:64]  # past the rank's rows the stream repeats

    resumed = stream()  # nothing read yet: it seeks from the position alone
    position = resumed.position(0, 777)
    assert position["offset_in_window"] > 0
    x_first, y_first = first.micro_batch(0, 777, 64)
    x_again, y_again = resumed.micro_batch(0, 777, 64)
    assert torch.equal(x_first, x_again) and torch.equal(y_first, y_again)
    first.close()
    resumed.close()


class CountedStream(WindowedStream):
    """A stream that keeps a weak reference to every window it loads, to count how many are still held."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loaded: list[weakref.ref] = []

    def _load(self, epoch, index, window):
        inputs, targets = super()._load(epoch, index, window)
        self.loaded.append(weakref.ref(inputs))
        return inputs, targets

    def held(self) -> int:
        # Reference counting alone: a window kept alive by a cycle counts as held, as its memory is.
        return sum(ref() is not None for ref in self.loaded)


def test_at_most_the_current_and_the_next_window_are_held(tmp_path):
    """Issue 40, point 14: streaming's point is its memory bound, which its results cannot show (a stream keeping
    every window gives the same rows): through two epochs of micro-batches, some crossing from one window to the
    next, at most two windows' tensors are alive after each step — the one being served and the one read ahead."""
    ids = np.arange(2000, dtype=np.float64)
    table = pa.table({"a": np.sin(ids), "id": ids})
    shards = write_files(table, tmp_path / "data", 4, row_group_size=100)
    files, _, _, found = streamed(shards, target="id")
    prep = found.fit.finish("regression", LOCAL)
    stream = CountedStream(files, found.train_rows, prep, "id", None, 300, SEED, 0, torch.device("cpu"))
    assert len(stream.windows(0)) >= 6

    most = 0
    for epoch in range(2):
        for first in range(0, stream.rows, 70):  # 70 does not divide a window: some micro-batches span two
            stream.micro_batch(epoch, first, 70)
            most = max(most, stream.held())
    stream.close()
    assert len(stream.loaded) >= 12, "the windows were not read in turn"
    assert most <= 2, f"{most} windows were held at once"


def test_a_share_streams_when_its_estimated_peak_exceeds_the_budget():
    """Issue 30, point 2: the budget decision, from the stored sizes of a rank's files."""
    assert memory_budget.must_stream([(400, "parquet")], budget_bytes=1000)  # 1,200 bytes estimated
    assert not memory_budget.must_stream([(300, "parquet"), (100, "csv")], budget_bytes=1100)  # 900 + 150
    assert memory_budget.default_budget_bytes(4, memory=96 * 10**9) == 12 * 10**9


@pytest.mark.slow
def test_a_run_under_a_small_budget_learns_as_in_memory_and_resumes_mid_file_bitwise(tmp_path):
    """Issue 30, point 2: the data are ≥ 5 × the budget given to the run; it streams, learns within a point of
    the same run in memory, and a run resumed from a checkpoint taken mid-file ends with the same weights, bitwise."""
    data = tmp_path / "data"
    write_files(signal_table(12_000), data, 3, row_group_size=500)
    stored = sum(f.stat().st_size for f in data.iterdir())
    budget_mb = stored / 5 / 2**20 / 3  # a fifth of the data, and less
    common = ["--data", str(data), "--target", "y", "--epochs", "3", "--batch-size", "64", "--seed", "5",
              "--checkpoint-every-steps", "100", "--checkpoint-every-seconds", "0",
              "--keep-checkpoints", "9"]  # fmt: skip

    def train(name: str, *extra: str):
        finished = run("trainer.train", [*common, *extra, *output_dirs(tmp_path / name)], process_env(),
                       tmp_path / f"{name}.log")  # fmt: skip
        assert finished.returncode == 0, finished.output[-4000:]
        return finished, json.loads((tmp_path / name / "model" / "metrics.json").read_text())

    in_memory, held = train("memory")
    assert not in_memory.messages("training rows streamed")
    streamed_run, streamed_metrics = train("stream", "--memory-budget-mb", f"{budget_mb:.4f}")
    [layout] = streamed_run.messages("training rows streamed")
    assert stored >= 5 * budget_mb * 2**20
    assert streamed_metrics["train_rows"] == held["train_rows"]
    assert streamed_metrics["validation_rows"] == held["validation_rows"]
    assert layout["window_rows"] < held["train_rows"]
    # Within a point: RMSE relative to the baseline's (the share of the target's spread left unexplained).
    relative = [m["val_rmse"] / m["baseline_rmse"] for m in (held, streamed_metrics)]
    assert abs(relative[0] - relative[1]) < 0.01 + 0.1 * relative[0]

    # Resume: a copy of the checkpoint at step 200 (mid-file, mid-window: 150 steps an epoch) and the same flags.
    checkpoints = tmp_path / "stream" / "checkpoints"
    step_folder = next(p for p in checkpoints.iterdir() if p.name.endswith("200"))
    resumed_dir = tmp_path / "resumed" / "checkpoints"
    resumed_dir.mkdir(parents=True)
    shutil.copytree(step_folder, resumed_dir / step_folder.name)
    _, resumed_metrics = train("resumed", "--memory-budget-mb", f"{budget_mb:.4f}")
    assert resumed_metrics["resumed_from_step"] == 200
    last = max(p.name for p in checkpoints.iterdir() if p.name.startswith("step-"))

    def weights(folder):
        return torch.load(folder / last / "state.pt", map_location="cpu", weights_only=True)["model"]

    assert_bitwise_equal(weights(checkpoints), weights(resumed_dir))
