"""What is being learned: the loss for a batch and the validation metrics, with the trivial baseline beside
them (the majority class for classification, the training mean for regression) so a user can tell whether
the model learned anything. Evaluation runs on every rank over its own validation rows; sums are all-reduced.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer.data.preprocess import Preprocessor
from trainer.distributed import collectives

EVAL_CHUNK_ROWS = 8192


class Objective:
    def __init__(self, prep: Preprocessor):
        self.classification = prep.task == "classification"
        self.target_std = prep.target_std
        # Predicting the most frequent training class, or the training mean (0 once standardised).
        self.majority_class = max(range(len(prep.class_counts)), key=prep.class_counts.__getitem__, default=0)
        self.metric = "accuracy" if self.classification else "rmse"

    def better(self, record: dict, than: dict | None) -> bool:
        """Whether an evaluation `record` beats the best one so far (higher accuracy, lower RMSE); ties keep the
        earlier epoch."""
        if than is None:
            return True
        key = f"val_{self.metric}"
        return record[key] > than[key] if self.classification else record[key] < than[key]

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        # Under bf16 autocast both losses are computed in float32 anyway.
        if self.classification:
            return F.cross_entropy(outputs, targets, reduction=reduction)
        return F.mse_loss(outputs.reshape(-1), targets, reduction=reduction)

    def evaluate(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device) -> dict:
        """Validation loss, the metric, and the baseline's metric on the same rows, over all ranks."""
        return self.metrics(collectives.all_reduce(self.local_sums(model, inputs, targets, device)))

    @torch.no_grad()
    def local_sums(
        self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device
    ) -> torch.Tensor:
        """This rank's part of an evaluation: loss sum, model hits (or squared error), baseline hits (or squared
        error) and rows. Kept apart from the all-reduce so a caller can make sure every rank got this far before
        any of them enters the collective (a champion that cannot score, trainer/judging/champion.py)."""
        was_training = model.training
        model.eval()
        sums = torch.zeros(4, dtype=torch.float64, device=device)
        for start in range(0, len(inputs), EVAL_CHUNK_ROWS):
            x = inputs[start : start + EVAL_CHUNK_ROWS].to(device)
            y = targets[start : start + EVAL_CHUNK_ROWS].to(device)
            outputs = model(x)
            sums[0] += self.loss(outputs, y, reduction="sum").double()
            if self.classification:
                sums[1] += (outputs.argmax(dim=1) == y).sum()
                sums[2] += (y == self.majority_class).sum()
            else:
                sums[1] += ((outputs.reshape(-1) - y) ** 2).sum().double()
                sums[2] += (y**2).sum().double()
            sums[3] += len(y)
        model.train(was_training)
        return sums

    def metrics(self, sums: torch.Tensor) -> dict:
        """The figures of an evaluation from its sums over every rank (`local_sums`, all-reduced)."""
        loss_sum, model_score, baseline_score, rows = sums.cpu().tolist()
        rows = max(rows, 1.0)
        if self.classification:
            return {
                "val_loss": loss_sum / rows,
                "val_accuracy": model_score / rows,
                "baseline_accuracy": baseline_score / rows,
            }
        return {
            "val_loss": loss_sum / rows,
            "val_rmse": math.sqrt(model_score / rows) * self.target_std,
            "baseline_rmse": math.sqrt(baseline_score / rows) * self.target_std,
        }
