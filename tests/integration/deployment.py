"""A test deployment of the controller on the session's emulators and local JobService: its own buckets and
events topic, the four functions served by functions-framework, and helpers to deliver events to them the
way Eventarc and Pub/Sub push do and to read what they published."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import google.cloud.pubsub_v1 as pubsub_v1
import google.cloud.storage as storage
import yaml
from google.auth.credentials import AnonymousCredentials
from google.cloud.storage import Blob

from functions.ledger.keys import key_hash
from local.eventarc import finalized_event
from local.fake_gcs import create_bucket
from local.functions_host import FunctionProcess, start_functions, stop_functions
from local.names import LOCAL_PROJECT, LOCAL_REGION, LOCAL_TRAINER_IMAGE
from local.pubsub_emulator import pull_now
from schemas.events import JobEvent, parse_event

REPO_ROOT = Path(__file__).resolve().parents[2]
FAKE_NODE_IMAGE = "localhost/tests/fake-node"
# A built-in trainer image under the test image's prefix, so the session's JobService runs fake_node.py for it: a
# deployment serving with TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN runs built-in requests without torch.
TRAINER_STAND_IN = f"{FAKE_NODE_IMAGE}/trainer:1"
# The test image named by a digest, as a model's own code must be (issue 38: code that cannot change under its name).
PINNED_FAKE_NODE_IMAGE = f"{FAKE_NODE_IMAGE}@sha256:{'0' * 64}"
# The lease of a claim whose delivery a test kills (a deployment's own is TRAINCTL_LEASE, 3 s): its redelivery
# waits out at most 1 s of it.
DEAD_CLAIM_LEASE = "1s"
# The dataset of fake-node requests: shared by the deployments of a worker's stack, made by the first one
# (admission refuses a dataset with no data in it).
SHARED_DATA_BUCKET = "it-data"
SHARED_DATASET = f"gs://{SHARED_DATA_BUCKET}/whatever/"
# Google's executors are all past their end of availability (issue 40, point 8), so a deployment that runs packages
# lists its own: the local stack's list (examples/ddp-package/local-executors.yaml) as TRAINCTL_EXECUTORS.
LOCAL_EXECUTORS = json.dumps(
    yaml.safe_load((Path(__file__).parents[2] / "examples/ddp-package/local-executors.yaml").read_text()), default=str
)
DATA_SHARD = "a,y\n1,0\n"
# The run-as accounts, as Terraform would name them: the built-in trainer's, and the custom images' own.
TRAINER_ACCOUNT = f"it-trainer@{LOCAL_PROJECT}.iam.gserviceaccount.com"
CUSTOM_ACCOUNT = f"it-custom@{LOCAL_PROJECT}.iam.gserviceaccount.com"


def fake_node_request(request_id: str, *args: str, **sections: Any) -> dict[str, Any]:
    """A request for the test image that runs tests/local/programs/fake_node.py with `args`."""
    return {
        "api_version": "trainctl/v1",
        "request_id": request_id,
        "dataset": {"uri": SHARED_DATASET, "target": "y"},
        "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": list(args)},
        "resources": {"machine_type": "g2-standard-24"},
        **sections,
    }


def builtin_request(deployment: Deployment, request_id: str, *fake_node_args: str, **sections: Any) -> dict[str, Any]:
    """A built-in trainer request whose job (TRAINER_STAND_IN) behaves as `fake_node_args` say: fake_node.py reads
    them from the dataset folder's `fake-node-args` object."""
    folder = f"stand-in/{request_id}/"
    deployment.upload(folder + "part-0.csv", DATA_SHARD)
    deployment.upload(folder + "fake-node-args", "\n".join(fake_node_args))
    return {
        "api_version": "trainctl/v1",
        "request_id": request_id,
        "dataset": {"uri": f"gs://{deployment.data_bucket}/{folder}", "target": "y"},
        "trainer": {"builtin": "tabular"},
        "resources": {"machine_type": "g2-standard-24"},
        **sections,
    }


