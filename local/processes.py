"""Start and stop the local stack's processes: each in its own session and process group, stopped by
its group id (SIGTERM, then SIGKILL after a grace period), so that children such as the Java process
the gcloud emulator launcher spawns go with it. Also: free ports, readiness polling, and a scan for
processes that outlived a run (found by a marker variable in their environment).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

# Every process the test session starts inherits this variable (tests/conftest.py sets it), so a scan
# of /proc finds anything left behind, however deeply it was spawned.
SESSION_MARKER_VAR = "TRAINCTL_TEST_SESSION"
# The same for every process of one local stack (`trainctl local up`; local/stack_state.py) and of one
# benchmark run (bench/stack.py).
STACK_MARKER_VAR = "TRAINCTL_LOCAL_STACK"
BENCH_MARKER_VAR = "TRAINCTL_BENCH_RUN"
# These label processes and configure nothing: the local JobService hands them on to job nodes, which
# otherwise get a container's environment rather than its own, so that the scans find the nodes too.
PROCESS_MARKER_VARS = (SESSION_MARKER_VAR, STACK_MARKER_VAR, BENCH_MARKER_VAR)


class StartupError(RuntimeError):
    """A process did not come up; the message says why and shows the end of its log."""


class PortTaken(StartupError):
    """A process could not have its port: another process took it between `free_port` and the bind."""


# Ports handed out come from below Linux's ephemeral range (32768-60999 by default), which bind(0) and every
# outgoing connection draw from, so that nothing else on the machine takes them by chance meanwhile.
_PORT_RANGE = (20000, 32000)
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, never the same one twice in this process. Another process
    may still take it before the caller binds it: `require_ready(..., port=)` notices, `on_free_port` retries."""
    while True:
        port = random.randint(*_PORT_RANGE)
        with _handed_out_lock:
            if port in _handed_out:
                continue
            _handed_out.add(port)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the TCP sockets listening on `port`, on any address (IPv4 or IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # fields: sl, local address:port (hex), remote address:port, state (0A = LISTEN), ..., inode (10th)
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def group_listens_on(pgid: int, port: int) -> bool:
    """True when a process of group `pgid` holds the socket listening on `port` (not merely someone)."""
    sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    for pid in group_members(pgid) if sockets else ():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(FileNotFoundError, OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                        return True
    return False


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `check` until it returns True or `timeout` seconds pass; True when it succeeded."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if check():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def process_alive(pid: int) -> bool:
    """True while `pid` runs. A zombie (exited, not yet reaped) counts as gone: this machine's init
    does not always reap orphans promptly."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def process_start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat field 22); None when it is gone. With the
    pid it names one process for good: a pid reused later has a later start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Fields after the parenthesised command name start at field 3 (state); start time is field 22.
    return int(stat.rsplit(")", 1)[1].split()[19])


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # fields: state, ppid, pgrp, session, ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(pgid: int, grace: float, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the whole group, wait up to `grace` seconds for it to empty, then SIGKILL what is left."""
    stop_groups([(pgid, leader)], grace)


def stop_groups(groups: Sequence[tuple[int, subprocess.Popen | None]], grace: float) -> None:
    """`stop_group` for several groups at once, sharing one grace period. A leader we started
    (the Popen, when given) is reaped on the way so it does not linger as a zombie."""

    def emptied() -> bool:
        for _, leader in groups:
            if leader is not None:
                leader.poll()
        return not any(group_members(pgid) for pgid, _ in groups)

    for pgid, _ in groups:
        signal_group(pgid, signal.SIGTERM)
    if not wait_until(emptied, grace):
        for pgid, _ in groups:
            signal_group(pgid, signal.SIGKILL)
        wait_until(emptied, 5.0)


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str


def leftover_processes(marker: str, var: str = SESSION_MARKER_VAR, exclude: Sequence[int] = ()) -> list[Leftover]:
    """Live processes whose environment has `var=marker`, except `exclude` and this process's ancestors."""
    needle = f"{var}={marker}".encode()
    skip = set(exclude) | _ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in environ.split(b"\0") and process_alive(int(entry.name)):
            found.append(Leftover(int(entry.name), command))
    return found


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ValueError):
            break
    return pids


@dataclass
class ManagedProcess:
    """One started process and its group. `stop()` ends exactly that group and nothing else."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self, grace: float = 5.0) -> None:
        stop_all([self], grace)

    def kill(self) -> None:
        """SIGKILL the leader only, as a crash would; the rest of its group is left as it is."""
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()


def stop_all(processes: Iterable[ManagedProcess], grace: float = 5.0) -> None:
    """Stop every one of `processes` at once, sharing one grace period: one after another, each would spend
    its own (a functions-framework server takes about 0.3 s to stop). Each process is the leader of its own
    group (start_new_session), so its pid is the group id."""
    running = [process for process in processes if not process._stopped]
    for process in running:
        process._stopped = True
    stop_groups([(process.pid, process.popen) for process in running], grace)


def start_process(
    name: str,
    command: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdout_pipe: bool = False,
) -> ManagedProcess:
    """Start `command` in a new session with its output appended to `log_path` (stdout to a pipe when
    `stdout_pipe`, for programs that announce their address there)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout_pipe else log,
            stderr=log,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    return ManagedProcess(name, popen, log_path)


def require_ready(
    process: ManagedProcess, ready: Callable[[], bool], timeout: float, what: str, port: int | None = None
) -> None:
    """Wait for `ready()` (and, with `port`, for the process's own group to listen there: whoever else might
    answer on a port we did not bind ourselves does not count); on timeout or early exit, stop the process
    and raise StartupError, or PortTaken when someone else holds the port."""

    def up() -> bool:
        return (port is None or group_listens_on(process.pid, port)) and ready()

    came_up = wait_until(lambda: up() or not process.running(), timeout, interval=0.1)
    if came_up and process.running():
        return
    reason = f"exited with status {process.popen.returncode}" if not process.running() else f"not ready in {timeout}s"
    tail = process.log_tail()
    taken = port is not None and bool(_listening_inodes(port)) and not group_listens_on(process.pid, port)
    process.stop(grace=1.0)
    error = PortTaken if taken or "in use" in tail.lower() else StartupError
    raise error(f"{what} {reason}. Last lines of {process.log_path}:\n{tail}")


Started = TypeVar("Started")


def on_free_port(start: Callable[[int], Started], port: int | None = None, attempts: int = 3) -> Started:
    """`start(port)`, or `start` on a free port, trying another one when some other process took it first."""
    if port:
        return start(port)
    for _ in range(attempts - 1):
        with contextlib.suppress(PortTaken):
            return start(free_port())
    return start(free_port())
