"""The state file of a running local stack: where every piece listens, the names it created and the settings
the functions got. `trainctl local up` writes it once everything is ready and removes it when it stops; the
other commands read it to reach the stack (`trainctl local env` prints it as `export …` lines), and
`stop_recorded_stack` stops the stack it records. Light to import: `trainctl` reads it on every command.

It lives in the stack's folder, `local_dir()`: `$TRAINCTL_LOCAL_DIR` when set (tests give each stack a folder of
its own), else `$TRAINCTL_HOME/local`, else `.trainctl/local/` of the source checkout trainctl runs from, else (an
installed trainctl, whose code sits in site-packages) the user's state folder, `$XDG_STATE_HOME/trainctl/local` or
`~/.local/state/trainctl/local`.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from local.processes import (
    STACK_MARKER_VAR,
    leftover_processes,
    process_alive,
    process_start_time,
    stop_group,
    wait_until,
)

LOCAL_DIR_VAR = "TRAINCTL_LOCAL_DIR"
HOME_VAR = "TRAINCTL_HOME"
# Every process of a stack carries STACK_MARKER_VAR with the stack's id, so `local down` finds all of them —
# job nodes included — even when the process that started them has died.
REPO_ROOT = Path(__file__).resolve().parents[1]


def trainctl_home(code_root: Path = REPO_ROOT) -> Path:
    """Where trainctl keeps what it makes on this machine (the local stack, the demo's pictures): `$TRAINCTL_HOME`;
    else the `.trainctl/` of the source checkout its code runs from (its pyproject.toml beside the packages); else —
    installed by `uv tool install` or `pipx`, its code in a site-packages no one should write to — the user's state
    folder (XDG Base Directory: `$XDG_STATE_HOME`, by default `~/.local/state`)."""
    if home := os.environ.get(HOME_VAR):
        return Path(home).expanduser().resolve()
    if (code_root / "pyproject.toml").is_file():
        return code_root / ".trainctl"
    state = os.environ.get("XDG_STATE_HOME") or ""
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"  # the spec ignores a relative one
    return (base / "trainctl").resolve()


def local_dir() -> Path:
    return Path(os.environ.get(LOCAL_DIR_VAR) or trainctl_home() / "local").resolve()


def state_path(directory: Path | None = None) -> Path:
    return (directory or local_dir()) / "state.json"


@dataclass(frozen=True)
class StackState:
    stack_id: str
    pid: int  # the process that runs the stack: `trainctl local up`
    pid_start: int  # its start time, so a reused pid is not mistaken for it
    project: str
    region: str
    pubsub_host: str
    storage_url: str
    jobservice_address: str
    bridge_url: str
    function_urls: dict[str, str]  # entry point → URL
    reconcile_every: float
    names: dict[str, str]  # local.names.Names fields → name (buckets, topics, subscriptions)
    subscriptions: dict[str, str]  # subscription → what it delivers to
    settings_env: dict[str, str]  # the TRAINCTL_* settings every function got
    run_dir: str  # everything the stack writes: logs, the JobService's jobs
    logs: dict[str, str]  # piece → its log file
    # Vertex's REST mapping and Cloud Logging's entries:list (gcloud's endpoint form, http://HOST:PORT/).
    jobservice_rest_url: str = ""
    # What lasts across restarts (local/saved_state.py): buckets, the JobService's state; "" with --ephemeral.
    saved_dir: str = ""

    def running(self) -> bool:
        return process_alive(self.pid) and process_start_time(self.pid) == self.pid_start

    def emulator_env(self) -> dict[str, str]:
        """What the Google client libraries need to reach the stack instead of Google."""
        return {
            "PUBSUB_EMULATOR_HOST": self.pubsub_host,
            "PUBSUB_PROJECT_ID": self.project,
            "STORAGE_EMULATOR_HOST": self.storage_url,
        }

    def shell_env(self) -> dict[str, str]:
        """Everything another shell needs: the emulators for client libraries and for gcloud, the settings
        (so `trainctl` there talks to this stack), and every name and URL."""
        names = self.names
        return {
            **self.emulator_env(),
            # gcloud reaches the emulators through endpoint overrides; any token will do.
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": self.storage_url.rstrip("/") + "/",
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": f"http://{self.pubsub_host}/",
            # `gcloud ai custom-jobs` and its stream-logs; gcloud wants http(s)://host:port/ with the slash.
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM": self.jobservice_rest_url,
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_LOGGING": self.jobservice_rest_url,
            "CLOUDSDK_AUTH_ACCESS_TOKEN": "dummy",
            "CLOUDSDK_CORE_PROJECT": self.project,
            "GOOGLE_CLOUD_PROJECT": self.project,
            **self.settings_env,
            "TRAINCTL_DATA_BUCKET": names["data_bucket"],
            "TRAINCTL_REQUESTS_TOPIC": names["requests_topic"],
            "TRAINCTL_JOB_STATE_TOPIC": names["job_state_topic"],
            # Schedule ticks and alerts (issue 42): publish a Monitoring incident here to start a model's rule.
            "TRAINCTL_RETRAIN_TOPIC": names.get("retrain_topic", ""),
            "TRAINCTL_DEAD_LETTER_TOPIC": names["dead_letter_topic"],
            "TRAINCTL_DEAD_LETTER_SUBSCRIPTION": names["dead_letter_subscription"],
            **{f"TRAINCTL_LOCAL_{target.upper()}_URL": url for target, url in self.function_urls.items()},
            "TRAINCTL_LOCAL_BRIDGE_URL": self.bridge_url,
            # The `api_endpoint` the Vertex SDK takes (`aiplatform.init(api_transport="rest", …)`).
            "TRAINCTL_LOCAL_VERTEX_REST_URL": self.jobservice_rest_url.rstrip("/"),
            LOCAL_DIR_VAR: str(local_dir()),
        }


def take_stack_lock() -> object | None:
    """Hold the lock of `local_dir()` for as long as this process lives (the kernel drops it when the process
    ends, however it ends); None when another stack holds it — running, or still starting."""
    path = local_dir() / "stack.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - kept open on purpose: the open file is the lock
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def export_lines(env: dict[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


def write_state(state: StackState) -> Path:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole and renamed, so a reader never sees half a file.
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(asdict(state), indent=2) + "\n")
    os.replace(partial, path)
    return path


def read_state(directory: Path | None = None) -> StackState | None:
    """The stack recorded in `directory` (default: `local_dir()`), running or not (a stack that crashed leaves
    its file behind); None without one."""
    try:
        return StackState(**json.loads(state_path(directory).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):  # half a file from a crash, or one from another version: no usable stack
        return None


def running_stack() -> StackState | None:
    state = read_state()
    return state if state is not None and state.running() else None


def remove_state() -> None:
    state_path().unlink(missing_ok=True)


def stop_recorded_stack(state: StackState, grace: float = 60.0) -> None:
    """Ask the stack's own process to stop everything (SIGTERM, as Ctrl-C would), then stop whatever still
    carries the stack's marker: after a crash of that process, that is every piece and job node."""
    if state.running():
        os.kill(state.pid, signal.SIGTERM)  # the process alone: its pieces run in sessions of their own
        if not wait_until(lambda: not state.running(), grace, interval=0.2):
            os.kill(state.pid, signal.SIGKILL)
    for leftover in leftover_processes(state.stack_id, var=STACK_MARKER_VAR):
        try:
            group = os.getpgid(leftover.pid)
        except ProcessLookupError:
            continue
        stop_group(group, grace=5.0)
    remove_state()
