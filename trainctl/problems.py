"""What the command line says when a service it needs is absent or refuses it, or a file the user named cannot be
read: one line naming what is missing and the command that fixes it, never a traceback (`trainctl.cli.main` prints
it). A bug still raises: only the failures listed here are the user's to fix."""

from __future__ import annotations

import os
from typing import Any

from trainctl.hints import local_stack_hint

EXIT_PROBLEM = 1
# Ctrl-C, as a shell reports a process it interrupted.
EXIT_INTERRUPTED = 130


class Problem(Exception):
    """A problem the user can fix, said in one line (what is wrong, and what would fix it)."""

    def __init__(self, message: str, exit_code: int = EXIT_PROBLEM):
        super().__init__(message)
        self.exit_code = exit_code


def _unreachable(what: str, detail: str) -> str:
    """`what` did not answer: with an emulator in the environment the local stack has stopped, so say how to
    start it; against Google, the network or the service is at fault."""
    if os.environ.get("PUBSUB_EMULATOR_HOST") or os.environ.get("STORAGE_EMULATOR_HOST"):
        return f"the local stack does not answer ({what}: {detail}); has it stopped? {local_stack_hint()}"
    return f"cannot reach {what}: {detail}"


def explain(exc: BaseException) -> str | None:
    """One line for a failure the user can act on; None for anything else (a bug: let it raise)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from requests import exceptions as http_exc

    from functions.cloud.errors import Transient
    from functions.cloud.gcs import StorageError
    from functions.cloud.vertex import CallRejected
    from functions.settings import SettingsError
    from local.processes import StartupError
    from local.pubsub_emulator import EmulatorUnavailable

    if isinstance(exc, Problem | EmulatorUnavailable | StartupError):  # the last two say what to install or look at
        return str(exc)
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return (
            "no Google credentials on this machine: sign in with `gcloud auth application-default login` "
            f"(or, for the local stack instead of a project, unset TRAINCTL_PROJECT: {local_stack_hint()})"
        )
    if isinstance(exc, auth_exc.RefreshError):
        return (
            f"Google refused the credentials ({_first_line(exc)}): sign in again with "
            "`gcloud auth application-default login`"
        )
    if isinstance(exc, SettingsError):
        return f"the TRAINCTL_* settings in this environment are incomplete: {_first_line(exc)}"
    if isinstance(exc, Transient):
        return _unreachable("Google Cloud", _first_line(exc))
    if isinstance(exc, gexc.ServiceUnavailable | gexc.DeadlineExceeded | gexc.RetryError):
        return _unreachable("Pub/Sub", _first_line(exc))
    if isinstance(exc, gexc.GoogleAPICallError):
        return f"Google refused the call: {_first_line(exc)}"
    if isinstance(exc, StorageError):
        return f"Cloud Storage refused the call: {_first_line(exc)}"
    if isinstance(exc, CallRejected):
        return f"Vertex AI refused the call: {_first_line(exc)}"
    if isinstance(exc, http_exc.ConnectionError):
        return _unreachable(_host(exc.request), "the connection was refused")
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    return None


def _host(request: Any) -> str:
    url = getattr(request, "url", None) or ""
    return url.split("/")[2] if url.count("/") >= 2 else "a Google API"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
