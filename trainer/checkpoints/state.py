"""What a checkpoint holds, typed: the model, the optimizer, and the trainer's own progress, each with
`state_dict()`/`load_state_dict()` (torchtitan's Stateful shape). A checkpoint is `TrainState.state_dict()`;
the file format (keys below) is unchanged from the untyped dict it replaces, so older checkpoints resume.

Every rank contributes its own RNG state and running epoch loss (`RankState`); rank 0 writes them all, and on a
resume with the same world size each rank takes its own back, which is what makes a resumed run bitwise equal to
one that never stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from trainer import logs


class StepLosses:
    """A rank's step losses (0-dim tensors, so recording one never waits for the device), written in place into
    one growing buffer on the device.

    Why not a list of the step tensors: each kept tensor is a few small heap allocations made in the middle of
    the step's freed batch and activation buffers, and pins that space. glibc's heap then grows by about a
    micro-batch every step, resident for the rest of the run (issue 30, point 1: +2.4 GB over a 25,000-step
    epoch, more than the rank's data). The buffer grows by doubling, so over a run it is allocated a few times.
    Its sum and mean are those of `torch.stack` of the same values: the same numbers as the list gave."""

    def __init__(self, capacity: int = 1024):
        self.capacity = max(1, capacity)
        self.values: torch.Tensor | None = None
        self.count = 0

    def append(self, loss: torch.Tensor) -> None:
        if self.values is None or self.count == len(self.values):
            grown = torch.empty(max(self.capacity, 2 * self.count), dtype=loss.dtype, device=loss.device)
            if self.values is not None:
                grown[: self.count] = self.values[: self.count]
            self.values = grown
        self.values[self.count] = loss.detach()
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def tensor(self) -> torch.Tensor:
        """The recorded losses in order, one 1-D tensor (a view of the buffer)."""
        return self.values[: self.count] if self.values is not None else torch.zeros(0)

    def clear(self) -> None:
        self.count = 0  # the buffer is kept: the next epoch writes over it


@dataclass
class RankState:
    """One rank's share: the RNG streams (dropout masks) and the summed loss of this epoch's steps so far."""

    cpu_rng: torch.Tensor
    cuda_rng: torch.Tensor | None
    epoch_loss: float

    @classmethod
    def capture(cls, device: torch.device, epoch_losses: StepLosses) -> RankState:
        return cls(
            cpu_rng=torch.get_rng_state(),
            cuda_rng=torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            epoch_loss=float(epoch_losses.tensor().sum()),
        )

    def state_dict(self) -> dict:
        return {"cpu_rng": self.cpu_rng, "cuda_rng": self.cuda_rng, "epoch_loss": self.epoch_loss}

    @classmethod
    def from_state_dict(cls, state: dict) -> RankState:
        return cls(state["cpu_rng"], state["cuda_rng"], state["epoch_loss"])

    def restore(self, device: torch.device) -> None:
        torch.set_rng_state(self.cpu_rng)
        if device.type == "cuda" and self.cuda_rng is not None:
            torch.cuda.set_rng_state(self.cuda_rng, device)


@dataclass
class TrainState:
    """The model, its optimizer, and how far training got. `epoch_losses` are this rank's step losses of the
    current epoch, kept on the device so recording them never waits for it."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    steps_per_epoch: int
    world_size: int
    step: int = 0
    history: list[dict] = field(default_factory=list)
    epoch_losses: StepLosses = field(default_factory=StepLosses)
    resumed_from_step: int | None = None
    best_record: dict | None = None  # the evaluation of the best epoch so far (by the validation metric)
    best_weights: dict | None = None  # the model's weights at that epoch, on the CPU

    def keep_if_best(self, record: dict, better) -> bool:
        """Remember the model as it is now when `record` beats the best so far (`better(record, best)`)."""
        if not better(record, self.best_record):
            return False
        self.best_record = record
        self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return True

    def epochs_without_improvement(self) -> int:
        if self.best_record is None or not self.history:
            return 0
        return self.history[-1]["epoch"] - self.best_record["epoch"]

    @property
    def epoch(self) -> int:
        """Whole epochs done (also the index of the epoch in progress)."""
        return self.step // self.steps_per_epoch

    def rank_state(self, device: torch.device) -> RankState:
        return RankState.capture(device, self.epoch_losses)

    def state_dict(self, rank_states: list[RankState]) -> dict:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "step_in_epoch": self.step % self.steps_per_epoch,
            "steps_per_epoch": self.steps_per_epoch,
            "world_size": self.world_size,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rank_states": [r.state_dict() for r in rank_states],
            "history": self.history,
            "best": {"record": self.best_record, "weights": self.best_weights} if self.best_record else None,
        }

    def load_state_dict(self, state: dict, rank: int, device: torch.device) -> None:
        """Restore from a checkpoint; bitwise only when it was written with this world size and batch size."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = self.resumed_from_step = state["step"]
        self.history = state["history"]
        best = state.get("best")  # absent in checkpoints written before the best model was kept
        self.best_record, self.best_weights = (best["record"], best["weights"]) if best else (None, None)
        same_world = state["world_size"] == self.world_size
        mine = RankState.from_state_dict(state["rank_states"][rank]) if same_world else None
        self.epoch_losses.clear()
        if mine:  # the steps before the checkpoint count as one entry: their sum
            self.epoch_losses.append(torch.tensor(mine.epoch_loss, device=device))
        if mine and state["steps_per_epoch"] == self.steps_per_epoch:
            mine.restore(device)
        else:
            logs.warning(
                "checkpoint was written with another world size or batch size; resuming, but not bit-for-bit",
                checkpoint_world_size=state["world_size"],
                world_size=self.world_size,
            )
