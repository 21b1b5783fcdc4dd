"""Which deployment the user's commands talk to: the TRAINCTL_* environment when it names a project (a
real deployment, or a shell that ran `eval "$(trainctl local env)"`), otherwise the local stack's defaults."""

from __future__ import annotations

import os

from functions.settings import Settings
from local.names import LOCAL_PROJECT, LOCAL_REGION, LOCAL_TRAINER_IMAGE, Names


def cli_settings() -> Settings:
    if os.environ.get("TRAINCTL_PROJECT"):
        return Settings.from_env()
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
