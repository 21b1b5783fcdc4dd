"""`python -m local.jobservice --port PORT [--state-dir DIR] …`: run the local Vertex JobService as its
own process. The first line on stdout is `local JobService listening on HOST:PORT, REST on URL`
(gRPC, then Vertex's REST mapping of the JobService and the ModelService, Cloud Logging's entries:list and
the Cloud Quotas stand-in); logs go to stderr. Jobs and models are kept in --state-dir.
SIGTERM or Ctrl-C stops it and the nodes of running jobs (those jobs fail); SIGKILL leaves the nodes
running, and a server restarted on the same --state-dir adopts them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from local.jobservice.capacity import CapacityError, load_capacity
from local.jobservice.model_rules import project_numbers
from local.jobservice.packages import DEFAULT_PACKAGE_INDEX
from local.jobservice.replicas import DEFAULT_IMAGE_MAP, ExecutionSettings
from local.jobservice.secret_manager import SecretsFileError, SecretStore
from local.jobservice.server import LocalJobService


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local.jobservice", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--rest-port", type=int, default=0, help="port of the REST APIs; 0 picks a free one (default)")
    parser.add_argument(
        "--state-dir", type=Path, help="where jobs, logs and run records live (default: a new temp dir)"
    )
    parser.add_argument(
        "--image-map",
        default="{}",
        help='JSON object: image URI prefix → entry point, e.g. \'{"us-docker.pkg.dev/p/r/trainer": '
        '["python", "-m", "trainer.launch"]}\'; added to the default map of ' + ", ".join(DEFAULT_IMAGE_MAP),
    )
    parser.add_argument("--max-procs-per-node", type=int, default=2, help="cap on CPU processes standing in for GPUs")
    parser.add_argument("--cancel-grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument(
        "--storage-emulator-host",
        default=os.environ.get("STORAGE_EMULATOR_HOST"),
        help="fake-gcs-server URL handed to every node (default: $STORAGE_EMULATOR_HOST)",
    )
    parser.add_argument(
        "--package-index",
        default=DEFAULT_PACKAGE_INDEX,
        help="where a Python package's requirements the executor lacks are fetched from, wheels only: an index URL "
        f"or a folder of wheels (default: {DEFAULT_PACKAGE_INDEX})",
    )
    parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="nodes' working directory (default: cwd)")
    parser.add_argument(
        "--capacity",
        type=Path,
        help="a capacity model file (YAML or JSON; local/jobservice/capacity.py): GPU quotas per region, "
        "stockouts and preemptions per machine type and strategy",
    )
    parser.add_argument(
        "--project-number",
        action="append",
        default=[],
        metavar="PROJECT=NUMBER",
        help="the number the Model Registry spells project PROJECT with in its answers, as Vertex does (repeatable); "
        "other projects get a stable 12-digit number derived from their id",
    )
    parser.add_argument(
        "--secrets-file",
        type=Path,
        help="Secret Manager's secrets for the nodes (local/jobservice/secret_manager.py): JSON, "
        '{"secrets": {"projects/P/secrets/S": {"versions": ["value", …], "accessors": ["account email", …]}}}',
    )
    parser.add_argument(
        "--announce-topic",
        help="projects/P/topics/T: publish every state change there in the Cloud Logging sink's shape "
        "(needs PUBSUB_EMULATOR_HOST for the emulator)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    image_map = {**DEFAULT_IMAGE_MAP, **{k: tuple(v) for k, v in json.loads(args.image_map).items()}}
    settings = ExecutionSettings(
        image_map=image_map,
        max_procs_per_node=args.max_procs_per_node,
        storage_emulator_host=args.storage_emulator_host,
        package_index=args.package_index,
        workdir=args.workdir.resolve(),
        cancel_grace=args.cancel_grace,
    )
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="trainctl-jobservice-"))
    try:
        capacity = load_capacity(args.capacity) if args.capacity else None
    except (CapacityError, OSError) as error:
        print(f"--capacity: {error}", file=sys.stderr)
        return 2
    pins = dict(pin.split("=", 1) for pin in args.project_number if "=" in pin)
    if len(pins) != len(args.project_number) or not all(number.isdigit() for number in pins.values()):
        print(f"--project-number: write PROJECT=NUMBER (digits), got {args.project_number}", file=sys.stderr)
        return 2
    try:
        secrets = SecretStore.load(args.secrets_file, project_numbers(pins)) if args.secrets_file else None
    except SecretsFileError as error:
        print(f"--secrets-file: {error}", file=sys.stderr)
        return 2
    service = LocalJobService(
        state_dir,
        settings,
        host=args.host,
        port=args.port,
        exit_on_crash=True,
        rest_port=args.rest_port,
        capacity=capacity,
        project_numbers=project_numbers(pins),
        secrets=secrets,
    )
    announcer = None
    if args.announce_topic:
        from local.jobservice.announce import StateAnnouncer

        announcer = StateAnnouncer(args.announce_topic)
        service.add_transition_hook(announcer)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    address = service.start()
    print(f"local JobService listening on {address}, REST on {service.rest_url}", flush=True)
    print(f"state and job logs in {state_dir}", flush=True)
    stop.wait()
    service.stop(stop_jobs=True)
    if announcer is not None:
        announcer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