@dataclass
class Deployment:
    suffix: str
    vertex_endpoint: str  # the JobService's REST URL (JobServiceProcess.rest_url)
    extra_settings: dict[str, str] = field(default_factory=dict)
    functions: dict[str, FunctionProcess] = field(default_factory=dict)

    @property
    def data_bucket(self) -> str:
        return f"it-data-{self.suffix}"

    @property
    def control_bucket(self) -> str:
        return f"it-control-{self.suffix}"

    @property
    def events_topic(self) -> str:
        return f"it-events-{self.suffix}"

    def cli(self, monkeypatch: Any, *args: str) -> str:
        """What `trainctl ARGS` prints against this deployment (its settings in the environment for the test)."""
        from trainctl.cli import main

        for name, value in self.settings_env().items():
            monkeypatch.setenv(name, value)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(list(args)) == 0
        return out.getvalue()

    def settings_env(self, **overrides: str) -> dict[str, str]:
        template = {
            "dataset": {"target": "y"},
            "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.5"]},
            "resources": {"machine_type": "g2-standard-24"},
        }
        env = {
            "TRAINCTL_PROJECT": LOCAL_PROJECT,
            "TRAINCTL_REGION": LOCAL_REGION,
            "TRAINCTL_CONTROL_BUCKET": self.control_bucket,
            "TRAINCTL_EVENTS_TOPIC": self.events_topic,
            "TRAINCTL_TRAINER_IMAGE": LOCAL_TRAINER_IMAGE,
            "TRAINCTL_TRIGGER_RULES": json.dumps({f"gs://{self.data_bucket}/churn/": template}),
            "TRAINCTL_ALLOWED_IMAGE_PREFIXES": "localhost/tests/",
            "TRAINCTL_TRAINER_SERVICE_ACCOUNT": TRAINER_ACCOUNT,
            "TRAINCTL_CUSTOM_SERVICE_ACCOUNT": CUSTOM_ACCOUNT,
            "TRAINCTL_VERTEX_ENDPOINT": self.vertex_endpoint,
            "TRAINCTL_QUOTAS_ENDPOINT": self.vertex_endpoint,  # the Cloud Quotas stand-in shares the REST port
            "TRAINCTL_MONITORING_ENDPOINT": self.vertex_endpoint,  # and the Cloud Monitoring one
            "TRAINCTL_COMPUTE_ENDPOINT": self.vertex_endpoint,  # and Compute Engine's reservations
            "TRAINCTL_LEASE": "3s",
        }
        return env | self.extra_settings | overrides

    # ---- setting up ----------------------------------------------------------------------------------

    def create(self, log_dir: Path, **settings: str) -> None:
        """Provision, then serve the four functions with `settings_env(**settings)`."""
        self.provision()
        self.functions = start_functions(self.settings_env(**settings), log_dir)

    def provision(self) -> None:
        """The buckets and the events topic, without serving the functions (bench/cold_start.py runs its own)."""
        for bucket in (self.data_bucket, self.control_bucket, SHARED_DATA_BUCKET):
            create_bucket(os.environ["STORAGE_EMULATOR_HOST"], LOCAL_PROJECT, bucket)  # versioned, as Terraform's
        self.storage().bucket(SHARED_DATA_BUCKET).blob("whatever/part-0.csv").upload_from_string(DATA_SHARD)
        publisher = pubsub_v1.PublisherClient()
        publisher.create_topic(name=publisher.topic_path(LOCAL_PROJECT, self.events_topic))

    def stop(self) -> None:
        stop_functions(self.functions.values())

    @staticmethod
    def storage() -> storage.Client:
        return storage.Client(project=LOCAL_PROJECT, credentials=AnonymousCredentials())

    def events(self) -> EventLog:
        return EventLog(self.events_topic)

    # ---- delivering events ---------------------------------------------------------------------------

    def upload(self, name: str, data: bytes | str = b"") -> Blob:
        blob = self.storage().bucket(self.data_bucket).blob(name)
        blob.upload_from_string(data)
        blob.reload()
        return blob

    def upload_marker(self, folder: str, data: bytes | str = b"") -> Blob:
        """A dataset landing in `folder` (ending in /): a data shard, then the marker."""
        self.upload(f"{folder}part-0.csv", DATA_SHARD)
        return self.upload(f"{folder}_SUCCESS", data)

    def storage_event(self, blob: Blob) -> tuple[dict[str, str], bytes]:
        """The finalized CloudEvent Eventarc would deliver for `blob` (through the bridge's conversion)."""
        message = {
            "attributes": {
                "eventType": "OBJECT_FINALIZE",
                "bucketId": blob.bucket.name,
                "objectId": blob.name,
                "objectGeneration": str(blob.generation),
            },
            "data": base64.b64encode(json.dumps(blob._properties).encode()).decode(),
            "messageId": uuid.uuid4().hex,
            "publishTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        converted = finalized_event(message)
        assert converted is not None
        return converted

    def notification_event(self, blob: Blob, event_type: str = "OBJECT_FINALIZE") -> tuple[dict[str, str], bytes]:
        """The data bucket's notification of `blob` as Eventarc delivers it from the uploads topic
        (terraform/storage.tf): a Pub/Sub push of the Cloud Storage notification (attributes name the object, data is
        the object resource, JSON_API_V1), which functions-framework turns into a messagePublished CloudEvent."""
        body = {
            "subscription": f"projects/{LOCAL_PROJECT}/subscriptions/eventarc-uploads",
            "message": {
                "attributes": {
                    "eventType": event_type,
                    "payloadFormat": "JSON_API_V1",
                    "bucketId": blob.bucket.name,
                    "objectId": blob.name,
                    "objectGeneration": str(blob.generation),
                },
                "data": base64.b64encode(json.dumps(blob._properties).encode()).decode(),
                "messageId": uuid.uuid4().hex[:12],
                "publishTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        }
        return {"content-type": "application/json"}, json.dumps(body).encode()

    def push_body(self, payload: bytes, message_id: str | None = None) -> tuple[dict[str, str], bytes]:
        """A raw Pub/Sub push, as the emulator's push subscription sends it."""
        body = {
            "subscription": f"projects/{LOCAL_PROJECT}/subscriptions/it-requests",
            "message": {
                "data": base64.b64encode(payload).decode(),
                "messageId": message_id or uuid.uuid4().hex[:12],
                "publishTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        }
        return {"content-type": "application/json"}, json.dumps(body).encode()

    def post(self, target: str, request: tuple[dict[str, str], bytes], path: str = "") -> int:
        headers, body = request
        url = self.functions[target].url + path
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 503  # refused or reset: Pub/Sub would count it as a failed push

    def deliver(self, target: str, request: tuple[dict[str, str], bytes], path: str = "", tries: int = 30) -> int:
        """Post until the function answers 2xx, as Pub/Sub redelivers a nacked message; the last status."""
        for _ in range(tries):
            status = self.post(target, request, path)
            if status < 300:
                return status
            time.sleep(0.5)
        return status

    def request(self, document: dict[str, Any], message_id: str | None = None, topic: str = "it-requests") -> int:
        """Publish a request on `topic` (a team's topic, say), as its push subscription delivers it."""
        topic_path = f"projects/{LOCAL_PROJECT}/topics/{topic}"
        return self.deliver("on_job_request", self.push_body(json.dumps(document).encode(), message_id), topic_path)

    def reconcile(self) -> dict[str, int]:
        with urllib.request.urlopen(
            urllib.request.Request(self.functions["reconcile"].url, data=b"{}"), timeout=120
        ) as r:
            return json.loads(r.read())

    # ---- reading the ledger --------------------------------------------------------------------------

    def record(self, request_key: str) -> dict[str, Any] | None:
        blob = self.storage().bucket(self.control_bucket).blob(f"ledger/{key_hash(request_key)}.json")
        return json.loads(blob.download_as_bytes()) if blob.exists() else None

    def requests_held(self) -> set[str]:
        """The names of every request record and active entry in the ledger (a rejection files neither: only its
        outcome, under history/)."""
        bucket = self.storage().bucket(self.control_bucket)
        return {blob.name for prefix in ("ledger/", "active/") for blob in bucket.list_blobs(prefix=prefix)}


@contextlib.contextmanager
def serving(
    jobservice: Any,
    log_dir: Path,
    capacity: dict[str, Any] | None = None,
    settings_for: Callable[[Deployment], dict[str, str]] | None = None,
    **settings: str,
) -> Iterator[Deployment]:
    """A new deployment serving the functions with `settings` for the length of the block; with `capacity`, the
    session JobService's capacity model (GPU quotas, stockouts: local/jobservice/capacity.py) for as long.
    `settings_for`: settings that name the deployment's own buckets, made once it has its names."""
    if capacity is not None:
        jobservice.control.set_capacity(capacity)
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    try:
        deployed.create(log_dir, **settings, **(settings_for(deployed) if settings_for else {}))
        yield deployed
    finally:
        deployed.stop()
        if capacity is not None:
            jobservice.control.clear_capacity()


class EventLog:
    """Every message published on an events topic from now on, raw (duplicates included)."""

    def __init__(self, topic: str):
        self._subscriber = pubsub_v1.SubscriberClient()
        self.subscription = self._subscriber.subscription_path(LOCAL_PROJECT, f"it-log-{uuid.uuid4().hex[:10]}")
        self._subscriber.create_subscription(name=self.subscription, topic=f"projects/{LOCAL_PROJECT}/topics/{topic}")
        self.messages: list[tuple[JobEvent, dict[str, str]]] = []

    def drain(self) -> list[tuple[JobEvent, dict[str, str]]]:
        """Everything published so far (the functions publish before they answer, so nothing a test caused
        is missed)."""
        while True:
            response = pull_now(self._subscriber, self.subscription, max_messages=500)
            if not response.received_messages:
                return self.messages
            self._subscriber.acknowledge(
                subscription=self.subscription, ack_ids=[m.ack_id for m in response.received_messages]
            )
            for m in response.received_messages:
                self.messages.append((parse_event(m.message.data), dict(m.message.attributes)))

    def states(self, request_id: str) -> list[str]:
        return [e.state for e, _ in self.drain() if e.request_id == request_id]

    def of(self, request_id: str, state: str) -> list[JobEvent]:
        return [e for e, _ in self.drain() if e.request_id == request_id and e.state == state]

    def wait_for(
        self, request_id: str, state: str, timeout: float = 60.0, act: Callable[[], Any] | None = None
    ) -> JobEvent:
        """Drain until `state` arrives for the request, calling `act` (a reconcile tick, say) between polls."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.of(request_id, state)
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {state} event for {request_id}; saw {self.states(request_id)}")
            if act is not None:
                act()
            time.sleep(0.3)


def train_breast_cancer_model(folder: Path) -> Path:
    """A real model folder (scikit-learn's breast cancer table, 2 epochs, seed 5) for the trainer stand-in to copy
    beside its metrics (`--model-from`), so that its registered version serves with `python -m trainer.serve`."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    header = ",".join([name.replace(" ", "_") for name in data.feature_names] + ["target"])
    rows = [",".join(map(str, [*row, label])) for row, label in zip(data.data, data.target, strict=True)]
    (folder / "train.csv").write_text("\n".join([header, *rows]) + "\n")
    trained = subprocess.run(
        [sys.executable, "-m", "trainer.train", "--data", str(folder / "train.csv"), "--target", "target",
         "--epochs", "2", "--batch-size", "64", "--seed", "5", "--model-dir", str(folder / "model"),
         "--checkpoint-dir", str(folder / "checkpoints"), "--tensorboard-dir", str(folder / "logs")],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "HOME": str(folder)},
        capture_output=True, text=True, timeout=240, cwd=REPO_ROOT,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    return folder / "model"


def accuracy(value: float, champion: float | None = None, spread: float = 0.01) -> dict[str, Any]:
    """The metrics.json of a classification run, its figure the same on its own rows and on the model's reference
    set; with `champion`, the trainer scored the champion on both, and the paired interval of the improvement on the
    reference set is ± `spread` around it (trainer/README.md, issue 38)."""
    metrics: dict[str, Any] = {"task": "classification", "metric": "accuracy", "val_accuracy": value}
    metrics |= {"reference_val_accuracy": value, "reference_rows": 200, "reference_confidence": 0.95}
    if champion is not None:
        gain = round(value - champion, 6)
        metrics |= {"champion_val_accuracy": champion, "champion_scored_on_same_rows": True}
        metrics |= {"champion_reference_val_accuracy": champion}
        metrics["reference_improvement_val_accuracy"] = {"point": gain, "low": gain - spread, "high": gain + spread}
    return metrics
