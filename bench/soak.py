"""Soak: the local stack under a random mix of requests, duplicates, bad input, marker uploads, preemptions,
crashed function workers, requests whose first rung is stocked out (so they move down their capacity ladder) and
requests that register a version of one of two models (so promotions race), all under a GPU quota that makes
bursts wait in trainctl's queue; then the invariants that must survive all of it.

    python bench/soak.py [--minutes 10] [--seed 7]     # appends the result to bench/RESULTS.md

Invariants checked at the end (after the stack has drained):
  - one CustomJob per (request, attempt) that was submitted, and no job for anything never accepted;
  - every accepted request reached exactly one terminal event (succeeded, failed or cancelled);
  - no ce-id was published with two different payloads;
  - one registered version per succeeded model request (in the events and in the registry), one decision each,
    and never two champions: no promotion replaced a champion another promotion had already replaced;
  - no process of the stack is left after `trainctl local down`;
  - with two teams (and the default one) sharing the L4 quota by fair share, their requests published on each
    team's own topic: never more on-demand L4 GPUs in jobs at once than the quota (issue 32).
Jobs run the small test program (tests/local/programs/fake_node.py), so the soak measures the controller,
not training.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from functions.models.versions import KEY_LABEL  # noqa: E402
from local.jobservice.client import JobServiceControl, job_service_client  # noqa: E402
from local.processes import leftover_processes  # noqa: E402
from local.pubsub_emulator import pull_now  # noqa: E402
from local.stack_state import LOCAL_DIR_VAR, STACK_MARKER_VAR, StackState, read_state  # noqa: E402
from schemas.events import TERMINAL_STATES, parse_event  # noqa: E402

FAKE_IMAGE = "localhost/tests/fake-node"
IMAGE_MAP = json.dumps({FAKE_IMAGE: ["python", "tests/local/programs/fake_node.py"]})
PINNED_IMAGE = f"{FAKE_IMAGE}@sha256:{'0' * 64}"
REFERENCE = "gs://trainctl-local-trainctl-data/soak/x/"  # the models' reference set: any rows will do here
TEMPLATE: dict[str, dict[str, Any]] = {
    "dataset": {"target": "y"},
    "trainer": {"image": f"{FAKE_IMAGE}:1", "args": ["--sleep", "1", "--metrics", '{"rows": 1}']},
    "resources": {"machine_type": "g2-standard-24"},
    "scheduling": {"restart_job_on_worker_restart": False, "max_attempts": 3},
}
# A function worker the soak kills while it holds a claim leaves it to reconcile after the lease: the local
# stack's 60 s would make the run wait a minute for it (longer than any handler here takes, as it must be).
LEASE_SECONDS = 20
# After the last request has ended, how long the events must stay quiet before the soak counts them.
QUIET_SECONDS = 4.0
# How long a preemption waits for a job to be running (a request's job starts seconds after it is sent).
PREEMPT_WAIT_SECONDS = 10.0
# Relative weights of the actions.
MIX = {
    "request": 5,
    "duplicate": 3,
    "bad_request": 2,
    "marker": 3,
    "preempt": 1,
    "kill_worker": 1,
    "ladder": 2,
    "model": 5,
}
# The models the soak's model requests register versions of: few, so that their promotions contend.
MODELS = ("soak-churn", "soak-fraud")
# The local JobService's capacity model for the soak: Spot L4 is always stocked out (a ladder starting there
# moves down), and the project has 12 on-demand L4 GPUs (6 jobs at once; bursts wait in trainctl's queue).
CAPACITY = {
    "regions": {
        "us-central1": {
            "quotas": {"custom_model_training_nvidia_l4_gpus": 12},
            "machines": [{"machine_type": "g2-standard-24", "strategy": "spot", "stockouts": "always"}],
        }
    }
}
# Two teams besides the default one (whose requests come on the shared topic, which the operator opened: issue 40,
# point 5), sharing the 12 L4 GPUs. The markers' folder soak/ is the default team's; the two teams read the Pub/Sub
# requests' dataset (and the models' reference set) by the operator's grant.
L4_QUOTA, L4_METRIC = 12, "custom_model_training_nvidia_l4_gpus"
TEAMS = {
    "default_team": "shared",
    "shared_intake_open": True,
    "teams": {
        "shared": {"data_prefixes": ["soak/"]},
        "red": {"quota": {L4_METRIC: 4}, "borrow_limit": 8, "reads": ["soak/x/"]},
        "blue": {"weight": 2, "quota": {L4_METRIC: 8}, "borrow_limit": 4, "reads": ["soak/x/"]},
    },
    # The models' owner lets every team feed them (issue 38), so that model requests arrive on any topic and race.
    "models": {model: {"owner": "shared", "grants": ["red", "blue"]} for model in ("soak-churn", "soak-fraud")},
}


@dataclass
class Soak:
    local_dir: Path
    seed: int
    rng: random.Random = field(init=False)
    # The actions' order has a generator of its own, so that a seed names the same actions however the
    # actions themselves draw (their draws depend on what is running at the time).
    order: random.Random = field(init=False)
    actions: Counter = field(default_factory=Counter)
    preempted: int = 0  # preemptions that hit a running job (the others found none running)
    sent: list[bytes] = field(default_factory=list)
    model_requests: set[str] = field(default_factory=set)  # request keys of the requests with a model block
    state: StackState = field(init=False)  # the stack that `up` started

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.order = random.Random(self.seed)
        self.topics = random.Random(self.seed)  # which team's topic each message goes to: its own draws

    # ---- the stack -----------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("TRAINCTL_", "PUBSUB_", "STORAGE_", "CLOUDSDK_"))
        }
        return env | {LOCAL_DIR_VAR: str(self.local_dir), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}

    def trainctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "trainctl", *args],
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def up(self) -> None:
        data_bucket = "trainctl-local-trainctl-data"
        capacity = self.local_dir / "capacity.json"
        capacity.write_text(json.dumps(CAPACITY))
        teams = self.local_dir / "teams.json"
        teams.write_text(json.dumps(TEAMS))
        started = self.trainctl(
            "local", "up", "--detach", "--reconcile-every", "2", "--image-map", IMAGE_MAP,
            "--allow-image-prefix", "localhost/tests/",
            "--trigger-rules", json.dumps({f"gs://{data_bucket}/soak/": TEMPLATE}),
            "--capacity", str(capacity), "--lease", str(LEASE_SECONDS), "--teams", str(teams),
        )  # fmt: skip
        if started.returncode != 0:
            raise RuntimeError(f"trainctl local up failed:\n{started.stdout}\n{started.stderr}")
        state = read_state(self.local_dir)
        if state is None:
            raise RuntimeError(f"trainctl local up reported success but recorded no stack in {self.local_dir}")
        self.state = state
        import google.cloud.pubsub_v1 as pubsub_v1
        import google.cloud.storage as storage
        from google.auth.credentials import AnonymousCredentials

        # The clients read the emulator variables when they are built; this process's environment (a test
        # session's, say) is left as it was.
        saved = {name: os.environ.get(name) for name in self.state.emulator_env()}
        os.environ.update(self.state.emulator_env())
        try:
            self.publisher = pubsub_v1.PublisherClient()
            self.subscriber = pubsub_v1.SubscriberClient()
            self.storage = storage.Client(project=self.state.project, credentials=AnonymousCredentials())
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        self.jobs_client = job_service_client(self.state.jobservice_address)
        self.control = JobServiceControl(self.state.jobservice_address)
        project, names = self.state.project, self.state.names
        self.requests_topic = self.publisher.topic_path(project, names["requests_topic"])
        self.team_topics = [
            self.publisher.topic_path(project, f"{names['requests_topic']}-{team}") for team in ("red", "blue")
        ]
        self.events_sub = self.subscriber.subscription_path(project, f"soak-{uuid.uuid4().hex[:8]}")
        events_topic = self.publisher.topic_path(project, names["events_topic"])
        self.subscriber.create_subscription(name=self.events_sub, topic=events_topic)
        self.data_bucket = self.storage.bucket(names["data_bucket"])
        # The dataset of the Pub/Sub requests: admission refuses one with no data in it.
        self.data_bucket.blob("soak/x/part-0.csv").upload_from_string("a,y\n1,0\n")

    def model_versions(self) -> dict[str, list[Any]]:
        """Each of MODELS' versions in the local Model Registry, by model id (the stock client, over REST)."""
        from google.api_core.exceptions import NotFound
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

        client = ModelServiceClient(
            transport="rest",
            client_options={"api_endpoint": self.state.jobservice_rest_url.rstrip("/")},
            credentials=AnonymousCredentials(),
        )
        parent = f"projects/{self.state.project}/locations/{self.state.region}"
        versions: dict[str, list[Any]] = {}
        for model in MODELS:
            try:
                versions[model] = list(client.list_model_versions(name=f"{parent}/models/{model}"))
            except NotFound:
                pass  # no model request of it succeeded
        return versions

    def down(self) -> list[Any]:
        stack_id = self.state.stack_id
        self.trainctl("local", "down")
        return leftover_processes(stack_id, var=STACK_MARKER_VAR)

    # ---- actions -------------------------------------------------------------------------------------

    def publish(self, payload: bytes) -> None:
        """On the shared topic (the default team) or one of the two teams' own."""
        topic = self.topics.choice([self.requests_topic, *self.team_topics])
        self.publisher.publish(topic, payload).result(timeout=30)

    def request(self, **sections: Any) -> None:
        document = {"api_version": "trainctl/v1", "request_id": f"soak-{uuid.uuid4().hex[:10]}", **TEMPLATE}
        document["dataset"] = {"uri": "gs://trainctl-local-trainctl-data/soak/x/", "target": "y"}
        document["trainer"] = dict(TEMPLATE["trainer"], args=["--sleep", str(self.rng.choice([0.5, 1, 3, 6]))])
        payload = json.dumps(document | sections).encode()
        self.sent.append(payload)
        self.publish(payload)

    def model(self) -> None:
        """A request that registers a version of one of MODELS, with a random accuracy on the models' reference set
        and a random paired interval of its improvement over the champion (issue 38): promoted when the interval's
        lower end is above 0, else held. Own code feeding a model is named by its digest."""
        request_id = f"soak-model-{uuid.uuid4().hex[:10]}"
        accuracy, gain = round(self.rng.uniform(0.5, 0.99), 3), round(self.rng.uniform(-0.2, 0.2), 3)
        metrics = {
            "task": "classification",
            "val_accuracy": accuracy,
            "reference_val_accuracy": accuracy,
            "champion_reference_val_accuracy": round(accuracy - gain, 3),
            "reference_improvement_val_accuracy": {"point": gain, "low": gain - 0.05, "high": gain + 0.05},
            "reference_rows": 100,
            "reference_confidence": 0.95,
        }
        self.model_requests.add(f"request:{request_id}")
        self.request(
            request_id=request_id,
            trainer=dict(
                TEMPLATE["trainer"], image=PINNED_IMAGE, args=["--sleep", "0.5", "--metrics", json.dumps(metrics)]
            ),
            model={
                "name": self.rng.choice(MODELS),
                "metric": "val_accuracy",
                "goal": "maximize",
                "reference": REFERENCE,
            },
        )

    def ladder(self) -> None:
        """A request whose first rung (Spot L4) is stocked out: it moves down to on-demand L4."""
        self.request(
            scheduling=dict(TEMPLATE["scheduling"], strategy="spot"),
            fallbacks=[{"strategy": "standard", "resources": TEMPLATE["resources"]}],
        )

    def duplicate(self) -> None:
        if self.sent:
            self.publish(self.rng.choice(self.sent))

    def bad_request(self) -> None:
        bad = self.rng.choice(
            [
                b"\xff\xfe",
                b"a: &x [1]\nb: *x",
                json.dumps({"api_version": "trainctl/v1", "request_id": "Bad ID"}).encode(),
                json.dumps(
                    {"api_version": "trainctl/v1", "request_id": "x", "resources": {"machine_type": "?"}}
                ).encode(),
            ]
        )
        self.publish(bad)

    def marker(self) -> None:
        folder = f"soak/{uuid.uuid4().hex[:8]}"
        for i in range(self.rng.randint(1, 3)):
            self.data_bucket.blob(f"{folder}/part-{i}.csv").upload_from_string("a,y\n1,0\n")
        self.data_bucket.blob(f"{folder}/_SUCCESS").upload_from_string(b"")

    def preempt(self) -> None:
        """Preempt a running job, waiting a little for one to be running; counted in `preempted` when it hit one."""
        parent = f"projects/{self.state.project}/locations/{self.state.region}"
        request = {"parent": parent, "filter": 'state="JOB_STATE_RUNNING"'}
        until = time.monotonic() + PREEMPT_WAIT_SECONDS
        while True:
            running = list(self.jobs_client.list_custom_jobs(request=request))
            if running:
                try:
                    self.control.preempt(self.rng.choice(running).name)
                    self.preempted += 1
                    return
                except Exception:
                    pass  # it ended meanwhile
            if time.monotonic() >= until:
                return
            time.sleep(0.5)

    def kill_worker(self) -> None:
        """SIGKILL one function's gunicorn worker mid-flight, as an instance crash; gunicorn starts another."""
        workers = [p for p in leftover_processes(self.state.stack_id, var=STACK_MARKER_VAR) if _is_ff_worker(p.pid)]
        if workers:
            try:
                os.kill(self.rng.choice(workers).pid, 9)
            except ProcessLookupError:
                pass

    # ---- the run -------------------------------------------------------------------------------------

    def run(self, seconds: float | None = None, actions: int | None = None) -> None:
        """Random actions for `seconds`, or a fixed number of them (the same ones for a seed, however fast)."""
        deadline = time.monotonic() + seconds if seconds is not None else float("inf")
        names, weights = zip(*MIX.items(), strict=True)
        while time.monotonic() < deadline and (actions is None or sum(self.actions.values()) < actions):
            action = self.order.choices(names, weights)[0]
            getattr(self, action)()
            self.actions[action] += 1
            time.sleep(self.rng.uniform(0.05, 0.4))

    def collect(self, settle_seconds: float) -> list[tuple[dict[str, str], bytes]]:
        """Every event published, raw; waits until every accepted request has ended (or the time is up)."""
        messages: list[tuple[dict[str, str], bytes]] = []
        deadline = time.monotonic() + settle_seconds
        last_message = time.monotonic()
        while True:
            response = pull_now(self.subscriber, self.events_sub, max_messages=1000)
            if response.received_messages:
                self.subscriber.acknowledge(
                    subscription=self.events_sub, ack_ids=[m.ack_id for m in response.received_messages]
                )
                messages += [(dict(m.message.attributes), m.message.data) for m in response.received_messages]
                last_message = time.monotonic()
                continue
            # Done once every request has ended and nothing more came for a while (a late duplicate would).
            quiet = time.monotonic() - last_message > QUIET_SECONDS
            if (quiet and not _open_requests(messages, self.model_requests)) or time.monotonic() > deadline:
                return messages
            time.sleep(0.5)


