"""`trainctl submit FILE [--wait]`: validate on this side, publish to the requests topic, and with --wait
follow the request's events to the end. The request is published even when its events cannot be followed
from this account; the command then says how to follow it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from functions.jobs.admission import PACKAGES_OFF_FIX
from functions.ledger.keys import request_key
from functions.settings import Settings
from functions.untrusted.documents import DocumentInvalid, load_document
from functions.untrusted.package_code import PackageCodeError
from local.names import Names
from schemas.errors import RequestInvalid
from trainctl.context import (
    cli_namespace,
    cli_settings,
    cli_team,
    events_subscription,
    requests_topic,
    team_requests_topic,
)
from trainctl.eventstream import (
    EXIT_CANNOT_FOLLOW,
    HOW_TO_WATCH,
    CannotFollow,
    EventStream,
    format_event,
    of_delivery,
    rejected_delivery,
)
from trainctl.hints import trainctl_command
from trainctl.problems import EXIT_INTERRUPTED
from trainctl.source_package import (
    SourceArchive,
    SourceError,
    build_source_archive,
    inspect_source,
    named_executor,
)
from trainctl.validate import EXIT_INVALID, load_request_file

EXIT_FAILED = 1
# A final event, and the exit status it gives `submit --wait`: a request a trigger policy skipped (issue 42) did what
# its model block asked.
FINAL_EXIT = {
    "succeeded": 0,
    "skipped": 0,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_FAILED,
    "rejected": EXIT_INVALID,
}


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("submit", help="publish a job request (YAML or JSON) to the requests topic")
    cmd.add_argument("file", type=Path, metavar="FILE")
    cmd.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="your own code: package DIR as a source distribution, upload it (named by its sha256, so the same code "
        "is uploaded once) and fill the request's trainer.python_package.uris",
    )
    cmd.add_argument(
        "--source-bucket",
        metavar="BUCKET",
        help="with --source: where the package goes (default: the first allowed data bucket, which jobs may read)",
    )
    cmd.add_argument(
        "--team",
        metavar="NAME",
        help="with teams: publish to this team's own request topic (default: $TRAINCTL_REQUESTS_TOPIC, whose team "
        "the request then is)",
    )
    cmd.add_argument("--wait", action="store_true", help="follow the request's events until it ends")
    cmd.add_argument("--no-validate", action="store_true", help="send the file as it is; the server validates it")
    cmd.add_argument("--json", action="store_true", help="events as JSON lines")
    cmd.add_argument("--timeout", type=float, metavar="SECONDS", help="with --wait: give up after this long")
    cmd.add_argument(
        "--subscription",
        metavar="NAME",
        default=events_subscription(),
        help="with --wait: follow events through your own subscription (Terraform's event_watchers makes it; "
        "default: $TRAINCTL_EVENTS_SUBSCRIPTION), instead of making one",
    )
    cmd.set_defaults(run=run_submit)


def closed_topic(settings: Settings, team: str | None) -> str | None:
    """Why this shell may not publish where it would (None when it may): with teams, the shared topic takes requests
    only where the operator opened it (teams.shared_intake_open; issue 40, point 5)."""
    teams = settings.teams
    topic = team_requests_topic(settings, team) if team else requests_topic()
    if teams is None or teams.topic_team(topic) is not None or (closed := teams.shared_topic_problem()) is None:
        return None
    return f"not submitted: {closed.removeprefix('topic: ')}; this deployment's teams: {', '.join(teams.teams)}"


def run_submit(args: argparse.Namespace) -> int:
    package_uris = None
    if args.team is not None:
        cli_team(cli_settings(), args.team)  # an unknown team is refused naming the known ones, before anything else
    if args.source is not None:
        if args.no_validate:
            print("--source fills the request before it is sent; it cannot be combined with --no-validate")
            return EXIT_INVALID
        if closed := closed_topic(cli_settings(), args.team):  # before its code is uploaded under a team's folder
            print(closed)
            return EXIT_INVALID
        if not cli_settings().allow_python_packages:  # said before the upload, as admission would refuse it after
            print(
                f"{args.file}: not submitted: this deployment runs no Python packages of requesters' own "
                f"({PACKAGES_OFF_FIX})"
            )
            return EXIT_INVALID
        try:
            archive = build_source_archive(args.source)
            # What pip will install with it on every node, and whether the executor's Python runs it (issue 40).
            report = inspect_source(archive, cli_settings().executors.get(executor_in_file(args.file) or ""))
            for line in report.lines:
                print(line, file=sys.stderr)
            if report.problems:
                for problem in report.problems:
                    print(f"{args.source}: {problem}")
                print(f"{args.source}: the executor cannot run this code, not submitted")
                return EXIT_INVALID
            package_uris = [upload_source(args.source, args.source_bucket, args.team, archive)]
        except (SourceError, PackageCodeError) as exc:
            print(f"{args.source}: {exc}, not submitted")
            return EXIT_INVALID
    if args.no_validate:
        payload, request_id = args.file.read_bytes(), None
    else:
        try:
            request = load_request_file(args.file, package_uris)
        except RequestInvalid as exc:
            print(f"{args.file}: invalid, not submitted")
            for error in exc.errors:
                print(f"  {error}")
            return EXIT_INVALID
        payload, request_id = (
            json.dumps(request.model_dump(mode="json", exclude_none=True)).encode(),
            request.request_id,
        )
    settings = cli_settings()
    if closed := closed_topic(settings, args.team):
        print(closed)
        return EXIT_INVALID
    namespace = cli_namespace(settings, args.team)
    topic = team_requests_topic(settings, args.team) if args.team else requests_topic()
    # The key its request gets: a request id names a request within its team (functions/ledger/keys.py).
    key = request_key(request_id, namespace) if request_id else None
    stream, refusal = None, None
    if args.wait:
        try:  # before publishing, so that no event about the request can be missed
            stream = EventStream(settings.project, settings.events_topic, args.subscription)
        except CannotFollow as exc:
            refusal = str(exc)  # publish all the same, then say how to follow the request
    try:
        message_id = publish_request(settings.project, topic, payload)
        print(f"published {args.file} as message {message_id}" + (f" (request {request_id})" if request_id else ""))
        if not args.wait:
            return 0
        if stream is not None:
            until = datetime.now(UTC) + timedelta(seconds=args.timeout) if args.timeout else None
            try:
                return follow_request(stream, key, message_id, args.json, until)
            except CannotFollow as exc:
                refusal = str(exc)
            except KeyboardInterrupt:
                return interrupted(request_id, args.team)
        return cannot_follow(refusal or "", request_id, args.team)
    finally:
        if stream is not None:
            stream.close()


def executor_in_file(path: Path) -> str | None:
    """The executor the request file names, read before the file is validated (that comes once the URI is known)."""
    try:
        return named_executor(load_document(path.read_bytes(), max_bytes=max(path.stat().st_size, 1)))
    except (OSError, DocumentInvalid):
        return None


def upload_source(
    folder: Path, bucket: str | None, team: str | None = None, archive: SourceArchive | None = None
) -> str:
    """Package `folder` and upload it where jobs can read it, unless that very archive is there already (the hashes
    Cloud Storage states of the object say so); its URI. SourceError for an object of that name holding other
    bytes: it is neither reused nor overwritten. With teams it goes under the folder of `team` (--team), else of the
    team this shell publishes as."""
    import google.cloud.storage as storage
    from google.api_core.exceptions import Forbidden, NotFound, PreconditionFailed
    from google.auth.credentials import AnonymousCredentials

    settings = cli_settings()
    archive = archive or build_source_archive(folder)
    bucket = bucket or next(iter(settings.allowed_data_buckets), None) or Names(settings.project).data_bucket
    name = archive.object_name(cli_team(settings, team))
    uri = f"gs://{bucket}/{name}"
    # The local stack's fake-gcs-server takes no credentials; a deployment, the user's own.
    credentials = AnonymousCredentials() if os.environ.get("STORAGE_EMULATOR_HOST") else None
    client = storage.Client(project=settings.project, credentials=credentials)
    blob = client.bucket(bucket).blob(name)
    for _ in range(2):  # a second time only if the object vanished between the refused create and the look at it
        try:  # created only if absent; never overwritten
            blob.upload_from_string(archive.data, content_type="application/gzip", if_generation_match=0)
            print(f"uploaded {folder} as {uri}")
            return uri
        except PreconditionFailed:
            pass
        except Forbidden as exc:
            raise SourceError(
                f"you may not create {uri} ({exc.message}); with teams, packages go under packages/<team>/ of the "
                "team whose topic you publish to (TRAINCTL_REQUESTS_TOPIC), which only its uploaders may write"
            ) from None
        try:
            blob.reload()
        except NotFound:
            continue
        if (problem := archive.reuse_problem(uri, blob.md5_hash, blob.crc32c, blob.size)) is not None:
            raise SourceError(problem)
        print(f"{folder} is unchanged: reusing {uri}")
        return uri
    raise SourceError(f"{uri} was there and then was not, twice: try again")


def interrupted(request_id: str | None, team: str | None = None) -> int:
    """Ctrl-C while `submit --wait` follows: only the following stops; the request goes on. Say how to follow it
    again or cancel it; exit as a shell reports an interrupted command."""
    trainctl, scope = trainctl_command(), f" --team {team}" if team else ""
    named = request_id or "<its request_id>"
    print(
        f"stopped following; request {named} goes on. Follow it: `{trainctl} watch --request {named}{scope}` or "
        f"`{trainctl} status {named}{scope}`; cancel it: `{trainctl} cancel {named}{scope}`",
        file=sys.stderr,
    )
    return EXIT_INTERRUPTED


def cannot_follow(refusal: str, request_id: str | None, team: str | None = None) -> int:
    """Say why the published request's events cannot be followed from here, and what will."""
    print(f"cannot follow its events: {refusal}", file=sys.stderr)
    where = f"{trainctl_command()} status {request_id or '<its request_id>'}" + (f" --team {team}" if team else "")
    print(f"  - where it stands: {where} (reads the ledger in the control bucket)", file=sys.stderr)
    print(f"  - to follow its events: {HOW_TO_WATCH}", file=sys.stderr)
    return EXIT_CANNOT_FOLLOW


