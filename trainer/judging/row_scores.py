"""One model's score on each row of a reference set, so two models can be compared row by row
(trainer/judging/bootstrap.py).

Each model reads the raw rows through its own preprocessing (its `model.pt` holds it), so each model's outputs are
turned back into the target's own units with its own statistics before they are compared: a squared error in the
target's units for RMSE, a hit (0 or 1) for accuracy. The loss is cross-entropy for classification; for
regression it is the squared error in units of `loss_std` — this run's target standard deviation — so that the
champion's loss and this run's `val_loss` (its standardised MSE) are measured alike.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch import nn

from trainer.data.preprocess import Preprocessor
from trainer.data.schema import numbers_of
from trainer.judging.bootstrap import mean, root_mean
from trainer.judging.skill import Skill, classification_skill, regression_skill

CHUNK_ROWS = 8192


@dataclass
class RowScores:
    task: str
    loss: np.ndarray  # per row
    score: np.ndarray  # per row: a hit (classification) or the squared error in the target's units (regression)
    skill: Skill  # against the trivial prediction on these rows

    @property
    def metric(self) -> str:
        return "accuracy" if self.task == "classification" else "rmse"

    def figures(self) -> dict[str, float]:
        """`val_loss` and `val_accuracy` or `val_rmse` over these rows."""
        score = mean(self.score) if self.task == "classification" else root_mean(self.score)
        return {"val_loss": float(mean(self.loss)), f"val_{self.metric}": float(score)}


@torch.no_grad()
def score_rows(
    model: nn.Module, prep: Preprocessor, table: pa.Table, loss_std: float, device: torch.device
) -> RowScores:
    """The model's scores on every row of `table` (labelled rows with every column). Raises ValueError when its
    preprocessing cannot read them (a column gone, a class it never saw)."""
    inputs, targets = prep.features(table), prep.targets(table)
    model = model.to(device).eval()
    outputs = torch.cat(
        [model(inputs[i : i + CHUNK_ROWS].to(device)).float().cpu() for i in range(0, len(inputs), CHUNK_ROWS)]
        or [torch.zeros((0, prep.num_outputs))]
    )
    if prep.task == "classification":
        loss = F.cross_entropy(outputs, targets, reduction="none").double().numpy()
        hits = (outputs.argmax(dim=1) == targets).double().numpy()
        counts = Counter(targets.tolist())
        return RowScores(prep.task, loss, hits, classification_skill(float(hits.mean()), list(counts.values())))
    predicted = outputs.reshape(-1).double().numpy() * prep.target_std + prep.target_mean
    actual = numbers_of(table[prep.target])
    squared = (predicted - actual) ** 2
    skill = regression_skill(float(squared.mean()), float(actual.var()))
    return RowScores(prep.task, squared / loss_std**2, squared, skill)
