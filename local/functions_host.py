"""The Cloud Functions stand-in: one functions-framework process per entry point of functions/main.py, each on
its own free port, with the controller's TRAINCTL_* settings and the emulators' addresses in its environment.

This is how the function code runs in the cloud too (functions-framework serving one target), so local runs
and tests exercise the same HTTP path: CloudEvents in binary mode, raw Pub/Sub pushes, plain HTTP for
`reconcile`. Per DESIGN.md §6 the repository root goes on PYTHONPATH.

Each process runs with the timeout Terraform gives the deployed function: functions-framework hands
CLOUD_RUN_TIMEOUT_SECONDS to gunicorn as its timeout (functions_framework/_http/gunicorn.py), as Cloud Run sets
it, and the handlers read the same number as TRAINCTL_FUNCTION_TIMEOUT to keep their deadline inside it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from functions.main import __all__ as deployed_functions
from functions.settings import Settings
from local.processes import ManagedProcess, on_free_port, require_ready, start_process, stop_all
from schemas.rules import parse_duration

REPO_ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS: tuple[str, ...] = tuple(deployed_functions)
# Terraform's function_timeout_seconds default (a test compares them): one number for the settings' default,
# the local functions' timeout and the local push subscriptions' ack deadline.
FUNCTION_TIMEOUT_SECONDS = Settings.function_timeout


def function_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment a function process gets: `env`, the repository on PYTHONPATH, and its timeout (the
    TRAINCTL_FUNCTION_TIMEOUT of `env`, else Terraform's default) as both variables that carry it."""
    timeout = parse_duration(env.get("TRAINCTL_FUNCTION_TIMEOUT") or str(FUNCTION_TIMEOUT_SECONDS))
    return {
        **os.environ,
        **env,
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONUNBUFFERED": "1",
        "CLOUD_RUN_TIMEOUT_SECONDS": str(timeout),
        "TRAINCTL_FUNCTION_TIMEOUT": str(timeout),
    }


@dataclass
class FunctionProcess:
    target: str
    port: int
    process: ManagedProcess

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self, grace: float = 5.0) -> None:
        self.process.stop(grace)


def stop_functions(functions: Iterable[FunctionProcess], grace: float = 5.0) -> None:
    """Stop several function servers at once (see local.processes.stop_all)."""
    stop_all([function.process for function in functions], grace)


def start_function(
    target: str, env: Mapping[str, str], log_dir: Path, port: int | None = None, timeout: float = 30.0
) -> FunctionProcess:
    """Serve one entry point; `env` holds the TRAINCTL_* settings and the emulator variables."""
    process_env = function_environment(env)

    def start(port: int) -> FunctionProcess:
        command = [
            sys.executable, "-m", "functions_framework",
            "--target", target,
            "--source", str(REPO_ROOT / "functions" / "main.py"),
            "--host", "127.0.0.1",
            "--port", str(port),
        ]  # fmt: skip
        process = start_process(target, command, log_dir / f"{target}.log", env=process_env, cwd=REPO_ROOT)
        require_ready(process, lambda: True, timeout, f"functions-framework serving {target}", port=port)
        return FunctionProcess(target, port, process)

    return on_free_port(start, port)


def start_functions(
    env: Mapping[str, str], log_dir: Path, targets: tuple[str, ...] = ENTRY_POINTS
) -> dict[str, FunctionProcess]:
    """Serve every target at once (each spends most of its start-up importing, so they overlap well); when one
    fails to come up, the others are stopped and its error is raised."""
    with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="start-function") as pool:
        futures = {target: pool.submit(start_function, target, env, log_dir) for target in targets}
        wait(futures.values())
    started = {target: future.result() for target, future in futures.items() if future.exception() is None}
    failures = [error for future in futures.values() if (error := future.exception()) is not None]
    if failures:
        stop_functions(started.values())
        raise failures[0]
    return started
