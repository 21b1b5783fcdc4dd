"""Issue 41's rollout goals on the local stack: promoted → canary answering ≤ 15 s, and the bake's verdict ≤ one
reconcile tick after the bake ends.

The live functions on the emulators and the local JobService (bench/stack.py), built-in requests run by the trainer
stand-in beside a real model folder (so each version serves with `python -m trainer.serve`), reconcile ticking every
`--tick` seconds as Cloud Scheduler would. Per round: a first version takes a fresh endpoint, then a better one is
promoted; measured from its `promoted` event's time to the first prediction the canary answers (a client sending one
row every 0.1 s through the endpoint), and from the end of the bake (`canary`'s bake_until) to `deployed`.

    python bench/rollout.py [--rounds 3] [--tick 3] [--bake 5] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ is on sys.path, the repository root is not

from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud.aiplatform_v1 import PredictionServiceClient  # noqa: E402

from bench.report import RESULTS, Figure  # noqa: E402
from bench.stack import Stack, Ticker, run_benchmark  # noqa: E402
from schemas.events import Canary  # noqa: E402
from tests.integration.deployment import (  # noqa: E402
    TRAINER_STAND_IN,
    Deployment,
    accuracy,
    builtin_request,
    train_breast_cancer_model,
)

GOAL_CANARY_SECONDS = 15.0


def first_answer_from(url: str, endpoint: str, deployed_model_id: str, row: dict, timeout: float) -> datetime:
    """When the canary first answers a prediction, a row sent every 0.1 s through the endpoint."""
    client = PredictionServiceClient(transport="rest", client_options={"api_endpoint": url},
                                     credentials=AnonymousCredentials())  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.predict(endpoint=endpoint, instances=[row]).deployed_model_id == deployed_model_id:
            return datetime.now(UTC)
        time.sleep(0.1)
    raise RuntimeError(f"the canary {deployed_model_id} answered nothing in {timeout:.0f} s")


def one_round(deployment: Deployment, trained: Path, bake: int, row: dict) -> tuple[float, float]:
    model, endpoint = f"m-{uuid.uuid4().hex[:10]}", f"e-{uuid.uuid4().hex[:10]}"
    deploy = {"endpoint": endpoint, "canary_percent": 50, "bake": f"{bake}s", "max_error_rate": 0.05}
    events = deployment.events()
    first, second = f"b1-{model}", f"b2-{model}"
    for request_id, metrics in ((first, accuracy(0.80)), (second, accuracy(0.90, champion=0.80))):
        document = builtin_request(deployment, request_id, "--metrics", json.dumps(metrics), "--model-from",
                                   str(trained), model={"name": model, "deploy": deploy})  # fmt: skip
        assert deployment.request(document) == 200
        events.wait_for(request_id, "deployed" if request_id == first else "canary", timeout=300)
    promoted, canary = events.of(second, "promoted")[0], events.of(second, "canary")[0]
    assert isinstance(canary, Canary) and canary.deployed_model_id is not None
    answered = first_answer_from(deployment.vertex_endpoint, canary.endpoint, canary.deployed_model_id, row, 60)
    deployed = events.wait_for(second, "deployed", timeout=120)
    return (answered - promoted.time).total_seconds(), (deployed.time - canary.bake_until).total_seconds()


def run(stack: Stack, args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    row = dict(zip([n.replace(" ", "_") for n in data.feature_names], map(float, data.data[0]), strict=True))
    trained = train_breast_cancer_model(Path(tempfile.mkdtemp(prefix="bench-rollout-", dir=stack.work_dir)))
    deployment = stack.deployment()
    deployment.create(stack.work_dir / "functions", TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN)
    try:
        with Ticker(deployment, args.tick):
            rounds = [one_round(deployment, trained, args.bake, row) for _ in range(args.rounds)]
    finally:
        deployment.stop()
    to_canary, verdict = [r[0] for r in rounds], [r[1] for r in rounds]
    figures = [
        Figure("promoted → the canary answers, worst of rounds", f"{max(to_canary):.1f} s",
               f"≤ {GOAL_CANARY_SECONDS:.0f} s", max(to_canary) <= GOAL_CANARY_SECONDS),
        Figure("bake end → deployed, worst of rounds", f"{max(verdict):.1f} s", f"≤ one tick ({args.tick:g} s)",
               max(verdict) <= args.tick),
    ]  # fmt: skip
    notes = [
        f"{args.rounds} rounds; reconcile every {args.tick:g} s; bake {args.bake} s; canary 50 %",
        "per round (to canary answering, bake end to verdict): "
        + ", ".join(f"({a:.1f} s, {b:.1f} s)" for a, b in rounds),
    ]
    return figures, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tick", type=float, default=3.0, help="seconds between reconcile ticks")
    parser.add_argument("--bake", type=int, default=5, help="the canary's bake, in seconds")
    parser.add_argument("--results", type=Path, default=RESULTS)
    run_benchmark("Issue 41: rollout on the local stack", parser.parse_args(), run)


if __name__ == "__main__":
    main()
