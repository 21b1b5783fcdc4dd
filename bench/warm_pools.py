"""Issue 43's warm-pool goals on the local stack: accepted → first step for a burst of same-shape requests, cold versus
on a warm pool trainctl manages (goal: warm median ≤ 0.2 × cold), and the pool deleted within one reconcile tick after
its keep_alive.

The live functions on the emulators and the local JobService (bench/stack.py), whose capacity model makes a cold node
take `--cold` seconds to provision (the capacity file's `provisioning`), reconcile ticking every `--tick` seconds as
Cloud Scheduler would. Built-in requests run by the trainer stand-in (tests/local/programs/fake_node.py: it writes the
trainer's progress record, its first step one second after it starts), so the figure is what provisioning adds, not a
trainer's import time on this machine. Two deployments side by side in one run:

- cold: no warm pool; a burst of `--burst` requests at once, each job provisioned cold;
- warm: the team's warm pool of the same shape (`--burst` replicas, keep_alive `--keep-alive`): one request creates it
  (its demand; it runs cold), then, once the pool is RUNNING, the same burst — each job runs on the pool.

Accepted → first step is each request's `succeeded` event's `first_step.total_seconds` (functions/ledger/first_step.py).
The deletion is timed from the last burst job's end (Vertex's end_time) plus keep_alive to the `pool_deleted` event.

    python bench/warm_pools.py [--burst 10] [--cold 60] [--tick 5] [--keep-alive 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, Ticker, run_benchmark  # noqa: E402
from functions.capacity.warm_pools import pool_id  # noqa: E402
from functions.teams import WarmPool  # noqa: E402
from local.names import LOCAL_PROJECT, LOCAL_REGION  # noqa: E402
from schemas.events import PoolDeleted, Succeeded  # noqa: E402
from tests.integration.deployment import TRAINER_STAND_IN, Deployment, builtin_request  # noqa: E402

GOAL_RATIO = 0.2
SHAPE = {"machine_type": "g2-standard-24"}  # 2 × L4 a node: a one-node job is a valid request
TEAM = "ml"


def teams(deployment: Deployment, pool: dict[str, Any] | None) -> str:
    """The teams setting: one team, reading the stand-in's dataset folders, with the pool if any."""
    team: dict[str, Any] = {"reads": ["stand-in/"]} | ({"warm_pools": [pool]} if pool else {})
    setting = {"default_team": TEAM, "teams": {TEAM: team}, "shared_intake_open": True}
    return json.dumps(setting | {"data_bucket": deployment.data_bucket})


def burst(deployment: Deployment, prefix: str, count: int) -> list[Succeeded]:
    """`count` requests at once; each one's `succeeded` event."""
    events = deployment.events()
    ids = [f"{prefix}-{i}" for i in range(count)]
    for request_id in ids:
        document = builtin_request(deployment, request_id, "--sleep", "1", "--steps", "10", "--metrics", "{}",
                                   resources=SHAPE)  # fmt: skip
        assert deployment.request(document) == 200, request_id
    done = [events.wait_for(request_id, "succeeded", timeout=600) for request_id in ids]
    assert all(isinstance(e, Succeeded) and e.first_step is not None for e in done), "a run has no first step"
    return done  # type: ignore[return-value]


def first_steps(events: list[Succeeded]) -> list[float]:
    return sorted(e.first_step.total_seconds for e in events if e.first_step is not None)


def pool_phase(deployment: Deployment, pid: str) -> str | None:
    blob = deployment.storage().bucket(deployment.control_bucket).blob(f"warm-pools/{pid}.json")
    return json.loads(blob.download_as_bytes())["phase"] if blob.exists() else None


def jobs_on_pool(stack: Stack, request_ids: set[str]) -> int:
    client = stack.jobservice.client()
    parent = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
    jobs = client.list_custom_jobs(request={"parent": parent, "filter": "labels.trainctl_key:*"})
    return sum(
        1 for job in jobs if job.labels.get("trainctl_request") in request_ids and job.job_spec.persistent_resource_id
    )


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    stack.jobservice.control.set_capacity({"provisioning": args.cold})
    spec = {**SHAPE, "replicas": args.burst, "keep_alive": args.keep_alive}
    cold = stack.deployment()
    cold.create(
        stack.work_dir / "functions-cold", TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN, TRAINCTL_TEAMS=teams(cold, None)
    )
    try:
        with Ticker(cold, args.tick):
            cold_runs = burst(cold, "cold", args.burst)
    finally:
        cold.stop()
    warm = stack.deployment()
    warm.create(
        stack.work_dir / "functions-warm", TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN, TRAINCTL_TEAMS=teams(warm, spec)
    )
    pid = pool_id(warm.control_bucket, TEAM, WarmPool.model_validate(spec))
    try:
        with Ticker(warm, args.tick):
            events = warm.events()
            burst(warm, "warmup", 1)  # its arrival asks for the pool; it runs cold
            events.wait_for(f"{pid}-1", "pool_created", timeout=120)
            deadline = time.monotonic() + args.cold + 120
            while pool_phase(warm, pid) != "running":
                assert time.monotonic() < deadline, "the pool never came up"
                time.sleep(0.5)
            warm_runs = burst(warm, "warm", args.burst)
            on_pool = jobs_on_pool(stack, {e.request_id for e in warm_runs})
            deleted = events.wait_for(f"{pid}-1", "pool_deleted", timeout=args.keep_alive + 10 * args.tick + 60)
    finally:
        warm.stop()
        stack.jobservice.control.clear_capacity()
    assert isinstance(deleted, PoolDeleted)
    last_end = max(e.timestamps.ended for e in warm_runs if e.timestamps and e.timestamps.ended)
    late = (deleted.time - last_end).total_seconds() - args.keep_alive
    cold_median, warm_median = statistics.median(first_steps(cold_runs)), statistics.median(first_steps(warm_runs))
    ratio = warm_median / cold_median
    figures = [
        Figure("accepted → first step, cold: median", f"{cold_median:.1f} s", "", None),
        Figure("accepted → first step, on the warm pool: median", f"{warm_median:.1f} s", "", None),
        Figure("warm median ÷ cold median", f"{ratio:.3f}", f"≤ {GOAL_RATIO}", ratio <= GOAL_RATIO),
        Figure("pool deleted after the last job's end + keep_alive", f"{late:.1f} s", f"≤ one tick ({args.tick:g} s)",
               late <= args.tick),
    ]  # fmt: skip
    notes = [
        f"burst of {args.burst} one-node {SHAPE['machine_type']} requests; cold provisioning {args.cold:g} s; "
        f"reconcile every {args.tick:g} s; keep_alive {args.keep_alive} s; {on_pool} of the warm burst's jobs ran on "
        "the pool",
        "accepted → first step, cold (s): " + ", ".join(f"{v:.1f}" for v in first_steps(cold_runs)),
        "accepted → first step, warm (s): " + ", ".join(f"{v:.1f}" for v in first_steps(warm_runs)),
        f"pool_deleted: lived {deleted.lived_seconds:.0f} s, idle {deleted.idle_seconds:.0f} s, "
        f"${deleted.idle_usd:.2f} charged to team {TEAM}",
    ]
    return figures, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--cold", type=float, default=60.0, help="seconds a cold node takes to provision")
    parser.add_argument("--tick", type=float, default=5.0, help="seconds between reconcile ticks")
    parser.add_argument("--keep-alive", type=int, default=20, help="the pool's keep_alive, in seconds")
    parser.add_argument("--results", type=Path, default=RESULTS)
    run_benchmark("Issue 43: warm pools on the local stack", parser.parse_args(), run)


if __name__ == "__main__":
    main()
