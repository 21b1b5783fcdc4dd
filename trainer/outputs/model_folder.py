"""What a finished run leaves in the model folder: `model.pt` (weights, how to rebuild the module, and the
preprocessing), `schema.json` (what the data looked like), `reference.parquet` (a sample of the validation rows,
when no reference set was given: trainer/judging/reference_set.py), `metrics.json` (the final numbers), `metrics.jsonl`
(one line per evaluation) and `_SUCCESS`, written last so a reader that sees it knows everything else is
complete; or `failure.json` when the run failed."""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Collection

import torch
from torch import nn

from trainer import logs
from trainer.data.preprocess import Preprocessor
from trainer.data.schema import SCHEMA_FILE  # what the data looked like
from trainer.model.network import build_model
from trainer.storage.folders import open_folder

MODEL_FORMAT = "trainctl-model/1"
MODEL_FILE = "model.pt"
REFERENCE_FILE = "reference.parquet"  # the rows a model's later versions are compared on (trainer/judging/evidence.py)
FAILURE_NOTE = "failure.json"
MAX_FAILURE_CHARS = 2000  # functions/untrusted/job_outputs.py reads the note's error clipped to this


class RunRefused(Exception):
    """A run the trainer itself decided to stop, for a reason the controller classifies it by (failure.json's
    `reason`, e.g. `data`). Every rank raises it together, so no collective is left waiting, and rank 0 alone
    writes the note; `details` are more of the note's fields."""

    reason = "refused"

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = details or {}


def write_history(model_dir: str, history: list[dict]) -> None:
    open_folder(model_dir).write_bytes("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in history).encode())


def write_outputs(
    model_dir: str,
    model: nn.Module,
    model_spec: dict,
    prep: Preprocessor,
    metrics: dict,
    history: list[dict],
    schema: bytes,
    reference: bytes | None = None,
) -> None:
    """Everything a finished run leaves; `schema` is schema.json's bytes (trainer/data/schema.py), `reference`
    reference.parquet's (None: not written)."""
    folder = open_folder(model_dir)
    package = {
        "format": MODEL_FORMAT,
        "model": model_spec,
        "state_dict": model.state_dict(),
        "preprocessing": prep.state_dict(),
    }
    buffer = io.BytesIO()
    torch.save(package, buffer)
    folder.write_bytes(MODEL_FILE, buffer.getvalue())
    folder.write_bytes(SCHEMA_FILE, schema)
    if reference is not None:
        folder.write_bytes(REFERENCE_FILE, reference)
    write_history(model_dir, history)
    folder.write_bytes("metrics.json", (json.dumps(metrics, indent=2) + "\n").encode())
    folder.write_bytes("_SUCCESS", b"")


def report_failure(model_dir: str, error: Exception) -> None:
    """Leave `failure.json` in the model folder, best effort, so the controller's `failed` event can say what
    went wrong (a missing dataset, say) in the trainer's own words; Vertex itself reports only an exit code. A
    refusal also names its `reason`, its details and the torchrun run it belongs to (a restarted worker group reads
    it back: trainer/judging/drift.py)."""
    try:
        note: dict = {"error": f"{type(error).__name__}: {error}"[:MAX_FAILURE_CHARS]}
        if isinstance(error, RunRefused):
            note |= {**error.details, "reason": error.reason, "run": os.environ.get("TORCHELASTIC_RUN_ID")}
        open_folder(model_dir).write_bytes(FAILURE_NOTE, (json.dumps(note) + "\n").encode())
    except Exception as unwritable:  # the output folder may be the problem itself
        logs.error(f"could not write {FAILURE_NOTE} to {model_dir}: {type(unwritable).__name__}: {unwritable}")


def read_failure_note(model_dir: str) -> dict | None:
    """The failure note in `model_dir` as written by report_failure, None when there is none (or it is not an
    object); read with a bound, since anything in the folder may have written it."""
    folder = open_folder(model_dir)
    if not folder.exists(FAILURE_NOTE):
        return None
    note = json.loads(folder.read_at_most(FAILURE_NOTE, 64 * 1024))
    return note if isinstance(note, dict) else None


def load_model(model_dir: str) -> tuple[nn.Module, Preprocessor]:
    """The module (in eval mode) and preprocessing of the model in `model_dir`, a folder the caller chose."""
    folder = open_folder(model_dir)
    return model_from_bytes(folder.read_bytes(MODEL_FILE), folder.uri(MODEL_FILE))


def model_from_bytes(
    data: bytes, source: str, allowed_factories: Collection[str] | None = None
) -> tuple[nn.Module, Preprocessor]:
    """The module (in eval mode) and preprocessing that the bytes of a `model.pt` hold; `source` names the file in
    errors. Only tensors and plain values are unpickled (`weights_only`), and the preprocessing is checked.

    `allowed_factories` is for a file another run wrote (a champion): building its module imports and calls the
    `module:factory` it names, which is code, so only these names are accepted; and the module is first built on
    the meta device (no memory), so sizes that do not match the weights the file holds are refused before any
    memory is taken."""
    package = _read_package(data, source)
    try:
        prep = Preprocessor.from_state_dict(package["preprocessing"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: {e}") from e
    factory, kwargs, weights = package["model"]["factory"], package["model"]["kwargs"], package["state_dict"]
    if allowed_factories is not None:
        if factory not in allowed_factories:
            raise ValueError(
                f"{source} is built by {factory!r}; a model from another run is loaded only when it is built by "
                f"{' or '.join(repr(f) for f in sorted(allowed_factories))}"
            )
        with torch.device("meta"):
            expected = build_model(factory, prep.num_features, prep.num_outputs, kwargs).state_dict()
        if {k: tuple(v.shape) for k, v in expected.items()} != {k: tuple(v.shape) for k, v in weights.items()}:
            raise ValueError(f"{source}: its weights do not match the module its settings describe")
    model = build_model(factory, prep.num_features, prep.num_outputs, kwargs)
    model.load_state_dict(weights)
    return model.eval(), prep


def _read_package(data: bytes, source: str) -> dict:
    # torch.save writes an uncompressed zip, so no entry can unpack to more than the bytes already read.
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            compressed = [i.filename for i in archive.infolist() if i.compress_type != zipfile.ZIP_STORED]
    except zipfile.BadZipFile as e:
        raise ValueError(f"{source} is not a model file written by torch.save ({e})") from e
    if compressed:
        raise ValueError(f"{source} holds compressed entries {compressed[:3]}, which torch.save never writes")
    package = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if not isinstance(package, dict) or package.get("format") != MODEL_FORMAT:
        found = package.get("format") if isinstance(package, dict) else type(package).__name__
        raise ValueError(f"{source} is not a trainctl model (format {found!r}, expected {MODEL_FORMAT!r})")
    spec, weights = package.get("model"), package.get("state_dict")
    if not (
        isinstance(spec, dict)
        and isinstance(spec.get("factory"), str)
        and isinstance(spec.get("kwargs"), dict)
        and isinstance(weights, dict)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items())
    ):
        raise ValueError(f"{source} lacks a module description (factory, kwargs) or its weights")
    return package