def _is_ff_worker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"functions_framework" in cmdline and b"functions_framework" in parent


def _open_requests(messages: list[tuple[dict[str, str], bytes]], model_requests: set[str]) -> set[str]:
    """Accepted requests that have not ended; a model request's end is its decision after `succeeded`."""

    def keys(states: tuple[str, ...] | frozenset[str]) -> set[str]:
        return {json.loads(data)["request_key"] for attrs, data in messages if attrs.get("state") in states}

    accepted, ended = keys(("accepted",)), keys(TERMINAL_STATES)
    undecided = (keys(("succeeded",)) & model_requests) - keys(("promoted", "held"))
    return (accepted - ended) | undecided


def model_invariants(events: list[Any], versions: dict[str, list[Any]], model_requests: set[str]) -> dict[str, Any]:
    """One registered version per succeeded model request, one decision each, never two champions. `events`: each
    ce-id once; `versions`: each model's versions in the registry, by model id; `model_requests`: the request keys
    of the requests sent with a model block."""
    succeeded = {e.request_key for e in events if e.state == "succeeded"} & model_requests
    per_request = {state: Counter(e.request_key for e in events if e.state == state) for state in ("registered",)}
    decisions = Counter(e.request_key for e in events if e.state in ("promoted", "held"))
    in_registry = Counter(v.labels.get(KEY_LABEL) for vs in versions.values() for v in vs)
    replaced: Counter = Counter()
    for e in events:
        if e.state == "promoted":
            replaced[(e.model, e.previous_version)] += 1
    return {
        "model requests that succeeded": len(succeeded),
        "succeeded model requests without exactly one registered event": sum(
            1 for k in succeeded if per_request["registered"][k] != 1
        ),
        "registry versions of one request twice": sum(1 for n in in_registry.values() if n > 1),
        "succeeded model requests without exactly one decision": sum(1 for k in succeeded if decisions[k] != 1),
        "champions replaced twice": sum(1 for n in replaced.values() if n > 1),
        "models with one champion": sum(
            1 for vs in versions.values() if sum("champion" in v.version_aliases for v in vs) == 1
        ),
        "decisions": dict(Counter(e.state for e in events if e.state in ("promoted", "held"))),
    }


