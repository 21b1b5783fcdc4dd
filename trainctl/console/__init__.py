"""`trainctl console [--host 127.0.0.1] [--port 8765] [--team T]`: a read-only web console over the deployment this
shell talks to (issue 45). The app is app.py's; this module starts it: the first line printed is its URL, then it
serves until Ctrl-C or SIGTERM, and exits 0."""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("console", help="a read-only web console: what runs, waits, costs and serves, live")
    cmd.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to listen on (default {DEFAULT_HOST}: this machine only; the console has no login)",
    )
    cmd.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks a free one")
    cmd.add_argument("--team", metavar="NAME", help="with teams: show only this team's requests, quota and models")
    cmd.add_argument(
        "--subscription",
        metavar="NAME",
        help="follow the events through your own subscription (Terraform's event_watchers) instead of making one",
    )
    cmd.set_defaults(run=run_console)


class _Stopped(Exception):
    """Ctrl-C or SIGTERM before the server took over its signals."""


def _stop_now(signum: int, frame: Any) -> None:
    raise _Stopped


def run_console(args: argparse.Namespace) -> int:
    previous = {s: signal.signal(s, _stop_now) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run_console(args)
    except _Stopped:
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_console(args: argparse.Namespace) -> int:
    from trainctl.console.app import create_app
    from trainctl.console.identity import cloud_viewer_from_env, local_viewer
    from trainctl.context import cli_settings, cli_team, events_subscription
    from trainctl.problems import Problem

    if not 0 <= args.port <= 65535:
        raise Problem(f"--port {args.port}: a port is 0 (any free one) to 65535")
    settings = cli_settings()
    team = cli_team(settings, args.team) if args.team else None
    listener = _listen(args.host, args.port)
    host, port = listener.getsockname()[:2]
    # The console's Cloud Run service names IAP's audience: each viewer is who IAP's signed header says.
    behind_iap = cloud_viewer_from_env(settings.teams)
    app = create_app(
        settings,
        behind_iap or local_viewer,
        subscription=args.subscription or events_subscription(),
        team=team,
        logs_local=_local_logs() is not None,
        sources=_sources(settings),
    )
    shown = f"[{host}]" if ":" in host else host
    print(f"console: http://{shown}:{port}/", flush=True)
    if behind_iap is not None:
        print("console: behind Identity-Aware Proxy: each viewer sees the teams IAP's signed header allows", flush=True)
    elif args.host not in LOOPBACK:
        print(
            f"console: listening on {args.host}: anyone who can reach it sees every request, unauthenticated",
            file=sys.stderr,
            flush=True,
        )
    _serve(app, listener)
    return 0


def _listen(host: str, port: int) -> socket.socket:
    from trainctl.problems import Problem

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise Problem(f"cannot listen on {host}:{port} ({exc.strerror}): choose another --port, or 0 for any") from None
    listener.listen(128)
    return listener


def _local_logs() -> Any:
    from local.stack_state import running_stack

    return running_stack()


def _sources(settings: Any) -> Any:
    """The console's readers; on the local stack, with the node logs its JobService keeps."""
    from trainctl.console.reading import Sources

    stack = _local_logs()
    if stack is None:
        return Sources.of_settings(settings)

    def log_paths(job_name: str) -> dict[str, str]:
        from local.jobservice.control import JobServiceControl

        control = JobServiceControl(stack.jobservice_address)
        try:
            return control.replica_logs(job_name)
        finally:
            control.close()

    return Sources.of_settings(settings, log_paths=log_paths)


def _serve(app: Any, listener: socket.socket) -> None:
    """Serve until Ctrl-C or SIGTERM, then shut down (the live feed deletes its subscription) and return: uvicorn's
    own signal handling would raise the signal again once stopped, and the command would not exit 0."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            def stop(signum: int, frame: Any) -> None:
                self.should_exit = True

            previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

    Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3, lifespan="on")).run(sockets=[listener])
