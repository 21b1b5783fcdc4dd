"""The trainer's checkpoint state is typed: `TrainState.state_dict()` holds everything a resume needs, and
`load_state_dict()` gives it back — model, optimizer, progress, the best epoch, and this rank's RNG stream."""

from __future__ import annotations

import torch
from torch import nn

from trainer.checkpoints.state import TrainState


def fresh_state(seed: int) -> TrainState:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    return TrainState(model, torch.optim.AdamW(model.parameters()), steps_per_epoch=10, world_size=2)


def test_a_train_state_round_trips_through_its_state_dict():
    """Guards issue 16 item 4: one typed object writes and reads the checkpoint (it was an untyped dict written
    and read in three places)."""
    state = fresh_state(seed=1)
    state.model(torch.ones(4, 3)).sum().backward()
    state.optimizer.step()
    state.step, state.history = 25, [{"epoch": 1, "val_accuracy": 0.5}, {"epoch": 2, "val_accuracy": 0.7}]
    state.keep_if_best(state.history[1], lambda record, best: best is None)
    state.epoch_losses.append(torch.tensor(1.25))
    state.epoch_losses.append(torch.tensor(0.5))
    torch.manual_seed(99)
    mine = state.rank_state(torch.device("cpu"))
    other = state.rank_state(torch.device("cpu"))
    saved = state.state_dict([other, mine])  # rank 1's share second
    expected_draw = torch.rand(3)

    restored = fresh_state(seed=2)
    restored.load_state_dict(saved, rank=1, device=torch.device("cpu"))

    assert (restored.step, restored.epoch, restored.resumed_from_step) == (25, 2, 25)
    assert restored.history == state.history and restored.best_record == state.best_record
    assert all(torch.equal(restored.model.state_dict()[k], v) for k, v in state.model.state_dict().items())
    assert restored.optimizer.state_dict()["state"][0]["step"] == state.optimizer.state_dict()["state"][0]["step"]
    assert restored.epoch_losses.tensor().tolist() == [1.75]
    assert torch.equal(torch.rand(3), expected_draw)  # this rank's RNG stream continues where it stopped
    assert saved["step_in_epoch"] == 5 and saved["steps_per_epoch"] == 10 and saved["world_size"] == 2
