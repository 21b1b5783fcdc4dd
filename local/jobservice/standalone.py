"""Run the local JobService as its own process (`python -m local.jobservice`) and manage it: read the
address it prints, stop it cleanly, kill it as a crash would, restart it on the same port and state
folder. The pytest fixtures and `trainctl local up` use this.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import select
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

from local.jobservice.client import JobServiceControl, job_service_client
from local.processes import ManagedProcess, StartupError, process_alive, start_process, stop_group

_LISTENING = re.compile(r"listening on ([^\s,]+), REST on (\S+)")


@dataclass
class JobServiceProcess:
    address: str
    rest_url: str  # http://HOST:PORT/: Vertex's REST mapping (jobs, models) and Cloud Logging's entries:list
    state_dir: Path
    process: ManagedProcess
    _launch: dict = field(repr=False)
    _control: JobServiceControl | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def rest_port(self) -> int:
        return int(self.rest_url.rstrip("/").rsplit(":", 1)[1])

    @property
    def control(self) -> JobServiceControl:
        if self._control is None:
            self._control = JobServiceControl(self.address)
        return self._control

    def client(self) -> JobServiceClient:
        return job_service_client(self.address)

    def running(self) -> bool:
        return self.process.running()

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM: the server stops its jobs' nodes and exits. Whatever node survives is then killed
        from the run records, so nothing is left behind even when the server was hung."""
        self.process.stop(grace)
        kill_recorded_nodes(self.state_dir)

    def kill(self) -> None:
        """SIGKILL the server alone, as a crash would; its jobs' nodes keep running."""
        self.process.kill()

    def restart(self, timeout: float = 30.0) -> None:
        """Start a new server on the same port and state folder (after `kill` or `stop`)."""
        if self.running():
            self.stop()
        launch = {**self._launch, "port": self.port, "rest_port": self.rest_port}
        fresh = start_jobservice_process(**launch, timeout=timeout)
        self.process, self.address, self.rest_url = fresh.process, fresh.address, fresh.rest_url
        if self._control is not None:
            self._control.close()
            self._control = None


def start_jobservice_process(
    work_dir: Path,
    state_dir: Path | None = None,
    port: int = 0,
    rest_port: int = 0,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = 30.0,
) -> JobServiceProcess:
    """Start `python -m local.jobservice` and wait for the address it prints; its stderr and stdout
    go to `work_dir/jobservice.log`."""
    state_dir = state_dir or work_dir / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "local.jobservice", "--port", str(port), "--rest-port", str(rest_port)]
    command += ["--state-dir", str(state_dir)]
    command += list(extra_args)
    log_path = work_dir / "jobservice.log"
    process = start_process("jobservice", command, log_path, env=env, stdout_pipe=True)
    address, rest_url = _read_addresses(process, timeout)
    # Keep draining stdout into the log so the server never blocks on a full pipe.
    threading.Thread(target=_copy_to_log, args=(process, log_path), daemon=True).start()
    launch = {"work_dir": work_dir, "state_dir": state_dir, "env": env, "extra_args": tuple(extra_args)}
    return JobServiceProcess(address, rest_url, state_dir, process, launch)


def _read_addresses(process: ManagedProcess, timeout: float) -> tuple[str, str]:
    """(gRPC address, REST URL) from the line the server prints once it listens."""
    deadline = time.monotonic() + timeout
    stdout = process.popen.stdout
    assert stdout is not None  # started with stdout=PIPE
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.1)
        if ready:
            line = stdout.readline().decode(errors="replace")
            match = _LISTENING.search(line)
            if match:
                return match.group(1), match.group(2)
            if not line:  # end of output: the server exited
                break
    process.stop(grace=1.0)
    raise StartupError(f"the local JobService did not start. Last lines of {process.log_path}:\n{process.log_tail()}")


def _copy_to_log(process: ManagedProcess, log_path: Path) -> None:
    stdout = process.popen.stdout
    assert isinstance(stdout, io.BufferedReader)  # started with stdout=PIPE, in bytes
    with open(log_path, "ab") as log, contextlib.suppress(ValueError, OSError):
        while chunk := stdout.read1(65536):
            log.write(chunk)
            log.flush()


def kill_recorded_nodes(state_dir: Path) -> None:
    """SIGKILL the process group of every node recorded in the run records, when it still runs the
    node agent (a pid may have been reused by something else since)."""
    for run_file in state_dir.glob("jobs/*/run.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            for replica in json.loads(run_file.read_text()).get("replicas", []):
                pid = replica["pid"]
                if process_alive(pid) and "node_agent.py" in Path(f"/proc/{pid}/cmdline").read_text():
                    stop_group(pid, grace=0.0)
