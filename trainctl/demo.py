"""`trainctl demo` (what `make demo` runs): the whole flow on this machine, start to finish.

Starts the local stack and writes a real tabular dataset (scikit-learn's breast-cancer data, shipped in the wheel)
into the local data bucket: first the model's reference set (rows kept out of every partition, which the model's
owner pins: issue 38), then six partitions one after another, each ending in a `_SUCCESS` marker whose content
asks for 2 nodes and names the model `demo-breast-cancer`, served on the endpoint of the same name (issue 41): the
first trains, becomes the champion and the endpoint's first version; the second (more data, more epochs) beats it on
the reference set, is promoted and deployed as a canary beside it, but its server answers errors on the live traffic
the demo sends (a fault injected into the local endpoint), so it is rolled back by itself and the alias returns to
version 1; the third lost a column on its way and is rejected at admission, against the champion's schema.json,
before any GPU starts (issue 27); the fourth had its labels inverted upstream and is stopped by the label check
before training (issue 38); the fifth (a learning rate far too small) is worse and held; the sixth, trained well,
is promoted, holds the limits over its canary's bake and takes all the traffic. Each lifecycle event is printed as
it arrives; then a summary of
the champion's run (job, nodes × processes, the metrics against the trivial baseline, artifacts, wall time), a
loss-curve PNG, a check that the champion loads and predicts, the registry's view of the model, and the short
`trainctl report`.
Stops the stack in every case. Exit 0 only when every partition ended as the story says and the champion loads;
otherwise the failing step is named with where its logs are.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from local.stack_state import local_dir, read_state, remove_state, running_stack, take_stack_lock, write_state

EXIT_FAILED = 1
DATASET_FOLDER = "demo/breast-cancer"
REFERENCE_FOLDER = f"{DATASET_FOLDER}/reference"
MODEL = "demo-breast-cancer"
SHARDS = 3
# Rows kept out of every partition, as the model's reference set; the rest are shuffled once, with a fixed seed.
REFERENCE_ROWS = 160
SHUFFLE_SEED = 0
# What every partition's marker asks for, merged onto the stack's default rule (built-in tabular trainer, `target`).
MARKER_OVERRIDES: dict[str, Any] = {
    "resources": {"machine_type": "g2-standard-24", "replica_count": 2},
    "scheduling": {"timeout": "15m", "max_pending": "5m"},
}
GOOD_TRAINING = {"epochs": 30, "batch_size": 32, "learning_rate": 0.01, "hidden_sizes": [64, 32], "seed": 7}


@dataclass(frozen=True)
class Partition:
    """One dataset landing: its folder, the rows it holds, how its run trains, and what the model step decides."""

    day: str
    rows: int | None  # the first rows of the dataset; None: all of them
    hyperparameters: dict[str, Any]
    story: str
    decision: str  # "promoted", "held", "rejected" (by the data check at admission) or "failed" (the label check)
    dropped: tuple[str, ...] = ()  # columns the partition lost on its way
    inverted: bool = False  # its labels were inverted upstream
    rollout: str | None = None  # a promoted version's rollout: "deployed" or "rolled_back" (issue 41)
    faulty: bool = False  # its serving answers errors on live traffic (a fault injected into the local endpoint)

    @property
    def folder(self) -> str:
        return f"{DATASET_FOLDER}/{self.day}"


PARTITIONS = (
    Partition(
        "2026-11-01",
        60,
        {"epochs": 3, "batch_size": 8, "learning_rate": 0.003, "hidden_sizes": [8], "seed": 7},
        "a first, small partition (60 rows, 3 epochs of a small network): the model's first version, so its "
        "champion, and the endpoint's first version",
        "promoted",
        rollout="deployed",
    ),
    Partition(
        "2026-11-08",
        None,
        GOOD_TRAINING,
        "all 409 rows, 30 epochs: surely better on the reference set, so promoted and deployed as a canary beside "
        "version 1 — but its server answers errors on live traffic (a fault injected into the local endpoint), so "
        "it is rolled back by itself and `champion` returns to version 1",
        "promoted",
        rollout="rolled_back",
        faulty=True,
    ),
    Partition(
        "2026-11-12",
        None,
        GOOD_TRAINING,
        "an export that lost the column mean_radius: rejected at admission by the champion's schema, no GPU started",
        "rejected",
        dropped=("mean_radius",),
    ),
    Partition(
        "2026-11-13",
        None,
        GOOD_TRAINING,
        "an export whose labels were inverted upstream: the champion scores far below chance on it, so the run stops "
        "before training",
        "failed",
        inverted=True,
    ),
    Partition(
        "2026-11-15",
        None,
        {**GOOD_TRAINING, "epochs": 1, "learning_rate": 0.00001},
        "the same rows trained with a learning rate 300 times too small: worse, so held",
        "held",
    ),
    Partition(
        "2026-11-20",
        None,
        GOOD_TRAINING,
        "the next export, trained well: better than version 1, so a canary beside it; it holds the limits over the "
        "bake under live traffic and takes all of it",
        "promoted",
        rollout="deployed",
    ),
)
# Where the demo's versions serve, and how each rolls out: a short bake, judged on the canary's own answers.
DEPLOY = {"endpoint": "demo-breast-cancer", "canary_percent": 50, "bake": "15s", "max_error_rate": 0.05,
          "min_requests": 5}  # fmt: skip
# A folder through which a watcher (the demo's test: a console and a browser page on the demo's stack, issue 45)
# holds the demo twice: once the stack is up and its state written, the story waits for `<gate>/start`; after the
# last line, the stack is stopped only once `<gate>/stop` exists. Each wait ends after the partition timeout.
GATE_VAR = "TRAINCTL_DEMO_GATE"


class DemoFailed(Exception):
    def __init__(self, step: str, detail: str):
        super().__init__(f"{step}: {detail}")
        self.step, self.detail = step, detail


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "demo",
        help="run the whole flow locally: data lands six times, 2-node DDP jobs train, the better model serves",
    )
    cmd.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each partition (default 600)")
    cmd.add_argument("--out", type=Path, default=None, help="where the loss curve goes (default .trainctl/demo)")
    cmd.set_defaults(run=run_demo)


def say(text: str) -> None:
    print(text, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    from local.stack import LocalStack, StackOptions

    if running_stack() is not None:
        say("a local stack is already running; stop it first with `trainctl local down`")
        return EXIT_FAILED
    lock = take_stack_lock()
    if lock is None:
        say(f"another local stack is starting in {local_dir()}")
        return EXIT_FAILED
    out_dir = args.out or local_dir().parent / "demo"
    started = time.monotonic()
    stack = LocalStack(StackOptions(reconcile_every=3.0), local_dir() / "run")
    try:
        say(f"1/5 starting local stack {stack.stack_id} (Pub/Sub emulator, fake-gcs-server, JobService, functions)…")
        state = stack.start(os.getpid())
        write_state(state)
        os.environ.update(state.emulator_env())
        _wait_at_gate("start", args.timeout)
        ended = _flow(state, args.timeout, out_dir, started)
        _wait_at_gate("stop", args.timeout)
        return ended
    except DemoFailed as failure:
        say(f"\nthe demo failed at step '{failure.step}': {failure.detail}")
        say(f"logs: {local_dir() / 'run'} (functions/, jobservice/jobs/<job id>/logs/)")
        return EXIT_FAILED
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        say("stopping the local stack…")
        stack.stop()
        if read_state() is not None:
            remove_state()


def _wait_at_gate(name: str, timeout: float) -> None:
    """With TRAINCTL_DEMO_GATE set, wait until the file `name` exists in that folder (see GATE_VAR)."""
    gate = os.environ.get(GATE_VAR)
    if not gate:
        return
    path = Path(gate) / name
    say(f"waiting for {path}")
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise DemoFailed("the gate", f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.2)


def _flow(state: Any, timeout: float, out_dir: Path, started: float) -> int:
    from trainctl.eventstream import EventStream

    names = state.names
    table, reference = _dataset()
    reference_uri = _upload_reference(state.project, names["data_bucket"], reference)
    say(
        f"2/5 scikit-learn's breast-cancer dataset ({table.num_rows + reference.num_rows} rows, "
        f"{table.num_columns - 1} features): {reference.num_rows} rows kept apart as the model's reference set "
        f"({reference_uri}), the rest landing in {len(PARTITIONS)} partitions, each offered to model {MODEL} as a new "
        "version"
    )
    champion = None
    with EventStream(state.project, names["events_topic"]) as stream:
        for number, partition in enumerate(PARTITIONS, start=1):
            marker = _upload_partition(state.project, names["data_bucket"], table, partition, reference_uri)
            say(f"3/5 partition {number}: {partition.story}\n    uploaded gs://{names['data_bucket']}/{marker}")
            ended = _follow(stream, partition, timeout, LiveTraffic(state, reference))
            if partition.decision == "promoted":
                champion = ended
    assert champion is not None  # the partitions promote at least once
    say("4/5 checking the champion: loading it and predicting…")
    predictions = _predict(
        champion.artifacts.model_dir, f"gs://{names['data_bucket']}/{PARTITIONS[-1].folder}/part-00000.csv"
    )
    curve = _loss_curve(champion.artifacts.model_dir, out_dir)
    say("5/5 done\n")
    say(_summary(champion, predictions, curve, time.monotonic() - started))
    say(f"\n$ .venv/bin/trainctl models show {MODEL}\n" + _registry_view())
    say("\n$ .venv/bin/trainctl report --since 1h\n" + _short_report())
    return 0


class LiveTraffic:
    """Callers of the model's endpoint while a canary bakes: a thread sending one reference row at a time through
    Vertex's Predict (the local endpoint), so the canary has live traffic to be judged on."""

    def __init__(self, state: Any, reference: Any):
        self.url = state.jobservice_rest_url.rstrip("/")
        self.control = state.jobservice_address
        self.rows = [{k: v for k, v in row.items() if k != "target"} for row in reference.to_pylist()]
        self.answered: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, endpoint: str) -> None:
        self._thread = threading.Thread(target=self._send, args=(endpoint,), daemon=True)
        self._thread.start()

    def break_serving(self, deployed_model_id: str) -> None:
        """Make the canary's server answer errors, as a model that breaks on live traffic would."""
        from local.jobservice.control import JobServiceControl

        JobServiceControl(self.control).disturb_predictions(deployed_model_id, error_fraction=0.5)

    def stop(self) -> str:
        """Stop sending; who answered what, in words ("" when nothing was sent)."""
        self._stop.set()
        if self._thread is None:
            return ""
        self._thread.join(timeout=10)
        return ", ".join(f"{who} {count}" for who, count in sorted(self.answered.items())) or "none"

    def _send(self, endpoint: str) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.aiplatform_v1 import PredictionServiceClient

        client = PredictionServiceClient(
            transport="rest", client_options={"api_endpoint": self.url}, credentials=AnonymousCredentials()
        )
        index = 0
        while not self._stop.wait(0.1):
            row = self.rows[index % len(self.rows)]
            index += 1
            try:
                who = f"deployed model {client.predict(endpoint=endpoint, instances=[row]).deployed_model_id}"
            except Exception:  # an error answer: what the canary's figures count
                who = "errors"
            self.answered[who] = self.answered.get(who, 0) + 1


