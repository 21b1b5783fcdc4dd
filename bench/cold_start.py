"""Cold start (issue 8): time and peak RSS from process start to the first event handled, in fresh processes.

Paths, each through the deploy archive's root main.py (terraform/root_main.py) on the emulators and the local
JobService: (a) a data shard upload, ignored; (b) a marker delivered again, a duplicate; (c) a new marker that
submits a job; (d) a new marker that submits a job of a model with a champion, so the data check reads the
champion's schema.json and the new shard's header first (issue 27, point 2). The baseline, measured in the same
run, is what Google's samples do: a main.py importing
`functions_framework` and `google.cloud.aiplatform` at module level, with a handler that only logs the event.
Rounds interleave the paths (a warm-up round first, discarded), so load that comes and goes hits them alike.
Each path's CPU seconds (user + sys) are measured too: a deployed function runs on the share of a vCPU its
memory tier gives (bench/function_tiers.py), and the figures say which tier keeps the cold submission within
its goal. Every marker has a data shard in its folder, as the controller's admission checks the dataset.

The project has an L4 limit in Cloud Quotas (the stand-in's capacity model), served among the stand-in's
realistically long listing (issue 25 point 7), and each path's Cloud Quotas calls are counted; `--quota-latency`
adds a round trip's time to each of those calls, as Google's API would take.

    python bench/cold_start.py [--runs 7] [--warmups 1] [--quota-latency 0] [--profile] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.function_tiers import VCPU_OF_MEMORY, estimated_seconds, smallest_tier  # noqa: E402
from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, run_benchmark  # noqa: E402
from local.names import LOCAL_PROJECT, LOCAL_REGION  # noqa: E402
from schemas.catalog import quota_metric  # noqa: E402
from tests.integration.deployment import Deployment  # noqa: E402

CHILD = REPO_ROOT / "bench" / "cold_child.py"
TARGET = "on_dataset_upload"
BASELINE_MAIN = f'''"""The baseline: Google's samples import the Vertex AI SDK at module level."""
import functions_framework
from google.cloud import aiplatform  # noqa: F401


@functions_framework.cloud_event
def {TARGET}(cloud_event):
    data = cloud_event.data
    print(f"Bucket: {{data['bucket']}} File: {{data['name']}}")
