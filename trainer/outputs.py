"""What a finished run leaves in the model folder: `model.pt` (weights, how to rebuild the module, and the
preprocessing), `metrics.json` (the final numbers), `metrics.jsonl` (one line per evaluation) and `_SUCCESS`,
written last so a reader that sees it knows everything else is complete."""

from __future__ import annotations

import io
import json

import torch
from torch import nn

from trainer import logs
from trainer.model import build_model
from trainer.preprocess import Preprocessor
from trainer.storage import open_folder

MODEL_FORMAT = "trainctl-model/1"
FAILURE_NOTE = "failure.json"


def write_history(model_dir: str, history: list[dict]) -> None:
    open_folder(model_dir).write_bytes("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in history).encode())


def write_outputs(
    model_dir: str, model: nn.Module, model_spec: dict, prep: Preprocessor, metrics: dict, history: list[dict]
) -> None:
    folder = open_folder(model_dir)
    package = {
        "format": MODEL_FORMAT,
        "model": model_spec,
        "state_dict": model.state_dict(),
        "preprocessing": prep.state_dict(),
    }
    buffer = io.BytesIO()
    torch.save(package, buffer)
    folder.write_bytes("model.pt", buffer.getvalue())
    write_history(model_dir, history)
    folder.write_bytes("metrics.json", (json.dumps(metrics, indent=2) + "\n").encode())
    folder.write_bytes("_SUCCESS", b"")


def report_failure(model_dir: str, error: Exception) -> None:
    """Leave `failure.json` in the model folder, best effort, so the controller's `failed` event can say what
    went wrong (a missing dataset, say) in the trainer's own words; Vertex itself reports only an exit code."""
    try:
        note = {"error": f"{type(error).__name__}: {error}"[:2000]}
        open_folder(model_dir).write_bytes(FAILURE_NOTE, (json.dumps(note) + "\n").encode())
    except Exception as unwritable:  # the output folder may be the problem itself
        logs.error(f"could not write {FAILURE_NOTE} to {model_dir}: {type(unwritable).__name__}: {unwritable}")


def load_model(model_dir: str) -> tuple[nn.Module, Preprocessor]:
    folder = open_folder(model_dir)
    package = torch.load(io.BytesIO(folder.read_bytes("model.pt")), map_location="cpu", weights_only=True)
    if package.get("format") != MODEL_FORMAT:
        raise ValueError(f"{folder.uri('model.pt')} is not a trainctl model (format {package.get('format')!r})")
    prep = Preprocessor.from_state_dict(package["preprocessing"])
    spec = package["model"]
    model = build_model(spec["factory"], prep.num_features, prep.num_outputs, spec["kwargs"])
    model.load_state_dict(package["state_dict"])
    return model.eval(), prep