def _follow(stream: Any, partition: Partition, timeout: float, traffic: LiveTraffic) -> Any:
    """Print the events of this partition's request until its model decision (or, for a partition the data check
    should stop, its rejection), and for a promoted version with a rollout until the rollout ends, sending live
    traffic while its canary bakes; its `succeeded` (or `rejected`) event."""
    try:
        return _events_of(stream, partition, timeout, traffic)
    finally:
        traffic.stop()


def _events_of(stream: Any, partition: Partition, timeout: float, traffic: LiveTraffic) -> Any:
    from trainctl.eventstream import format_event

    succeeded = None
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    prefix = f"gcs.{partition.folder.replace('/', '-')}-"  # a marker's request id: gcs.<folder>-<generation>
    for event in stream.follow(until=deadline):
        if not event.request_id.startswith(prefix):
            continue
        say("    " + format_event(event))
        if partition.decision == "rejected" and event.state == "rejected" and event.reason == "data":
            return event  # its errors, one per column, were printed with it
        if partition.decision == "rejected" and event.state == "accepted":
            raise DemoFailed("the data check", f"partition {partition.day} lost a column and was accepted")
        if partition.decision == "failed" and event.state == "failed" and event.reason == "data":
            return event  # the label check: its reason, in one line, was printed with it
        if partition.decision == "failed" and event.state == "succeeded":
            raise DemoFailed("the label check", f"partition {partition.day} has inverted labels and trained")
        if event.state == "succeeded":
            succeeded = event
        elif event.state in ("failed", "cancelled", "rejected"):
            detail = "; ".join(getattr(event, "errors", []) or [event.message])
            raise DemoFailed("training", f"the job ended {event.state}: {detail}")
        elif event.state in ("promoted", "held"):
            if event.state != partition.decision:
                raise DemoFailed("the model step", f"partition {partition.day} was {event.state}: {event.message}")
            if succeeded is None:
                raise DemoFailed("the model step", f"{event.state} arrived before succeeded")
            if partition.rollout is None:
                return succeeded
        elif event.state == "canary":
            traffic.start(event.endpoint)
            say(f"    (live traffic: one reference row every 0.1 s through {event.endpoint}:predict)")
            if partition.faulty:
                traffic.break_serving(event.deployed_model_id)
                say(f"    (fault injected: deployed model {event.deployed_model_id} answers half its requests "
                    "with errors)")  # fmt: skip
        elif event.state in ("deployed", "rolled_back"):
            answered = traffic.stop()
            if answered:
                say(f"    (answered during the bake: {answered})")
            if event.state != partition.rollout:
                raise DemoFailed("the rollout", f"partition {partition.day} was {event.state}: {event.message}")
            return succeeded
    raise DemoFailed("training", f"no model decision for partition {partition.day} within {timeout:.0f} s")