'''
MIB = 1024
# The template's g2-standard-24 draws on L4 quota: a limit no run comes near, so every submission is admitted.
CAPACITY = {"default_quotas": {"custom_model_training_nvidia_l4_gpus": 100_000}}
# Path (d)'s model: its champion (registered by the bench) was trained on the shards' columns, `a` and `y`.
COLD_MODEL = "cold-start-model"
MODEL_FOLDER = "models/"
CHAMPION_SCHEMA = {
    "schema_version": 1,
    "format": "csv",
    "target": "y",
    "task": "classification",
    "rows": 1,
    "columns": [
        {"name": "a", "type": "number", "physical": "int64", "role": "feature", "missing_rate": 0.0, "stats": {}},
        {"name": "y", "type": "number", "physical": "int64", "role": "target", "missing_rate": 0.0, "stats": {}},
    ],
}


@dataclass
class ColdPath:
    """One measured path: the source it loads, how to make its event, the log line that proves it went right."""

    name: str
    source: Path
    event: Callable[[], tuple[dict[str, str], bytes]]
    expect: str
    runs: list[dict] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(run[key] for run in self.runs)


def start_child(
    source: Path, event: tuple[dict[str, str], bytes], env: dict[str, str], *flags: str
) -> subprocess.CompletedProcess:
    headers, body = event
    argv = [sys.executable, *flags, str(CHILD), str(source), TARGET, json.dumps([headers, body.decode()])]
    env = {**env, "BENCH_T0": repr(time.monotonic())}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


def run_child(source: Path, event: tuple[dict[str, str], bytes], env: dict[str, str], expect: str) -> dict:
    """One cold start; its figures, after checking the event was handled as `expect` (a log line) says."""
    done = start_child(source, event, env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("BENCH-RESULT "):
        raise RuntimeError(f"cold start failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    if result["status"] != 200 or expect not in done.stdout:
        raise RuntimeError(f"the event was not handled as expected ({expect!r}):\n{done.stdout[-3000:]}")
    return result


def importtime_summary(source: Path, event: tuple[dict[str, str], bytes], env: dict[str, str], top: int = 6) -> str:
    """The heaviest top-level imports of one cold start (python -X importtime), cumulative milliseconds."""
    heaviest: dict[str, int] = {}
    for line in start_child(source, event, env, "-X", "importtime").stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        # "import time: self | cumulative | name", the name indented by nesting: keep the outermost imports.
        if len(parts) != 3 or not parts[1].strip().isdigit() or parts[2].startswith("  "):
            continue
        name = parts[2].strip()
        root = ".".join(name.split(".")[: 3 if name.startswith("google.") else 2])
        heaviest[root] = heaviest.get(root, 0) + int(parts[1])
    ranked = sorted(heaviest.items(), key=lambda item: -item[1])[:top]
    return ", ".join(f"{name} {us / 1000:.0f} ms" for name, us in ranked)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="measured runs per path (default 7)")
    parser.add_argument("--warmups", type=int, default=1, help="discarded rounds before them (default 1)")
    parser.add_argument(
        "--quota-latency", type=float, default=0.0, help="seconds the Cloud Quotas stand-in takes per call (default 0)"
    )
    parser.add_argument("--profile", action="store_true", help="add a -X importtime summary of each path")
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the figures are appended to")
    return parser.parse_args(argv)


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    control = stack.jobservice.control
    control.set_capacity(CAPACITY)
    control.slow_quota_reads(args.quota_latency)
    try:
        return measure(stack, args)
    finally:  # the JobService may be a test session's, shared with later tests
        control.clear_capacity()
        control.slow_quota_reads(0.0)


def measure(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    with tempfile.TemporaryDirectory(prefix="trainctl-cold-") as tmp:
        deployment = stack.deployment()
        deployment.provision()
        deploy_main = Path(tmp, "deploy", "main.py")
        baseline_main = Path(tmp, "baseline", "main.py")
        for main_py, text in (
            (deploy_main, (REPO_ROOT / "terraform" / "root_main.py").read_text()),
            (baseline_main, BASELINE_MAIN),
        ):
            main_py.parent.mkdir()
            main_py.write_text(text)
        env = {**os.environ, **deployment.settings_env(), "PYTHONPATH": str(REPO_ROOT)}
        rounds = args.warmups + args.runs
        control = stack.jobservice.control
        # Submitted jobs wait in the queue: this measures the controller, not the fake training's processes.
        control.hold_next_in_queue(seconds=3600, count=2 * rounds + 2)

        def dataset(folder: str) -> tuple[dict[str, str], bytes]:
            """A data shard, then the marker that announces the folder: the marker's event."""
            deployment.upload(f"{folder}part-0.csv", "a,y\n1,0\n")
            return deployment.storage_event(deployment.upload(f"{folder}_SUCCESS"))

        register_champion(deployment, env["TRAINCTL_VERTEX_ENDPOINT"])
        # Path (d)'s rule: the built-in trainer (whose kind the champion has) feeding COLD_MODEL.
        rules = json.loads(env["TRAINCTL_TRIGGER_RULES"])
        rules[f"gs://{deployment.data_bucket}/{MODEL_FOLDER}"] = {
            "dataset": {"target": "y"},
            "trainer": {"builtin": "tabular"},
            "resources": {"machine_type": "g2-standard-24"},
            "model": {"name": COLD_MODEL},
        }
        env["TRAINCTL_TRIGGER_RULES"] = json.dumps(rules)

        shard = deployment.storage_event(deployment.upload("churn/cold/part-0001.csv", "a,y\n1,0\n"))
        duplicate = dataset("churn/cold-duplicate/")
        run_child(deploy_main, duplicate, env, '"message": "submitted"')  # its first delivery, not measured
        fresh = iter(range(1_000_000))

        def new_marker() -> tuple[dict[str, str], bytes]:
            return dataset(f"churn/cold-{next(fresh)}/")

        def new_model_marker() -> tuple[dict[str, str], bytes]:
            return dataset(f"{MODEL_FOLDER}cold-{next(fresh)}/")

        paths = [
            ColdPath(
                "baseline: functions_framework + google.cloud.aiplatform", baseline_main, lambda: shard, "Bucket: "
            ),
            ColdPath("(a) ignored shard", deploy_main, lambda: shard, '"message": "not a marker; ignored"'),
            ColdPath("(b) duplicate marker", deploy_main, lambda: duplicate, '"message": "duplicate delivery; starts'),
            ColdPath("(c) submitting marker", deploy_main, new_marker, '"message": "submitted"'),
            ColdPath(
                "(d) submitting marker, a model with a champion (data check)",
                deploy_main,
                new_model_marker,
                '"errors": 0, "new_columns": 0}',
            ),
        ]
        for round_ in range(rounds):
            shift = round_ % len(paths)
            for path in paths[shift:] + paths[:shift]:
                event, calls_before = path.event(), control.quota_reads()
                result = run_child(path.source, event, env, path.expect)
                result["quota_calls"] = control.quota_reads() - calls_before
                if round_ >= args.warmups:
                    path.runs.append(result)
            print(f"round {round_ + 1}/{rounds} done", flush=True)
        profiles = [f"{p.name}: {importtime_summary(p.source, p.event(), env)}" for p in paths] if args.profile else []

    baseline = paths[0]
    figures = [
        Figure(f"{baseline.name}: time to first event", f"{baseline.median('handled_s'):.3f} s"),
        Figure(f"{baseline.name}: peak RSS", f"{max(r['peak_rss_kib'] for r in baseline.runs) / MIB:.0f} MiB"),
    ]
    measured = ((paths[1], 0.30, 120), (paths[2], 0.30, 120), (paths[3], 0.35, 160), (paths[4], 0.35, 160))
    for path, ratio_goal, rss_goal in measured:
        seconds, ratio = path.median("handled_s"), path.median("handled_s") / baseline.median("handled_s")
        rss = max(r["peak_rss_kib"] for r in path.runs) / MIB
        vertex = "Vertex client imported" if path.runs[0]["vertex_client"] else "no Vertex client"
        figures += [
            Figure(f"{path.name}: time to first event", f"{seconds:.3f} s ({vertex})"),
            Figure(f"{path.name}: time / baseline", f"{ratio:.2f}", f"≤ {ratio_goal:.2f}", ratio <= ratio_goal),
            Figure(f"{path.name}: peak RSS", f"{rss:.0f} MiB", f"≤ {rss_goal} MiB", rss <= rss_goal),
            Figure(f"{path.name}: CPU (user + sys)", f"{path.median('cpu_s'):.3f} s"),
            Figure(f"{path.name}: Cloud Quotas calls", f"{path.median('quota_calls'):.0f}"),
        ]
    figures += cpu_figures(baseline, paths[3], goal=0.35)
    figures += cpu_figures(baseline, paths[4], goal=0.35)[1:]  # the baseline's CPU row is in already
    figures += quota_read_figures(stack, env["TRAINCTL_QUOTAS_ENDPOINT"], args.runs)
    figures += data_check_figures(deployment, args.runs)
    spread = "; ".join(
        f"{p.name.split(':')[0]} {min(r['handled_s'] for r in p.runs):.3f}–{max(r['handled_s'] for r in p.runs):.3f} s"
        f" (loaded by {p.median('loaded_s'):.3f} s)"
        for p in paths
    )
    notes = [
        f"median of {args.runs} fresh processes per path after {args.warmups} warm-up round(s); peak RSS is the "
        "largest of the runs (VmHWM); time is from the parent's stamp before starting the process",
        f"Cloud Quotas stand-in: {args.quota_latency:.3f} s per call added; its listing of aiplatform.googleapis.com "
        "holds the L4 limit among some four hundred other quotas (local/jobservice/quota_listing.py)",
        f"range of the runs, and the median time by which the source was loaded (imports done): {spread}",
        *(f"-X importtime, heaviest top-level imports of {profile}" for profile in profiles),
    ]
    return figures, notes


def quota_read_figures(stack: Stack, endpoint: str, runs: int) -> list[Figure]:
    """The cold submission's quota read alone, in this process: a fresh client (as a cold function instance has)
    asked for the template's L4 limit, `runs` times."""
    from functions.cloud.quotas import GpuQuotas

    control, seconds = stack.jobservice.control, []
    calls_before = control.quota_reads()
    for _ in range(runs):
        client = GpuQuotas(LOCAL_PROJECT, endpoint)
        start = time.perf_counter()
        limit = client.limit(quota_metric("NVIDIA_L4"), LOCAL_REGION)
        seconds.append(time.perf_counter() - start)
        if limit != CAPACITY["default_quotas"]["custom_model_training_nvidia_l4_gpus"]:
            raise RuntimeError(f"the L4 limit read back as {limit}")
    calls = (control.quota_reads() - calls_before) / runs
    name = "cold quota read alone (a fresh GpuQuotas, the L4 limit)"
    return [Figure(f"{name}: time", f"{statistics.median(seconds) * 1000:.0f} ms ({calls:.0f} calls)")]


def register_champion(deployment: Deployment, endpoint: str) -> None:
    """Path (d)'s model in the local registry, its `champion` a version whose folder holds CHAMPION_SCHEMA."""
    from functions.cloud.gcs import Gcs
    from functions.cloud.registry import ModelRegistry
    from functions.cloud.registry_types import Upload

    folder = f"gs://{deployment.control_bucket}/cold-start-champion/model/"
    Gcs(LOCAL_PROJECT).write(deployment.control_bucket, "cold-start-champion/model/schema.json",
                             json.dumps(CHAMPION_SCHEMA).encode(), 0)  # fmt: skip
    registry = ModelRegistry(LOCAL_PROJECT, LOCAL_REGION, endpoint)
    model = {"displayName": COLD_MODEL, "artifactUri": folder, "containerSpec": {"imageUri": "localhost/cold:1"}}
    upload = registry.upload({"modelId": COLD_MODEL, "model": model})
    for _ in range(100):
        if isinstance(upload, Upload) and not upload.done:
            time.sleep(0.1)
            upload = registry.operation(upload.operation) or upload
    version = registry.get(registry.model_name(COLD_MODEL))
    if version is None:
        raise RuntimeError(f"the bench's model {COLD_MODEL} was not registered: {upload}")
    registry.merge_aliases(version.name, ["champion"])


def data_check_figures(deployment: Deployment, runs: int) -> list[Figure]:
    """The data check alone, in this process, `runs` times with a fresh Storage client each (as a cold instance
    has): the champion's schema.json read, the dataset listed, the first shard's first bytes read and compared."""
    from functions.cloud.gcs import Gcs
    from functions.data.admission import check_dataset
    from schemas.request import TrainingJobRequest

    deployment.upload("churn/cold-check/part-0.csv", "a,y\n1,0\n")
    request = TrainingJobRequest.model_validate(
        {
            "api_version": "trainctl/v1",
            "request_id": "cold-check",
            "dataset": {"uri": f"gs://{deployment.data_bucket}/churn/cold-check/", "target": "y"},
            "trainer": {"builtin": "tabular"},
            "resources": {"machine_type": "g2-standard-24"},
            "model": {"name": COLD_MODEL},
        }
    )
    folder = f"gs://{deployment.control_bucket}/cold-start-champion/model/"
    seconds = []
    for _ in range(runs):
        gcs = Gcs(LOCAL_PROJECT)
        start = time.perf_counter()
        check = check_dataset(gcs, deployment.control_bucket, request, folder, "1")
        seconds.append(time.perf_counter() - start)
        if not check.checked or check.errors:
            raise RuntimeError(f"the data check did not pass: {check}")
    name = "cold data check alone (a fresh Storage client: schema.json, listing, the shard's first bytes)"
    return [Figure(f"{name}: time", f"{statistics.median(seconds) * 1000:.0f} ms")]


def cpu_figures(baseline: ColdPath, submission: ColdPath, goal: float) -> list[Figure]:
    """CPU seconds of each path, and the smallest function tier on which the cold submission is estimated to stay
    within `goal` × the baseline's time on whole cores: the time the figures above promise."""
    limit = goal * baseline.median("handled_s")
    wall, cpu = submission.median("handled_s"), submission.median("cpu_s")
    tier = smallest_tier(wall, cpu, limit)
    estimates = ", ".join(
        f"{memory} {estimated_seconds(wall, cpu, vcpu):.1f} s" for memory, vcpu in VCPU_OF_MEMORY.items() if vcpu <= 2
    )
    return [
        Figure(f"{baseline.name}: CPU (user + sys)", f"{baseline.median('cpu_s'):.3f} s"),
        Figure(f"{submission.name}: estimated cold time by memory tier", estimates, f"≤ {limit:.2f} s"),
        Figure(f"{submission.name}: smallest tier within the goal", tier or "none"),
    ]


def main(argv: list[str] | None = None) -> None:
    run_benchmark("cold_start", parse_args(argv), run)


if __name__ == "__main__":
    main()
