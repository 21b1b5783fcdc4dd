"""`trainctl local up|down|env|logs`: the whole system on this machine (local/stack.py).

`up` runs the stack in this process until Ctrl-C (or `local down`) and then stops every piece; `up --detach`
runs that same process in the background and returns once the stack is ready. `env` prints the `export …`
lines another shell needs; `logs JOB` prints a job's node logs from the local JobService.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from local.stack_state import (
    REPO_ROOT,
    STACK_MARKER_VAR,
    StackState,
    export_lines,
    local_dir,
    read_state,
    remove_state,
    running_stack,
    state_path,
    stop_recorded_stack,
    take_stack_lock,
    write_state,
)
from trainctl.hints import local_stack_hint, trainctl_command

EXIT_NOT_RUNNING = 1
EXIT_USAGE = 2
EXIT_REFUSED = 4  # the kept state is of another format, or not trainctl's


def register(commands: argparse._SubParsersAction) -> None:
    local = commands.add_parser("local", help="run the whole system on this machine: emulators, functions, JobService")
    verbs = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")

    up = verbs.add_parser("up", help="start the local stack; Ctrl-C stops everything")
    up.add_argument("--detach", action="store_true", help="run in the background; `trainctl local down` stops it")
    up.add_argument("--reconcile-every", type=float, default=10.0, metavar="SECONDS", help="default: 10")
    up.add_argument(
        "--image-map",
        default="{}",
        metavar="JSON",
        help='more images the JobService can run: {"image prefix": ["command", …]} (commands run from the '
        "repository root)",
    )
    up.add_argument(
        "--allow-image-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="let requests run custom images under PREFIX (a registry path matched at a '/' boundary, or one full "
        "image); the trainer's own repository runs only the built-in trainer",
    )
    up.add_argument(
        "--allow-python-packages",
        action="store_true",
        help="let requests run their own Python package (trainer.python_package, `submit --source`) on the local "
        "executor, as Terraform's allow_python_packages does",
    )
    up.add_argument(
        "--regions",
        default="",
        metavar="REGION,…",
        help="more regions a capacity ladder's rungs may name (europe-west4 for examples/ladder-spot-l4-to-a100.yaml), "
        "as Terraform's allowed_regions; the stack's own region is always allowed",
    )
    up.add_argument(
        "--trigger-rules",
        default="{}",
        metavar="JSON",
        help='more trigger rules: {"gs://bucket/prefix/": {partial request}}, added to the default rule',
    )
    up.add_argument(
        "--capacity",
        metavar="FILE",
        help="a capacity model (YAML or JSON) for the local JobService: GPU quotas per region, stockouts and "
        "preemptions per machine type and strategy; also served by the Cloud Quotas stand-in (docs/local.md)",
    )
    up.add_argument(
        "--teams",
        metavar="FILE",
        help="teams (YAML or JSON), the shape of Terraform's variable `teams`: each gets its own request topic "
        "<prefix>-requests-<team>, a share of each GPU quota, a fair-share weight and a monthly budget (docs/teams.md)",
    )
    up.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a secret in the local Secret Manager, projects/<project>/secrets/NAME/versions/1, which every team's own "
        "code may read (trainer.secret_env); NAME=@FILE takes the value from a file (repeatable)",
    )
    up.add_argument(
        "--executors",
        metavar="FILE",
        help="the prebuilt PyTorch containers packages may run on (YAML or JSON), the shape of Terraform's variable "
        "`executors`: name → image, pytorch, cuda, max_compute_capability, available_until (docs/own-code.md); "
        "default: Google's list, whose executors are all past their end of availability",
    )
    up.add_argument(
        "--lease",
        type=int,
        metavar="SECONDS",
        help="how long a claim left by a crashed function holds before another takes it over (default: 60)",
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="start empty: remove the state kept from earlier runs (buckets, models, endpoints, jobs, ledger) first",
    )
    up.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep nothing: buckets in memory (versioned, as in the cloud) and the JobService's state in the run "
        "folder, both emptied at every start; the kept state, if any, is left as it is",
    )
    up.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS", help="with --detach: wait this long")
    up.set_defaults(run=run_up)

    down = verbs.add_parser("down", help="stop the local stack and every process it started")
    down.set_defaults(run=run_down)

    env = verbs.add_parser("env", help='print `export …` lines for another shell: eval "$(trainctl local env)"')
    env.set_defaults(run=run_env)

    export = verbs.add_parser(
        "export",
        help="copy the kept buckets (data, trained models, ledger and history) out, one folder per bucket; any "
        "format, with the stack stopped",
    )
    export.add_argument("directory", metavar="DIR", help="a new or empty folder")
    export.set_defaults(run=run_export)

    logs = verbs.add_parser("logs", help="print the node logs of a job of the local stack")
    logs.add_argument("job", metavar="JOB", help="job id, job resource name or request id")
    logs.add_argument("--node", metavar="NAME", help="only this node (workerpool0-0, …) or `service`")
    logs.set_defaults(run=run_logs)


# ---- up --------------------------------------------------------------------------------------------------


def _options(args: argparse.Namespace) -> Any:
    from local.jobservice.capacity import load_capacity
    from local.stack import StackOptions
    from schemas.images import prefix_problem

    image_map, trigger_rules = json.loads(args.image_map), json.loads(args.trigger_rules)
    if not isinstance(image_map, dict) or not isinstance(trigger_rules, dict):
        raise ValueError("--image-map and --trigger-rules take JSON objects")
    capacity_file = ""
    if args.capacity:
        capacity_file = str(Path(args.capacity).resolve())
        try:
            load_capacity(Path(capacity_file))  # refused here, with the key named, rather than by the JobService
        except OSError as exc:
            raise ValueError(f"--capacity: {exc}") from None
    for prefix in args.allow_image_prefix:  # refused here rather than by every function as it starts
        if problem := prefix_problem(prefix):
            raise ValueError(f"--allow-image-prefix: {problem}")
    if args.lease is not None and args.lease < 1:
        raise ValueError(f"--lease must be at least 1 second, got {args.lease}")
    teams = _teams(args.teams) if args.teams else None
    regions = _regions(args.regions)
    secrets = _secrets(args.secret)
    executors = _executors(args.executors) if args.executors else None
    return StackOptions(
        secrets=secrets,
        capacity_file=capacity_file,
        reconcile_every=args.reconcile_every,
        image_map=image_map,
        allowed_image_prefixes=tuple(args.allow_image_prefix),
        allow_python_packages=args.allow_python_packages,
        trigger_rules=trigger_rules,
        teams=teams,
        executors=executors,
        allowed_regions=regions,
        **({} if args.lease is None else {"lease": args.lease}),
    )


def _regions(given: str) -> tuple[str, ...]:
    """--regions europe-west4,us-east1: Vertex AI region names, refused here rather than by every rung's admission."""
    regions = tuple(dict.fromkeys(item.strip() for item in given.split(",") if item.strip()))
    if bad := [region for region in regions if not REGION_RE.fullmatch(region)]:
        raise ValueError(f"--regions takes region names such as europe-west4, comma-separated; got {', '.join(bad)}")
    return regions