def invariants(
    messages: list[tuple[dict[str, str], bytes]],
    jobs: list[Any],
    versions: dict[str, list[Any]] | None = None,
    model_requests: set[str] | None = None,
) -> dict[str, Any]:
    events = [parse_event(data) for _, data in messages]
    payloads: dict[str, set[bytes]] = defaultdict(set)
    for attrs, data in messages:
        payloads[attrs["ce-id"]].add(data)
    accepted = {e.request_key for e in events if e.state == "accepted"}
    terminal: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.state in TERMINAL_STATES:
            terminal[e.request_key].add(e.ce_id)
    submitted = {(e.job.name, e.request_key, e.attempt) for e in events if e.state == "submitted" and e.job}
    from functions.ledger.keys import key_hash

    key_of_hash = {key_hash(k): k for k in accepted}
    unsuccessful = {
        e.ce_id: f"{e.state} ({getattr(e, 'reason', 'no reason')})"
        for e in events
        if e.state in TERMINAL_STATES and e.state != "succeeded"
    }
    jobs_per_attempt = Counter((j.labels["trainctl_key"], j.labels["trainctl_attempt"]) for j in jobs)
    return {
        "accepted requests": len(accepted),
        "submitted (request, attempt) pairs": len({(k, a) for _, k, a in submitted}),
        "jobs created": len(jobs),
        "jobs for a (request, attempt) twice": sum(1 for n in jobs_per_attempt.values() if n > 1),
        "jobs of no accepted request": sum(1 for j in jobs if j.labels["trainctl_key"] not in key_of_hash),
        "accepted requests without exactly one terminal event": sum(1 for k in accepted if len(terminal[k]) != 1),
        "ce-ids with two different payloads": sum(1 for p in payloads.values() if len(p) > 1),
        "events published": len(messages),
        # What each offending request went through, so that a failure can be diagnosed from the result alone.
        "requests without exactly one terminal event": {
            k: [e.state for e in events if e.request_key == k] for k in accepted if len(terminal[k]) != 1
        },
        "events by state": dict(Counter(e.state for e in events)),
        "accepted by team": dict(Counter(getattr(e, "team", None) or "-" for e in events if e.state == "accepted")),
        "ladder moves": sum(1 for e in events if e.state == "retrying" and getattr(e, "left_rung", None)),
        "requests that did not succeed, by reason": dict(Counter(unsuccessful.values())),
        **model_invariants(list({e.ce_id: e for e in events}.values()), versions or {}, model_requests or set()),
    }


