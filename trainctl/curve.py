"""`trainctl curve ID [--out FILE]`: any run's training and validation loss and its metric per epoch as a PNG
(trainctl/loss_chart.py, the drawing `trainctl demo` uses), from what the run left in its model folder: metrics.jsonl
(one line per evaluation, rewritten by the built-in trainer after every epoch, so a running job has a curve too) and
metrics.json (the kept epoch and the early stop, once it finished). Both are the job's output, so untrusted: read
bounded, and only numbers are drawn. A run with nothing to draw gets a sentence saying why, exit 3."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from trainctl.jobs import EXIT_NOT_FOUND, add_team_option, find_record

# metrics.jsonl holds one line of about 200 bytes per epoch: this is tens of thousands of epochs.
MAX_HISTORY_BYTES = 8 * 1024 * 1024
MAX_FINAL_BYTES = 64 * 1024
# The exit codes (docs/operations.md): 4, refused.
EXIT_TOO_LARGE = 4


class NothingToDraw(Exception):
    """Why a run has no curve (yet), in a sentence that says what to do."""


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("curve", help="a run's losses and metric per epoch, as a PNG")
    cmd.add_argument("request_id", metavar="ID")
    cmd.add_argument("--out", metavar="FILE", type=Path, help="where to write the PNG (default: ID-curve.png here)")
    add_team_option(cmd)
    cmd.set_defaults(run=run_curve)


def parse_history(content: bytes) -> list[dict[str, float]]:
    """metrics.jsonl's evaluations: each line a JSON object; its numeric fields kept, anything else skipped (a line
    cut short while the file was rewritten, text a program wrote), in epoch order."""
    found = []
    for line in content.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        numbers = {
            str(k): v
            for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        if "val_loss" in numbers:
            found.append(numbers)
    key = "epoch" if found and all("epoch" in r for r in found) else "step"
    return sorted(found, key=lambda r: r.get(key, 0))


def parse_final(content: bytes | None) -> dict[str, Any]:
    """The figures of metrics.json the curve marks: the kept epoch and whether training stopped early."""
    try:
        final = json.loads(content) if content else {}
    except ValueError:
        return {}
    if not isinstance(final, dict) or not final:
        return {}
    best = final.get("best_epoch")
    return {
        "best_epoch": best if isinstance(best, int) and not isinstance(best, bool) else None,
        "stopped_early": final.get("stopped_early") is True,
    }


def read_run_metrics(gcs: Any, model_dir: str) -> tuple[bytes | None, bytes | None]:
    """A run's metrics.jsonl and metrics.json from its model folder, each bounded (TooLarge past it); None where
    absent. `trainctl curve` and the console's request page read them here."""
    from schemas.rules import split_gs_uri

    bucket, folder = split_gs_uri(model_dir)
    folder = folder.rstrip("/")
    history = gcs.read(bucket, f"{folder}/metrics.jsonl", max_bytes=MAX_HISTORY_BYTES)
    final = gcs.read(bucket, f"{folder}/metrics.json", max_bytes=MAX_FINAL_BYTES)
    return (history[0] if history else None), (final[0] if final else None)


def no_history(request_id: str, state: str, builtin: bool, model_dir: str) -> str:
    """Why the run left no metrics.jsonl, by where it stands."""
    if state in ("rejected", "skipped"):
        return f"{request_id} was {state}: it never ran, so it has no curve (`trainctl status {request_id}` says why)"
    if state in ("claimed", "queued", "submitted"):
        return f"{request_id} is {state}: it has not trained yet; its curve starts after its first epoch"
    if not builtin:
        return (
            f"{request_id}'s program wrote no metrics.jsonl in {model_dir}: only the built-in trainer writes one. "
            "Your own code can too: one JSON line per epoch with epoch, train_loss, val_loss and val_accuracy "
            "or val_rmse, in $AIP_MODEL_DIR/metrics.jsonl"
        )
    if state == "running":
        return f"{request_id} has no metrics yet: the trainer writes them at the end of each epoch; try again then"
    return f"{request_id} ({state}) left no metrics.jsonl in {model_dir}: it stopped before its first epoch ended"


def title(record: Any, metric: str | None) -> str:
    model = record.request.get("model") or {}
    steps = record.model_steps
    named = f"model {model['name']}" if model.get("name") else "no model block"
    if model.get("name") and steps is not None and steps.version:
        named += f" v{steps.version}"
    return f"run {record.request_id} · {named} · {(metric or 'no metric').replace('_', ' ')}"


def draw(history: list[dict[str, float]], final: dict[str, Any], heading: str, out: Path) -> Path:
    """The curve (loss_chart.loss_figure) written to `out` as a PNG: `trainctl curve` and `trainctl demo` draw here."""
    import matplotlib.pyplot as plt

    from trainctl.loss_chart import loss_figure

    figure = loss_figure(history, final, heading)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    plt.close(figure)
    return out


def run_curve(args: argparse.Namespace) -> int:
    from functions.cloud.gcs import Gcs, TooLarge
    from trainctl.context import cli_settings
    from trainctl.loss_chart import history_metric

    record = find_record(args.request_id, args.team)
    if record is None:
        print(f"no request {args.request_id!r} in the ledger")
        return EXIT_NOT_FOUND
    gcs = Gcs(cli_settings().project)
    model_dir = record.artifacts.model_dir
    try:
        found, final = read_run_metrics(gcs, model_dir)
    except TooLarge as exc:
        print(f"{exc.uri} is larger than {exc.limit // 1024:,} KiB: too large to draw")
        return EXIT_TOO_LARGE
    builtin = bool((record.request.get("trainer") or {}).get("builtin"))
    history = parse_history(found) if found is not None else []
    if not history:
        if found is not None:
            print(f"{model_dir}metrics.jsonl holds no evaluation with a val_loss: nothing to draw")
        else:
            print(no_history(record.request_id, record.state, builtin, model_dir))
        return EXIT_NOT_FOUND
    out = draw(history, parse_final(final), title(record, history_metric(history)),
               args.out or Path(f"{args.request_id}-curve.png"))  # fmt: skip
    x_key = "epoch" if "epoch" in history[0] else "step"
    print(f"curve: {out} ({len(history)} evaluation{'s' if len(history) != 1 else ''}, {x_key} "
          f"{int(history[0][x_key])}–{int(history[-1][x_key])})")  # fmt: skip
    if len(history) == 1:
        print(f"  only one {x_key} so far: the picture shows points, not yet a curve")
    return 0
