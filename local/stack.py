"""The whole system on one machine (DESIGN.md §5), started and stopped as one: the Pub/Sub emulator,
fake-gcs-server, the buckets, topics and subscriptions Terraform creates (same names), the local Vertex
JobService announcing job states as the log sink would, the functions, the Eventarc bridge, the reconcile timer
and the trigger rules' schedules. Every port is picked free at start-up; `start()` returns the StackState to record.

Started in dependency order and stopped in the reverse one: what calls or feeds others first (timer,
bridge, functions), then the JobService (stopping it ends its jobs' nodes), then storage, and the Pub/Sub
emulator last, since everything else publishes to it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from functions.intake.marker_policy import DEFAULT_MAY_SET, MAY_SET_KEY
from functions.settings import env_names
from functions.teams import NO_TEAMS, with_topics
from local.eventarc import EventarcBridge
from local.fake_gcs import FakeGcs, create_bucket, start_fake_gcs
from local.functions_host import FUNCTION_TIMEOUT_SECONDS, FunctionProcess, start_functions, stop_functions
from local.jobservice.standalone import JobServiceProcess, start_jobservice_process
from local.names import LOCAL_PROJECT, LOCAL_REGION, LOCAL_TRAINER_IMAGE, Names
from local.processes import ManagedProcess, process_start_time
from local.pubsub_emulator import PubSubEmulator, start_pubsub_emulator
from local.saved_state import SavedState
from local.scheduler import ReconcileTimer, RuleSchedules, rule_schedules
from local.stack_state import REPO_ROOT, STACK_MARKER_VAR, StackState

log = logging.getLogger("local.stack")

# What a `_SUCCESS` marker anywhere in the data bucket starts, unless a longer rule matches or the marker's
# own content overrides it: the built-in tabular trainer on the marker's folder, predicting the column
# `target` (the name scikit-learn's and many exported datasets give the label) on 2 × L4. Besides what every
# template lets a marker set, a marker here may ask for other resources and scheduling (the demo asks for 2 nodes);
# never for other code, another output folder, run-as account or request id (functions/intake/marker_policy.py).
DEFAULT_TEMPLATE: dict[str, Any] = {
    MAY_SET_KEY: [*DEFAULT_MAY_SET, "resources", "scheduling", "model"],
    "dataset": {"target": "target", "format": "auto"},
    "trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 5}},
    "resources": {"machine_type": "g2-standard-24"},
    "scheduling": {"timeout": "1h"},
}
# Terraform's defaults are 10 deliveries with 10-600 s between them; locally a retried request should show
# up within seconds, so the backoff is shorter.
REQUEST_MAX_DELIVERY_ATTEMPTS = 10
REQUEST_RETRY_BACKOFF_SECONDS = (1, 10)
# How long Pub/Sub waits for a pushed function's answer: Terraform sets the push subscription's ack deadline
# to the function timeout, and so does the local stack.
PUSH_ACK_DEADLINE_SECONDS = FUNCTION_TIMEOUT_SECONDS

# The names a stack records: every bucket, topic and subscription name Names gives.
_NAME_PROPERTIES = tuple(name for name, value in vars(Names).items() if isinstance(value, property))


@dataclass(frozen=True)
class StackOptions:
    project: str = LOCAL_PROJECT
    region: str = LOCAL_REGION
    reconcile_every: float = 10.0
    # Added to the JobService's image map (image prefix → command), the allowed image prefixes and the
    # trigger rules (a rule here replaces the default one for the same prefix).
    image_map: dict[str, list[str]] = field(default_factory=dict)
    allowed_image_prefixes: tuple[str, ...] = ()
    allow_python_packages: bool = False  # off, as Terraform's allow_python_packages is by default
    trigger_rules: dict[str, Any] = field(default_factory=dict)
    # A claim left by a crashed function is taken over after this long; short, as nothing here is slow.
    lease: int = 60  # seconds
    # A capacity model file for the JobService (local/jobservice/capacity.py); empty: no limits.
    capacity_file: str = ""
    # Teams, in the shape of Terraform's variable `teams` (functions/teams.py); None: no teams.
    teams: dict[str, Any] | None = None
    # Secret Manager's secrets for the nodes (issue 40, point 7): secret id → the value of its version 1, in the
    # stack's project (projects/<project>/secrets/<id>), readable by every team's own code; job_secrets, when given,
    # says instead which team's code may read which secret, as Terraform's job_secrets does.
    secrets: dict[str, str] = field(default_factory=dict)
    job_secrets: dict[str, list[str]] | None = None
    # The executors packages may run on, in the shape of Terraform's variable `executors` (schemas/executors.py);
    # None: Google's list, as in the cloud (the JobService itself runs every executor image on its own Python).
    executors: dict[str, Any] | None = None
    # Regions besides `region` that a capacity ladder's rungs may name, as Terraform's allowed_regions (issue 44).
    allowed_regions: tuple[str, ...] = ()


def controller_settings(options: StackOptions, names: Names, jobservice_rest_url: str) -> dict[str, str]:
    """The TRAINCTL_* environment of every function: Terraform's settings, pointed at the local stack."""
    values = {
        "TRAINCTL_PROJECT": options.project,
        "TRAINCTL_REGION": options.region,
        "TRAINCTL_ALLOWED_REGIONS": ",".join(options.allowed_regions),
        "TRAINCTL_CONTROL_BUCKET": names.control_bucket,
        "TRAINCTL_EVENTS_TOPIC": names.events_topic,
        "TRAINCTL_TRAINER_IMAGE": LOCAL_TRAINER_IMAGE,
        "TRAINCTL_TRIGGER_RULES": json.dumps({f"gs://{names.data_bucket}/": DEFAULT_TEMPLATE, **options.trigger_rules}),
        # Only what `--allow-image-prefix` names: the trainer's repository runs only the built-in trainer, as in
        # Terraform (issue 24, point 1).
        "TRAINCTL_ALLOWED_IMAGE_PREFIXES": ",".join(options.allowed_image_prefixes),
        "TRAINCTL_ALLOW_PYTHON_PACKAGES": "true" if options.allow_python_packages else "",
        "TRAINCTL_ALLOWED_OUTPUT_BUCKETS": names.control_bucket,
        # As Terraform names them; the local JobService runs every node as the developer, whatever the account.
        "TRAINCTL_TRAINER_SERVICE_ACCOUNT": names.service_account("trainer"),
        "TRAINCTL_CUSTOM_SERVICE_ACCOUNT": names.service_account("custom"),
        "TRAINCTL_VERTEX_ENDPOINT": jobservice_rest_url.rstrip("/"),  # the controller calls Vertex's REST API
        # The Cloud Quotas stand-in (the capacity model's limits) is served on the same REST port.
        "TRAINCTL_QUOTAS_ENDPOINT": jobservice_rest_url.rstrip("/"),
        # So is the Cloud Monitoring stand-in: each deployed model's requests, errors and latencies (issue 41).
        "TRAINCTL_MONITORING_ENDPOINT": jobservice_rest_url.rstrip("/"),
        # And Compute Engine's reservations.get: the capacity file's reservations (issue 43).
        "TRAINCTL_COMPUTE_ENDPOINT": jobservice_rest_url.rstrip("/"),
        "TRAINCTL_LEASE": f"{options.lease}s",
        "TRAINCTL_FUNCTION_TIMEOUT": str(FUNCTION_TIMEOUT_SECONDS),
        "TRAINCTL_TEAMS": json.dumps(with_topics(options.teams, names.team_requests_topic, names.data_bucket))
        if options.teams
        else "",
        "TRAINCTL_JOB_SECRETS": json.dumps(job_secrets(options)) if options.secrets or options.job_secrets else "",
        "TRAINCTL_EXECUTORS": json.dumps(options.executors) if options.executors else "",
    }
    unknown = set(values) - set(env_names())
    assert not unknown, f"not controller settings: {unknown}"
    # Every other setting is set empty, which reads as unset (its default): a TRAINCTL_* variable of the
    # shell that started the stack (a real project's, say) must not reach the local functions.
    return {name: values.get(name, "") for name in env_names()}