def most_l4_gpus_at_once(jobs: list[Any]) -> int:
    """The most on-demand L4 GPUs the jobs held at one moment, each from its creation to its end (or now)."""
    from google.cloud.aiplatform_v1.types import Scheduling

    changes: list[tuple[float, int]] = []
    for job in jobs:
        if job.job_spec.scheduling.strategy == Scheduling.Strategy.SPOT:
            continue  # Spot draws on the preemptible quota
        gpus = sum(
            pool.replica_count * pool.machine_spec.accelerator_count
            for pool in job.job_spec.worker_pool_specs
            if "L4" in pool.machine_spec.accelerator_type.name
        )
        if not gpus:
            continue
        start = job.create_time.timestamp()
        end = job.end_time.timestamp() if job.end_time and job.end_time.timestamp() > 0 else time.time()
        changes += [(start, gpus), (end, -gpus)]
    held = most = 0
    for _, change in sorted(changes, key=lambda c: (c[0], c[1])):  # an end before a start at the same instant
        held += change
        most = max(most, held)
    return most


VIOLATIONS = (
    "jobs for a (request, attempt) twice",
    "jobs of no accepted request",
    "accepted requests without exactly one terminal event",
    "ce-ids with two different payloads",
    "succeeded model requests without exactly one registered event",
    "registry versions of one request twice",
    "succeeded model requests without exactly one decision",
    "champions replaced twice",
    "leftover processes",
    "L4 GPUs over the quota",
)