def _registry_view() -> str:
    """What `trainctl models show` prints of the demo's model (the stack is still up)."""
    from trainctl.models import run_show

    printed = io.StringIO()
    with redirect_stdout(printed):
        run_show(argparse.Namespace(name=MODEL, json=False))
    return printed.getvalue().rstrip()


def _short_report() -> str:
    """What an operator would see of this run: the report the ledger gives (the stack is still up)."""
    from trainctl.report import format_report, report_from_ledger

    # The outcome is filed right after `succeeded` is published; the model check above usually covers that.
    for _ in range(40):
        report = report_from_ledger(timedelta(hours=1))
        if report["total"]["requests"]:
            break
        time.sleep(0.25)
    return format_report(report)


def _dataset() -> tuple[Any, Any]:
    """(the rows the partitions are cut from, the reference set kept apart), from one seeded shuffle."""
    import numpy as np
    import pyarrow as pa
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()  # 569 rows, 30 numeric features, label 0/1
    columns = {name.replace(" ", "_"): data.data[:, i] for i, name in enumerate(data.feature_names)}
    table = pa.table({**columns, "target": data.target})
    table = table.take(np.random.default_rng(SHUFFLE_SEED).permutation(table.num_rows))
    kept = table.num_rows - REFERENCE_ROWS
    return table.slice(0, kept), table.slice(kept)