# A Google Cloud region's name: continent-area then a number (us-central1, europe-west4, northamerica-northeast1).
REGION_RE = re.compile(r"[a-z]+-[a-z]+[0-9]{1,2}")
# How `up --detach` hands its --secret values to the stack's own process: in its environment, which only this user
# can read, rather than on its command line, which `ps` shows everyone; the process takes them out at once.
SECRETS_ENV = "TRAINCTL_LOCAL_SECRETS"


def _secrets(given: list[str]) -> dict[str, str]:
    """--secret NAME=VALUE or NAME=@FILE, and those a detaching `up` passed on."""
    secrets = json.loads(os.environ.pop(SECRETS_ENV, "") or "{}")
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_-]{1,255}", name):
            raise ValueError(
                f"--secret takes NAME=VALUE or NAME=@FILE, NAME a secret id ([A-Za-z0-9_-], at most 255), got {name!r}"
            )
        if value.startswith("@"):
            try:
                value = Path(value[1:]).read_text()
            except OSError as exc:
                raise ValueError(f"--secret {name}: {exc}") from None
        secrets[name] = value
    return secrets


def _teams(path: str) -> dict[str, Any]:
    """The --teams file, refused here with the field named rather than by every function as it starts."""
    import yaml

    from functions.teams import TeamsError, parse_teams

    try:
        teams = yaml.safe_load(Path(path).read_text())
        # The stack fills in its data bucket, as Terraform does (local/stack.py): any name places the folders here.
        parse_teams({**teams, "data_bucket": "local-data"} if isinstance(teams, dict) else teams)
    except (OSError, yaml.YAMLError, TeamsError) as exc:
        raise ValueError(f"--teams {path}: {exc}") from None
    return dict(teams)