def publish_request(project: str, topic: str, payload: bytes) -> str:
    import google.cloud.pubsub_v1 as pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    return publisher.publish(publisher.topic_path(project, topic), payload).result(timeout=60)


def follow_request(stream: EventStream, key: str | None, message_id: str, as_json: bool, until: datetime | None) -> int:
    """Print the events of the request this command published, until it ends: those of its own delivery (Pub/Sub's
    `message_id`, which no document can choose), and the lifecycle of the request it claimed or joined, by that
    request's key (`key` as computed here; the key its delivery's first event names, where the controller knows
    better: a request from before the team namespaces keeps its old key). Another delivery naming the same request id
    (its rejection, its duplicate) is not this request's doing, and never ends the wait (issue 38, point 6)."""
    for event in stream.follow(until):
        own = of_delivery(event, message_id)
        if own:
            key = event.request_key
        elif event.delivery is not None or rejected_delivery(event) or key is None or event.request_key != key:
            continue
        print(event.model_dump_json(exclude_none=True) if as_json else format_event(event, own=True), flush=True)
        if event.state in FINAL_EXIT:
            return FINAL_EXIT[event.state]
        if event.state == "duplicate" and event.existing_state in FINAL_EXIT:
            return FINAL_EXIT[event.existing_state]
    print("gave up waiting (--timeout)", file=sys.stderr)
    return EXIT_FAILED