def _bucket(project: str, bucket_name: str) -> Any:
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    return storage.Client(project=project, credentials=AnonymousCredentials()).bucket(bucket_name)


def _csv(rows: Any) -> bytes:
    import pyarrow.csv as pa_csv

    text = io.BytesIO()
    pa_csv.write_csv(rows, text)
    return text.getvalue()


def _upload_reference(project: str, bucket_name: str, reference: Any) -> str:
    """The reference set, where its owner keeps it; its URI (the model block's `reference`)."""
    _bucket(project, bucket_name).blob(f"{REFERENCE_FOLDER}/part-00000.csv").upload_from_string(
        _csv(reference), "text/csv"
    )
    return f"gs://{bucket_name}/{REFERENCE_FOLDER}/"


def _upload_partition(project: str, bucket_name: str, table: Any, partition: Partition, reference: str) -> str:
    """The partition's rows as CSV shards, then its marker; the marker's name."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = table.slice(0, partition.rows) if partition.rows else table
    rows = rows.drop_columns(list(partition.dropped))
    if partition.inverted:
        flipped = pc.subtract(pa.scalar(1, rows.schema.field("target").type), rows.column("target"))
        rows = rows.set_column(rows.schema.get_field_index("target"), "target", flipped)
    bucket = _bucket(project, bucket_name)
    for shard in range(SHARDS):
        start, stop = shard * rows.num_rows // SHARDS, (shard + 1) * rows.num_rows // SHARDS
        bucket.blob(f"{partition.folder}/part-{shard:05d}.csv").upload_from_string(
            _csv(rows.slice(start, stop - start)), "text/csv"
        )
    marker = f"{partition.folder}/_SUCCESS"
    bucket.blob(marker).upload_from_string(json.dumps(marker_overrides(partition, reference)), "application/json")
    return marker


def marker_overrides(partition: Partition, reference: str) -> dict[str, Any]:
    """What a partition's marker holds: the overrides merged onto the stack's default rule. Every marker names the
    same model and reference set: the first creates the model with it, the others repeat the model's own."""
    return {
        **MARKER_OVERRIDES,
        "display_name": f"trainctl demo: breast cancer {partition.day} (2 nodes)",
        "trainer": {"builtin": "tabular", "hyperparameters": partition.hyperparameters},
        "model": {"name": MODEL, "reference": reference, "deploy": DEPLOY},
    }


