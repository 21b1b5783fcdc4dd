"""Which deployment the user's commands talk to: the TRAINCTL_* environment when it names a project (a
real deployment, or a shell that ran `eval "$(trainctl local env)"`), else a running local stack (its state
file), else the local stack's defaults (enough for the commands that need no network, such as `plan`)."""

from __future__ import annotations

import os

from functions.settings import Settings
from local.names import LOCAL_PROJECT, LOCAL_REGION, LOCAL_TRAINER_IMAGE, Names
from local.stack_state import running_stack


def cli_settings() -> Settings:
    """The controller settings of the deployment in use. For a running local stack this also points the
    Google client libraries of this process at its emulators (they read PUBSUB_EMULATOR_HOST and
    STORAGE_EMULATOR_HOST from the environment)."""
    if os.environ.get("TRAINCTL_PROJECT"):
        return Settings.from_env()
    stack = running_stack()
    if stack is not None:
        os.environ.update(stack.emulator_env())
        return Settings.from_env(stack.settings_env)
    names = Names(LOCAL_PROJECT)
    return Settings(
        project=LOCAL_PROJECT,
        region=LOCAL_REGION,
        control_bucket=names.control_bucket,
        events_topic=names.events_topic,
        trainer_image=LOCAL_TRAINER_IMAGE,
    )


def requests_topic() -> str:
    """The topic job requests are published to (only the command line needs it, not the functions)."""
    return os.environ.get("TRAINCTL_REQUESTS_TOPIC") or Names(cli_settings().project).requests_topic


def events_subscription() -> str | None:
    """The watcher's own subscription on the events topic (Terraform's `event_watchers` makes one per watcher),
    or None: the command then makes a subscription of its own for as long as it runs."""
    return os.environ.get("TRAINCTL_EVENTS_SUBSCRIPTION") or None
