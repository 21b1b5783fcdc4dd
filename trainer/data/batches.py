"""The order in which a rank visits its training rows, as a pure function of (seed, epoch, rank): nothing to
save but the position, and the same order again after a restart.

Every epoch a seeded permutation is drawn. With replicated data every rank draws the same permutation of the
whole training split and takes every `world`-th row from its rank on; with sharded data each rank permutes its
own rows with a rank-specific seed. Each rank's order is then repeated cyclically to the same number of full
micro-batches on every rank (the largest rank's count, rounded up to whole optimizer steps), so ranks always
run the same number of steps.
"""

from __future__ import annotations

import math

import torch


class EpochBatches:
    def __init__(
        self,
        num_rows: int,
        micro_batch_size: int,
        grad_accum_steps: int,
        seed: int,
        rank: int,
        world_size: int,
        sharded: bool,
        largest_rank_rows: int,
    ):
        if (num_rows if sharded else num_rows // world_size) == 0:
            raise ValueError(f"rank {rank} would get no training rows out of {num_rows}; use fewer ranks or more data")
        self.num_rows, self.micro_batch_size = num_rows, micro_batch_size
        self.seed, self.rank, self.world_size, self.sharded = seed, rank, world_size, sharded
        self.steps_per_epoch = max(1, math.ceil(largest_rank_rows / (micro_batch_size * grad_accum_steps)))
        self.micro_batches_per_epoch = self.steps_per_epoch * grad_accum_steps

    def order(self, epoch: int) -> torch.Tensor:
        """Row indices this rank visits in `epoch`, exactly `micro_batches_per_epoch * micro_batch_size` long."""
        if self.sharded:
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) * 4099 + self.rank)
            mine = torch.randperm(self.num_rows, generator=generator)
        else:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            mine = torch.randperm(self.num_rows, generator=generator)[self.rank :: self.world_size]
        wanted = self.micro_batches_per_epoch * self.micro_batch_size
        return mine.repeat(math.ceil(wanted / len(mine)))[:wanted]