def job_secrets(options: StackOptions) -> dict[str, list[str]]:
    """Team → the secrets its own code may read: the options' job_secrets, else every --secret for every team."""
    if options.job_secrets is not None:
        return options.job_secrets
    everyone = [f"projects/{options.project}/secrets/{secret_id}" for secret_id in sorted(options.secrets)]
    teams = list((options.teams or {}).get("teams") or {}) or [NO_TEAMS]
    return {team: everyone for team in teams}


def secrets_document(options: StackOptions, names: Names) -> dict[str, Any]:
    """The JobService's --secrets-file: each secret, and the accounts job_secrets lets read it (each team's own-code
    account, as Settings.custom_account names it: the team's custom_service_account, else the custom images')."""
    team_settings = (options.teams or {}).get("teams") or {}
    readers: dict[str, set[str]] = {}
    for team, secrets in job_secrets(options).items():
        account = (team_settings.get(team) or {}).get("custom_service_account") or names.service_account("custom")
        for secret in secrets:
            readers.setdefault(secret, set()).add(account)
    return {
        "secrets": {
            f"projects/{options.project}/secrets/{secret_id}": {
                "versions": [value],
                "accessors": sorted(readers.get(f"projects/{options.project}/secrets/{secret_id}", ())),
            }
            for secret_id, value in options.secrets.items()
        }
    }


