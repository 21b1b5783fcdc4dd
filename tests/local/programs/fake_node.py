"""A stand-in training node for the JobService tests: records what Vertex gave it, then behaves as the
test asks (sleep, wait for a file, ignore SIGTERM, exit with a status).

python fake_node.py [--record-env DIR] [--pid-dir DIR] [--ignore-sigterm] [--sleep S]
                    [--until-file F] [--sleep-unless-exists F] [--exit-code N] [--metrics JSON]

It also stands in for the built-in trainer (tests/integration/test_untrusted_job_outputs.py maps the controller's
trainer image onto it): given the trainer's command line, it takes `--data gs://BUCKET/FOLDER/` and reads its own
arguments from the object FOLDER/fake-node-args, one a line; the trainer's other flags are ignored, but for
`--write-reference-rows`: with it, the primary writes a stand-in reference.parquet beside its metrics, as the
built-in trainer writes a sample of its validation rows (issue 38).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def node_name() -> str:
    task = json.loads(os.environ["CLUSTER_SPEC"])["task"]
    return f"{task['type']}-{task['index']}"


def write_atomically(path: Path, text: str) -> None:
    # Tests poll for these files; they must never see one half written.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(text)
    os.replace(path.with_suffix(".tmp"), path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record-env", type=Path, help="write the environment to DIR/<node>.json")
    parser.add_argument("--pid-dir", type=Path, help="write this process's pid to DIR/<node>.pid")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--until-file", type=Path, help="wait until this file exists")
    parser.add_argument("--sleep-unless-exists", type=Path, help="first run: create it and sleep; later runs: go on")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--metrics", help="the primary writes this JSON as $AIP_MODEL_DIR/metrics.json")
    parser.add_argument("--runs-file", type=Path, help="count this node's runs (one line per run) in this file")
    parser.add_argument("--fail-first", type=int, help="with --runs-file: fail only the first N runs, then exit 0")
    parser.add_argument("--signal", type=int, help="fail by dying of this signal instead of --exit-code")
    parser.add_argument("--data", help="standing in for the built-in trainer: read arguments from DATA/fake-node-args")
    parser.add_argument("--champion-model-dir", help="the model's champion, which trainctl passes; not read here")
    parser.add_argument("--reference-data", help="the model's reference set, which trainctl passes; not read here")
    parser.add_argument("--confidence", help="the level of the reference set's interval; not used here")
    parser.add_argument("--write-reference-rows", action="store_true", help="write a stand-in reference.parquet")
    parser.add_argument("--model-from", type=Path, help="the primary copies this trained model folder's files too")
    parser.add_argument(
        "--steps",
        type=int,
        help="standing in for the built-in trainer's heartbeat: the primary writes $AIP_CHECKPOINT_DIR/progress.json "
        "with its first step when --sleep is over and this many steps run and kept (trainer/outputs/progress.py)",
    )
    args, trainer_flags = parser.parse_known_args()
    standing_in = bool(args.data)
    # Like the built-in trainer, a run given no reference set writes its own sample beside its metrics (issue 38).
    writes_reference = standing_in and args.write_reference_rows
    if args.data:
        args = parser.parse_args(stand_in_args(args.data))
    elif trainer_flags:
        parser.error(f"unrecognized arguments: {' '.join(trainer_flags)}")
    print(f"fake node {node_name()} started with {sys.argv[1:]}", flush=True)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.record_env:
        write_atomically(args.record_env / f"{node_name()}.json", json.dumps(dict(os.environ)))
    if args.pid_dir:
        write_atomically(args.pid_dir / f"{node_name()}.pid", str(os.getpid()))
    if args.sleep_unless_exists and not args.sleep_unless_exists.exists():
        args.sleep_unless_exists.write_text("first attempt")
        time.sleep(600)
    time.sleep(args.sleep)
    while args.until_file and not args.until_file.exists():
        time.sleep(0.05)
    if args.steps is not None and node_name() == "workerpool0-0":
        write_progress(args.steps, time.time())
    if args.metrics and node_name() == "workerpool0-0":
        write_metrics(args.metrics, writes_reference, args.model_from)
    if args.runs_file:
        with open(args.runs_file, "a") as runs:
            runs.write("run\n")
        if args.fail_first is not None and len(args.runs_file.read_text().splitlines()) > args.fail_first:
            return 0
    if args.signal:
        signal.signal(args.signal, signal.SIG_DFL)
        os.kill(os.getpid(), args.signal)
    return args.exit_code


def stand_in_args(data: str) -> list[str]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket, _, folder = data.removeprefix("gs://").partition("/")
    client = storage.Client(project="local", credentials=AnonymousCredentials())
    return client.bucket(bucket).blob(folder + "fake-node-args").download_as_text().splitlines()


def write_progress(steps: int, first_step: float) -> None:
    """The built-in trainer's finished heartbeat, in its shape (trainer/outputs/progress.py)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket, _, prefix = os.environ["AIP_CHECKPOINT_DIR"].removeprefix("gs://").partition("/")
    record = {
        "step": steps, "total_steps": steps, "epoch": 1, "time": round(time.time(), 3), "attempt": 0,
        "state": "finished", "job": os.environ.get("CLOUD_ML_JOB_ID", ""), "started": round(first_step, 3),
        "first_step": round(first_step, 3), "steps_run": steps,
    }  # fmt: skip
    folder = storage.Client(project="local", credentials=AnonymousCredentials()).bucket(bucket)
    folder.blob(prefix.rstrip("/") + "/progress.json").upload_from_string(json.dumps(record))


def write_metrics(metrics: str, reference: bool, model_from: Path | None = None) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket, _, prefix = os.environ["AIP_MODEL_DIR"].removeprefix("gs://").partition("/")
    folder = storage.Client(project="local", credentials=AnonymousCredentials()).bucket(bucket)
    if reference:
        folder.blob(prefix.rstrip("/") + "/reference.parquet").upload_from_string(b"stand-in validation rows")
    for path in sorted(model_from.iterdir()) if model_from else ():  # a real model, so that its version serves
        # Not its schema.json: the stand-in's datasets are not the model's, and the data check reads that file.
        if path.is_file() and path.name not in ("metrics.json", "schema.json"):
            folder.blob(prefix.rstrip("/") + "/" + path.name).upload_from_filename(str(path))
    folder.blob(prefix.rstrip("/") + "/metrics.json").upload_from_string(metrics)


if __name__ == "__main__":
    sys.exit(main())