def _executors(path: str) -> dict[str, Any]:
    """The --executors file, refused here with the executor and key named rather than by every function."""
    import yaml

    from schemas.executors import ExecutorsError, parse_executors

    try:
        executors = yaml.safe_load(Path(path).read_text())
        parse_executors(json.dumps(executors, default=str))
    except (OSError, yaml.YAMLError, ExecutorsError) as exc:
        raise ValueError(f"--executors {path}: {exc}") from None
    return {name: {key: str(value) for key, value in fields.items()} for name, fields in executors.items()}


def run_up(args: argparse.Namespace) -> int:
    current = running_stack()
    if current is not None:
        print(
            f"a local stack is already running (pid {current.pid}); `{trainctl_command()} local down` stops it",
            file=sys.stderr,
        )
        return EXIT_NOT_RUNNING
    try:
        options = _options(args)
    except ValueError as exc:
        print(f"trainctl local up: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.fresh and args.ephemeral:
        print("trainctl local up: --fresh and --ephemeral exclude each other", file=sys.stderr)
        return EXIT_USAGE
    from local.saved_state import SavedStateError, check, saved_dir

    if not (args.fresh or args.ephemeral):
        try:  # refused here too, so that `--detach` says why rather than pointing at its log
            check(saved_dir())
        except SavedStateError as exc:
            print(f"trainctl local up: {exc}", file=sys.stderr)
            return EXIT_REFUSED
    if args.detach:
        return _detach(args)
    lock = take_stack_lock()  # held until this process ends
    if lock is None:
        print(f"another local stack is starting in {local_dir()}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    leftover = read_state()
    if leftover is not None:  # a stack whose process died: clear away what it left running
        stop_recorded_stack(leftover)
    saved = None
    if not args.ephemeral:
        from local.saved_state import prepare

        try:
            saved = prepare(saved_dir(), fresh=args.fresh)  # under the lock: no other stack is using it
        except (SavedStateError, OSError) as exc:
            print(f"trainctl local up: {exc}", file=sys.stderr)
            return EXIT_REFUSED
    return _run_in_foreground(options, saved)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _run_in_foreground(options: Any, saved: Any = None) -> int:
    from local.jobservice.standalone import StartupError
    from local.pubsub_emulator import EmulatorUnavailable
    from local.stack import LocalStack

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    stack = LocalStack(options, local_dir() / "run", os.environ.get(STACK_MARKER_VAR), saved=saved)
    # While starting, SIGTERM interrupts like Ctrl-C: start() then stops whatever it had started.
    signal.signal(signal.SIGTERM, _interrupt)
    print("starting the local stack…", flush=True)
    try:
        state = stack.start(os.getpid())
    except KeyboardInterrupt:
        print("interrupted; everything that had started is stopped", file=sys.stderr)
        return 130
    except (StartupError, EmulatorUnavailable, OSError, RuntimeError) as exc:
        print(f"the local stack did not start: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    write_state(state)
    print(describe(state), flush=True)
    print("Ctrl-C stops everything.", flush=True)
    reported: set[str] = set()
    while not stop.wait(1.0):
        for process in stack.exited():
            if process.name not in reported:  # say so once; the rest of the stack keeps running
                reported.add(process.name)
                print(f"{process.name} exited unexpectedly; its log: {process.log_path}", file=sys.stderr, flush=True)
    print("stopping the local stack…", flush=True)
    stack.stop()
    remove_state()
    print("local stack stopped", flush=True)
    return 0


def _detach(args: argparse.Namespace) -> int:
    """Run `trainctl local up` (the same options, in the foreground) as a background process of its own."""
    from local.processes import stop_group, wait_until

    log_path = local_dir() / "stack.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "trainctl", "local", "up", "--reconcile-every", str(args.reconcile_every)]
    if args.lease is not None:
        command += ["--lease", str(args.lease)]
    command += ["--image-map", args.image_map, "--trigger-rules", args.trigger_rules]
    for prefix in args.allow_image_prefix:
        command += ["--allow-image-prefix", prefix]
    if args.allow_python_packages:
        command.append("--allow-python-packages")
    command += [flag for flag, given in (("--fresh", args.fresh), ("--ephemeral", args.ephemeral)) if given]
    if args.regions:
        command += ["--regions", args.regions]
    if args.capacity:
        command += ["--capacity", str(Path(args.capacity).resolve())]
    if args.teams:
        command += ["--teams", str(Path(args.teams).resolve())]
    if args.executors:
        command += ["--executors", str(Path(args.executors).resolve())]
    # The marker goes into the background process's own environment too, so `local down` finds it as well.
    env = {**os.environ, STACK_MARKER_VAR: uuid.uuid4().hex[:12]}
    if args.secret:
        env[SECRETS_ENV] = json.dumps(_secrets(args.secret))
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=REPO_ROOT, start_new_session=True
        )

    def ready() -> bool:
        state = read_state()
        return state is not None and state.pid == process.pid

    if wait_until(lambda: ready() or process.poll() is not None, args.timeout, interval=0.2) and ready():
        state = read_state()
        assert state is not None
        print(describe(state))
        print(
            f"Running in the background (pid {state.pid}, log {log_path}); `{trainctl_command()} local down` stops it."
        )
        return 0
    stop_group(process.pid, grace=30.0, leader=process)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
    print(f"the local stack did not start. Last lines of {log_path}:\n{tail}", file=sys.stderr)
    return 1


def describe(state: StackState) -> str:
    names, urls = state.names, state.function_urls
    data, every = names["data_bucket"], f"{state.reconcile_every:g}"
    rows = [
        ("Pub/Sub emulator", state.pubsub_host),
        ("fake-gcs-server", state.storage_url),
        (
            "Vertex JobService",
            f"{state.jobservice_address} (gRPC), {state.jobservice_rest_url} (REST, for gcloud and the SDK)",
        ),
        ("Cloud Quotas", f"{state.jobservice_rest_url} (stand-in: the JobService's capacity model)"),
        ("Model Registry", f"{state.jobservice_rest_url} (Vertex's ModelService: gcloud ai models, aiplatform.Model)"),
        ("on_dataset_upload", f"{urls['on_dataset_upload']}  ← uploads to gs://{data} via {state.bridge_url}"),
        ("on_job_request", f"{urls['on_job_request']}  ← topic {names['requests_topic']}"),
        ("on_job_state", f"{urls['on_job_state']}  ← topic {names['job_state_topic']} (JobService states)"),
        ("on_retrain", f"{urls['on_retrain']}  ← topic {names['retrain_topic']} (rule schedules, alerts)"),
        ("reconcile", f"{urls['reconcile']}  ← every {every} s"),
        ("buckets", f"gs://{data} (data), gs://{names['control_bucket']} (ledger, runs)"),
        ("events", f"topic {names['events_topic']}  (trainctl watch)"),
        ("dead letters", f"topic {names['dead_letter_topic']}, subscription {names['dead_letter_subscription']}"),
        *team_topic_rows(state.settings_env.get("TRAINCTL_TEAMS", "")),
        ("project", f"{state.project} ({state.region})"),
        ("logs", state.run_dir),
        ("kept", state.saved_dir or "nothing (--ephemeral): the next `local up` starts empty"),
        ("state", str(state_path())),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"local stack up ({state.stack_id})"] + [f"  {label:<{width}}  {value}" for label, value in rows]
    lines.append(f'Other shells: eval "$({trainctl_command()} local env)"')
    return "\n".join(lines)


def team_topic_rows(teams_setting: str) -> list[tuple[str, str]]:
    """A banner row per team: its own request topic, which `trainctl submit --team NAME` publishes to."""
    teams = (json.loads(teams_setting) if teams_setting else {}).get("teams") or {}
    return [
        (f"team {name}", f"topic {team.get('topic')}  (trainctl submit --team {name})") for name, team in teams.items()
    ]


# ---- down, env -------------------------------------------------------------------------------------------


def run_down(args: argparse.Namespace) -> int:
    state = read_state()
    if state is None:
        print(f"no local stack is running (its folder: {local_dir()})")
        return 0
    stop_recorded_stack(state)
    print("local stack stopped")
    return 0


def run_env(args: argparse.Namespace) -> int:
    state = running_stack()
    if state is None:
        print(f"no local stack is running: {local_stack_hint()}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    print(export_lines(state.shell_env()), end="")
    return 0


# ---- export --------------------------------------------------------------------------------------------


def run_export(args: argparse.Namespace) -> int:
    """Copy saved/buckets/ out: fake-gcs-server's filesystem backend keeps each object as a file under its bucket's
    folder (its metadata in extended attributes), so the copy is plain files whatever the state's format."""
    import shutil

    from local.saved_state import saved_dir

    buckets = saved_dir() / "buckets"
    target = Path(args.directory)
    if running_stack() is not None:
        print(f"the local stack is running; `{trainctl_command()} local down` first, then export", file=sys.stderr)
        return EXIT_REFUSED
    if not buckets.is_dir() or not any(buckets.iterdir()):
        print(f"nothing to export: no kept buckets in {saved_dir()}", file=sys.stderr)
        return 3
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        print(f"trainctl local export: {target} exists and is not an empty folder", file=sys.stderr)
        return EXIT_USAGE
    ignore = shutil.ignore_patterns("*.bucketMetadata")  # fake-gcs-server's own, beside each bucket's folder
    shutil.copytree(buckets, target, ignore=ignore, dirs_exist_ok=True, copy_function=shutil.copy)
    copied = sorted(path.name for path in target.iterdir() if path.is_dir())
    print(f"exported {len(copied)} bucket(s) to {target}: {', '.join(copied)}")
    return 0


# ---- logs ------------------------------------------------------------------------------------------------


def job_name(reference: str, project: str, region: str) -> str | None:
    """A job's resource name from its name, its numeric id, or the id of the request that started it."""
    if reference.startswith("projects/"):
        return reference
    if reference.isdigit():
        return f"projects/{project}/locations/{region}/customJobs/{reference}"
    from trainctl.jobs import find_record

    record = find_record(reference)
    return record.job_name if record is not None else None


def run_logs(args: argparse.Namespace) -> int:
    from local.jobservice.control import JobServiceControl
    from trainctl.context import cli_settings

    state = running_stack()
    if state is None:
        print(
            f"`local logs` reads the local JobService, and no local stack is running: {local_stack_hint()}",
            file=sys.stderr,
        )
        return EXIT_NOT_RUNNING
    settings = cli_settings()
    name = job_name(args.job, settings.project, settings.region)
    if name is None:
        print(f"no job for {args.job!r}: not a job id, and no request with that id has a job", file=sys.stderr)
        return 3
    control = JobServiceControl(state.jobservice_address)  # the control API is served over gRPC
    try:
        logs = control.replica_logs(name)
    finally:
        control.close()
    if args.node:
        logs = {node: path for node, path in logs.items() if node == args.node}
    if not logs:
        print(f"no logs for {name}" + (f" node {args.node}" if args.node else ""), file=sys.stderr)
        return 3
    # The service log (state changes) first, then the nodes in order.
    for node in sorted(logs, key=lambda node: (node != "service", node)):
        print(f"==> {node} ({logs[node]}) <==")
        print(Path(logs[node]).read_text(errors="replace"), end="", flush=True)
    return 0
