"""Which deployment the user's commands talk to: the TRAINCTL_* environment when it names a project (a
real deployment, or a shell that ran `eval "$(trainctl local env)"`), else a running local stack (its state
file); with neither, the commands that need the network say so, and those that need none (`plan`) use the local
stack's defaults."""

from __future__ import annotations

import os

from functions.ledger.keys import id_namespace
from functions.settings import Settings
from local.names import LOCAL_PROJECT, LOCAL_REGION, LOCAL_TRAINER_IMAGE, Names
from local.stack_state import running_stack
from trainctl.hints import local_stack_hint, trainctl_command
from trainctl.problems import Problem


def refuse_a_stopped_stack() -> None:
    """A Problem when this shell's exports name a local stack that no longer answers (a 1 s probe), before any call
    would hang on it."""
    if (dead := dead_local_endpoint()) is not None:
        trainctl = trainctl_command()
        raise Problem(
            f"the local stack at {dead} is not running (this shell holds a stopped stack's exports): start it "
            f'with `{trainctl} local up --detach` and run `eval "$({trainctl} local env)"` again, or unset '
            f"{', '.join(LOCAL_EXPORTS)} and TRAINCTL_PROJECT"
        )


def cli_settings(offline: bool = False) -> Settings:
    """The controller settings of the deployment in use. For a running local stack this also points the
    Google client libraries of this process at its emulators (they read PUBSUB_EMULATOR_HOST and
    STORAGE_EMULATOR_HOST from the environment). With neither a project nor a stack, `offline` callers get the
    local stack's defaults; the others a Problem saying how to get one or the other."""
    if os.environ.get("TRAINCTL_PROJECT"):
        if not offline:
            refuse_a_stopped_stack()
        return Settings.from_env()
    stack = running_stack()
    if stack is not None:
        os.environ.update(stack.emulator_env())
        return Settings.from_env(stack.settings_env)
    if not offline:
        raise Problem(
            f"no local stack is running and no project is set: {local_stack_hint()}; for a deployment, set "
            "TRAINCTL_PROJECT and the other TRAINCTL_* settings (`terraform -chdir=terraform output "
            "controller_environment`)"
        )
    names = Names(LOCAL_PROJECT)
    return Settings(
        project=LOCAL_PROJECT,
        region=LOCAL_REGION,
        control_bucket=names.control_bucket,
        events_topic=names.events_topic,
        trainer_image=LOCAL_TRAINER_IMAGE,
    )


# The variables `trainctl local env` exports that point at the stack's ports (local/stack_state.py, shell_env).
LOCAL_EXPORTS = ("PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST", "TRAINCTL_VERTEX_ENDPOINT")
# Long enough for a loopback port that is listening, short enough that a closed one is said at once: a publish to a
# dead emulator otherwise waits 60 s and ends in a TimeoutError (issue 44, point 4).
PROBE_SECONDS = 1.0


def dead_local_endpoint() -> str | None:
    """The first emulator address of this shell's environment, on this machine, that nothing listens on (a stopped
    local stack's exports); None when all answer or none is local. Addresses elsewhere are never probed: a
    deployment's own endpoints are Google's."""
    import socket
    from urllib.parse import urlsplit

    for name in LOCAL_EXPORTS:
        value = os.environ.get(name, "")
        if not value:
            continue
        address = urlsplit(value if "://" in value else f"//{value}")
        if address.hostname not in ("localhost", "127.0.0.1", "::1") or address.port is None:
            continue
        try:
            socket.create_connection((address.hostname, address.port), timeout=PROBE_SECONDS).close()
        except OSError:
            return f"{address.hostname}:{address.port} ({name})"
    return None


def requests_topic() -> str:
    """The topic job requests are published to (only the command line needs it, not the functions)."""
    return os.environ.get("TRAINCTL_REQUESTS_TOPIC") or Names(cli_settings().project).requests_topic


def cli_team(settings: Settings, named: str | None = None) -> str | None:
    """The team this user's commands act as: `--team NAME`, else the team whose request topic this shell publishes to
    (TRAINCTL_REQUESTS_TOPIC; the shared topic is the default team's); None where the deployment has no teams. A
    request id names a request within its team (functions/ledger/keys.py), so `status`, `cancel` and `watch` need it."""
    teams = settings.teams
    if teams is None:
        if named is not None:
            raise Problem(f"--team {named}: this deployment has no teams (TRAINCTL_TEAMS is not set)")
        return None
    if named is None:
        return teams.team_of_topic(requests_topic())
    if named not in teams.teams:
        raise Problem(f"--team {named}: not one of this deployment's teams ({', '.join(teams.teams)})")
    return named


def cli_namespace(settings: Settings, named: str | None = None) -> str | None:
    """The namespace of the request ids this user's commands name (keys.id_namespace): None for the default team."""
    teams = settings.teams
    return id_namespace(cli_team(settings, named), teams.default_team if teams else None)


def team_requests_topic(settings: Settings, team: str | None) -> str:
    """Where a request of `team` is published: its own topic (Terraform fills each team's), else this shell's."""
    topic = settings.teams.teams[team].topic if settings.teams and team in settings.teams.teams else None
    return topic or requests_topic()


def events_subscription() -> str | None:
    """The watcher's own subscription on the events topic (Terraform's `event_watchers` makes one per watcher),
    or None: the command then makes a subscription of its own for as long as it runs."""
    return os.environ.get("TRAINCTL_EVENTS_SUBSCRIPTION") or None
