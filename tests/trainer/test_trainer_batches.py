"""Epoch order: a pure function of seed, epoch and rank; every rank runs the same number of full batches; with
replicated data the ranks split each epoch between them."""

from __future__ import annotations

import torch

from trainer.data.batches import EpochBatches


def batches(rank: int, world: int = 2, rows: int = 101, sharded: bool = False, largest: int | None = None):
    largest = largest if largest is not None else -(-rows // world)
    return EpochBatches(rows, micro_batch_size=8, grad_accum_steps=2, seed=5, rank=rank, world_size=world,
                        sharded=sharded, largest_rank_rows=largest)  # fmt: skip


def test_replicated_ranks_split_every_epoch_between_them():
    order = [batches(rank).order(epoch=3) for rank in (0, 1)]
    visited = set(order[0].tolist()) | set(order[1].tolist())
    assert visited == set(range(101))
    assert not set(order[0].tolist()) & set(order[1].tolist())


def test_every_rank_runs_the_same_number_of_full_optimizer_steps():
    uneven = [batches(0, sharded=True, rows=40, largest=70), batches(1, sharded=True, rows=70, largest=70)]
    assert uneven[0].steps_per_epoch == uneven[1].steps_per_epoch == 5  # ceil(70 / (8 * 2))
    assert [len(b.order(0)) for b in uneven] == [80, 80]


def test_the_order_is_the_same_after_a_restart_and_changes_between_epochs():
    assert torch.equal(batches(0).order(2), batches(0).order(2))
    assert not torch.equal(batches(0).order(2), batches(0).order(3))


def test_sharded_ranks_shuffle_their_own_rows_differently():
    a, b = batches(0, sharded=True, rows=64, largest=64), batches(1, sharded=True, rows=64, largest=64)
    assert sorted(a.order(0).tolist()[:64]) == list(range(64))
    assert not torch.equal(a.order(0), b.order(0))