def soak(seconds: float | None, seed: int, settle_seconds: float = 180.0, actions: int | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="trainctl-soak-") as directory:
        run = Soak(Path(directory), seed)
        run.up()
        try:
            run.run(seconds, actions)
            messages = run.collect(settle_seconds)
            parent = f"projects/{run.state.project}/locations/{run.state.region}"
            request = {"parent": parent, "filter": "labels.trainctl_key:*"}
            jobs = list(run.jobs_client.list_custom_jobs(request=request))
            versions = run.model_versions()
        finally:
            leftovers = run.down()
        result = invariants(messages, jobs, versions, run.model_requests)

        result["leftover processes"] = len(leftovers)
        result["most on-demand L4 GPUs in jobs at once"] = most_l4_gpus_at_once(jobs)
        result["L4 GPUs over the quota"] = max(0, result["most on-demand L4 GPUs in jobs at once"] - L4_QUOTA)
        result["actions"] = dict(run.actions)
        result["preemptions of running jobs"] = run.preempted
        result["jobs == submitted pairs"] = result["jobs created"] == result["submitted (request, attempt) pairs"]
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started, load_before = datetime.now(UTC), os.getloadavg()[0]
    result = soak(args.minutes * 60, args.seed)
    print(json.dumps(result, indent=2))
    ok = all(result[name] == 0 for name in VIOLATIONS) and result["jobs == submitted pairs"]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with open(ROOT / "bench" / "RESULTS.md", "a") as out:
        out.write(
            f"\n### Soak, {started:%Y-%m-%d %H:%M} UTC, commit {commit}\n\n"
            f"`python bench/soak.py --minutes {args.minutes:g} --seed {args.seed}` on {platform.machine()}, "
            f"{os.cpu_count()} cores, load average before: {load_before:.2f}\n\n"
            + "".join(f"- {k}: {v}\n" for k, v in result.items())
            + f"- verdict: {'all invariants held' if ok else 'INVARIANT VIOLATED'}\n"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