def _predict(model_dir: str, data: str) -> int:
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "predictions.csv"
        result = subprocess.run(
            [sys.executable, "-m", "trainer.predict", "--model-dir", model_dir, "--data", data, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0 or not out.exists():
            raise DemoFailed("loading the model", (result.stderr or result.stdout).strip()[-2000:])
        return max(0, len(out.read_text().splitlines()) - 1)


def _read(uri: str) -> bytes:
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return storage.Client(credentials=AnonymousCredentials()).bucket(bucket).blob(name).download_as_bytes()


def _loss_curve(model_dir: str, out_dir: Path) -> Path | None:
    """Training and validation loss, the validation metric, the best epoch and the early stop, as a PNG."""
    from trainctl.curve import draw, parse_final, parse_history

    folder = model_dir.rstrip("/")
    history = parse_history(_read(folder + "/metrics.jsonl"))
    if not history:
        return None
    final = parse_final(_read(folder + "/metrics.json"))
    title = "trainctl demo: the champion (breast cancer, 2 nodes × 2 processes)"
    return draw(history, final, title, out_dir / "loss-curve.png")


def _summary(event: Any, predictions: int, curve: Path | None, seconds: float) -> str:
    from trainctl.eventstream import headline_metrics

    metrics = event.metrics
    world = metrics.get("world_size")
    nodes = event.cost.nodes if event.cost else None
    per_node = world // nodes if isinstance(world, int) and nodes else "?"
    keys = ("train_rows", "validation_rows", "epoch", "samples_per_second", "data_wait_fraction")
    lines = [
        "summary",
        f"  job          {event.job.name}",
        f"  layout       {nodes} nodes × {per_node} processes (world size {world}), DDP over gloo",
        f"  result       {headline_metrics(metrics, limit=1)}",
        f"  run          {headline_metrics({k: metrics[k] for k in keys if k in metrics})}",
        f"  model        {event.artifacts.model_dir}model.pt (loaded; {predictions} predictions written)",
        f"  metrics      {event.artifacts.metrics_uri}",
        f"  checkpoints  {event.artifacts.checkpoint_dir}",
        f"  TensorBoard  {event.artifacts.tensorboard_dir}",
        f"  loss curve   {curve or '(no history)'}",
        f"  wall time    {seconds:.0f} s",
    ]
    return "\n".join(lines)