def write_secrets_file(path: Path, document: dict[str, Any]) -> Path:
    """Written for the JobService alone (mode 0600), in the stack's run folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(document, handle)
    return path


class LocalStack:
    """One stack. `start()` brings everything up (and everything down again if a piece fails); `stop()`
    may be called at any point, any number of times."""

    def __init__(
        self, options: StackOptions, run_dir: Path, stack_id: str | None = None, saved: SavedState | None = None
    ):
        self.options = options
        self.run_dir = run_dir
        # Where buckets and the JobService's state last across restarts (local/saved_state.py); None: in run_dir,
        # emptied at every start, with the buckets in memory.
        self.saved = saved
        self.stack_id = stack_id or uuid.uuid4().hex[:12]
        self.names = Names(options.project)
        self.pubsub: PubSubEmulator | None = None
        self.storage: FakeGcs | None = None
        self.jobservice: JobServiceProcess | None = None
        self.functions: dict[str, FunctionProcess] = {}
        self.bridge: EventarcBridge | None = None
        self.timer: ReconcileTimer | None = None
        self.schedules: RuleSchedules | None = None

    def start(self, pid: int) -> StackState:
        """Start everything; `pid` is the process that will stop it (recorded in the state)."""
        try:
            return self._start(pid)
        except BaseException:
            self.stop()
            raise

    def _start(self, pid: int) -> StackState:
        shutil.rmtree(self.run_dir, ignore_errors=True)  # logs and secrets: what lasts is in self.saved
        marker = {STACK_MARKER_VAR: self.stack_id}
        names, project = self.names, self.options.project

        self.pubsub = start_pubsub_emulator(project, self.run_dir / "pubsub", env=_with(marker))
        topics = (names.requests_topic, names.events_topic, names.job_state_topic, names.dead_letter_topic)
        for topic in (*topics, names.retrain_topic):
            self.pubsub.create_topic(topic)
        for team in self.teams:
            self.pubsub.create_topic(names.team_requests_topic(team))
        saved = self.saved
        self.storage = start_fake_gcs(
            self.run_dir / "fake-gcs",
            pubsub=self.pubsub,
            env=_with(marker),
            filesystem_root=saved.buckets if saved else None,
        )
        for bucket in (names.data_bucket, names.control_bucket):  # kept when they are there already
            # fake-gcs-server's filesystem backend refuses versioning (local/FIDELITY.md, "Lasting local state").
            create_bucket(self.storage.url, project, bucket, versioned=saved is None)
        clients = {**marker, **self.pubsub.env, **self.storage.env}

        self.jobservice = start_jobservice_process(
            self.run_dir / "jobservice",
            state_dir=saved.jobservice if saved else None,
            env=_with(clients),
            extra_args=[
                "--announce-topic", self.pubsub.topic_path(names.job_state_topic),
                "--image-map", json.dumps(self.options.image_map),
                "--workdir", str(REPO_ROOT),
                *(["--capacity", self.options.capacity_file] if self.options.capacity_file else []),
                *(["--secrets-file", str(self._secrets_file())] if self.options.secrets else []),
            ],
        )  # fmt: skip
        settings = controller_settings(self.options, names, self.jobservice.rest_url)
        self.functions = start_functions({**clients, **settings}, self.run_dir / "functions")
        assert self.storage.notifications_topic is not None  # the stack starts fake-gcs-server with notifications
        self.bridge = EventarcBridge(
            self.functions["on_dataset_upload"].url, bucket=names.data_bucket, topic=self.storage.notifications_topic
        )
        subscriptions = self._subscribe()
        self.timer = ReconcileTimer(self.functions["reconcile"].url, self.options.reconcile_every)
        # The rules' Cloud Scheduler jobs (terraform/retrain.tf): each scheduled rule's ticks on the retrain topic.
        schedules = rule_schedules(json.loads(settings["TRAINCTL_TRIGGER_RULES"]))
        self.schedules = RuleSchedules(self.pubsub.host, self.pubsub.topic_path(names.retrain_topic), schedules)
        return StackState(
            stack_id=self.stack_id,
            pid=pid,
            pid_start=process_start_time(pid) or 0,
            project=project,
            region=self.options.region,
            pubsub_host=self.pubsub.host,
            storage_url=self.storage.url,
            jobservice_address=self.jobservice.address,
            jobservice_rest_url=self.jobservice.rest_url,
            bridge_url=self.bridge.url,
            function_urls={target: function.url for target, function in self.functions.items()},
            reconcile_every=self.options.reconcile_every,
            names={key: getattr(names, key) for key in _NAME_PROPERTIES},
            subscriptions=subscriptions,
            settings_env=settings,
            run_dir=str(self.run_dir),
            saved_dir=str(self.saved.directory) if self.saved else "",
            logs={process.name: str(process.log_path) for process in self._processes()},
        )

    def _secrets_file(self) -> Path:
        return write_secrets_file(self.run_dir / "secrets.json", secrets_document(self.options, self.names))

    def _subscribe(self) -> dict[str, str]:
        """The push subscriptions that deliver to the functions, and the dead letters' pull subscription;
        created last, when every endpoint answers. Returns subscription → where it delivers."""
        assert self.pubsub is not None and self.storage is not None and self.bridge is not None
        names, pubsub = self.names, self.pubsub
        # The endpoint path names the topic: functions-framework makes it the CloudEvent's source.
        on_request = self.functions["on_job_request"].url + pubsub.topic_path(names.requests_topic)
        on_state = self.functions["on_job_state"].url + pubsub.topic_path(names.job_state_topic)
        on_retrain = self.functions["on_retrain"].url + pubsub.topic_path(names.retrain_topic)
        storage_subscription = f"{names.prefix}-eventarc-storage"
        state_subscription = f"{names.prefix}-eventarc-job-state"
        retrain_subscription = f"{names.prefix}-eventarc-retrain"
        pubsub.create_subscription(
            names.requests_subscription,
            names.requests_topic,
            push_endpoint=on_request,
            ack_deadline_seconds=PUSH_ACK_DEADLINE_SECONDS,
            dead_letter_topic=names.dead_letter_topic,
            max_delivery_attempts=REQUEST_MAX_DELIVERY_ATTEMPTS,
            retry_backoff_seconds=REQUEST_RETRY_BACKOFF_SECONDS,
        )
        team_subscriptions = {}
        for team in self.teams:  # as terraform/teams.tf: the push path names the team's topic, and so its team
            topic = names.team_requests_topic(team)
            endpoint = self.functions["on_job_request"].url + pubsub.topic_path(topic)
            pubsub.create_subscription(
                names.team_requests_subscription(team),
                topic,
                push_endpoint=endpoint,
                ack_deadline_seconds=PUSH_ACK_DEADLINE_SECONDS,
                dead_letter_topic=names.dead_letter_topic,
                max_delivery_attempts=REQUEST_MAX_DELIVERY_ATTEMPTS,
                retry_backoff_seconds=REQUEST_RETRY_BACKOFF_SECONDS,
            )
            team_subscriptions[names.team_requests_subscription(team)] = endpoint
        pubsub.create_subscription(names.dead_letter_subscription, names.dead_letter_topic)
        assert self.storage.notifications_topic is not None  # the stack starts fake-gcs-server with notifications
        notifications = self.storage.notifications_topic.rsplit("/", 1)[-1]
        pubsub.create_subscription(
            storage_subscription, notifications, self.bridge.url, ack_deadline_seconds=PUSH_ACK_DEADLINE_SECONDS
        )
        pubsub.create_subscription(
            state_subscription, names.job_state_topic, on_state, ack_deadline_seconds=PUSH_ACK_DEADLINE_SECONDS
        )
        # As on_retrain's Eventarc trigger (terraform/locals.tf): schedule ticks and alerts (issue 42).
        pubsub.create_subscription(
            retrain_subscription, names.retrain_topic, on_retrain, ack_deadline_seconds=PUSH_ACK_DEADLINE_SECONDS
        )
        return {
            names.requests_subscription: on_request,
            **team_subscriptions,
            names.dead_letter_subscription: "(pull)",
            storage_subscription: f"{self.bridge.url} → on_dataset_upload",
            state_subscription: on_state,
            retrain_subscription: on_retrain,
        }

    @property
    def teams(self) -> list[str]:
        return list((self.options.teams or {}).get("teams") or {})

    def _processes(self) -> list[ManagedProcess]:
        pieces: list[Any] = [self.pubsub, self.storage, self.jobservice, *self.functions.values()]
        return [piece.process for piece in pieces if piece is not None]

    def exited(self) -> list[ManagedProcess]:
        """Processes of the stack that have stopped on their own."""
        return [process for process in self._processes() if not process.running()]

    def stop(self) -> None:
        functions = list(self.functions.values())
        steps: list[tuple[str, Callable[[], None] | None]] = [
            ("reconcile timer", self.timer.stop if self.timer else None),
            ("rule schedules", self.schedules.stop if self.schedules else None),
            ("Eventarc bridge", self.bridge.stop if self.bridge else None),
            ("functions", (lambda: stop_functions(functions)) if functions else None),  # all at once
            ("JobService", self.jobservice.stop if self.jobservice else None),
            ("fake-gcs-server", self.storage.stop if self.storage else None),
            ("Pub/Sub emulator", self.pubsub.stop if self.pubsub else None),
        ]
        for what, stop in steps:
            if stop is None:
                continue
            try:
                stop()
            except Exception:  # stop the rest regardless
                log.exception("stopping the %s failed", what)
        self.timer = self.bridge = self.jobservice = self.storage = self.pubsub = None
        self.schedules = None
        self.functions = {}


def _with(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}
