"""One BatchPredictionJob's run on this machine: its input URIs resolved (Cloud Storage wildcards listed on the
storage emulator), then `python -m trainer.predict` once per input file, each writing the next
`predictions_NNNN.csv` of the job's output folder, as a process group of its own started from a container's
environment (replicas.py's rules: the image's PATH and PYTHONPATH, an empty HOME, STORAGE_EMULATOR_HOST).

The rows each process wrote come from its own log line (trainer/logs.py: `predictions written`, `rows`); a process
that fails ends the job FAILED with its last line of output, which names the problem (a CSV that does not parse, a
missing column).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from google.rpc import code_pb2

from local.jobservice.batch_rules import has_wildcard, predictions_file, wildcard_matcher, wildcard_prefix
from local.jobservice.replicas import ExecutionSettings, image_env
from local.processes import PROCESS_MARKER_VARS, stop_group

LOG_TAIL_BYTES = 4000


class BatchRunError(Exception):
    """The job fails with this google.rpc code and message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class BatchRun:
    command: list[str]  # `python -m trainer.predict`, the interpreter spelled out (batch_rules.batch_command)
    model_dir: str  # the version's artifact_uri
    inputs: list[str]  # InputConfig.gcs_source.uris, wildcards and all
    output_dir: str  # OutputInfo.gcs_output_directory
    settings: ExecutionSettings
    folder: Path  # the run's own: its HOME and its logs
    rows: int = 0  # rows predicted so far: CompletionStats.successful_count
    files: int = 0

    def __post_init__(self) -> None:
        self._cancelled = threading.Event()
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop the run: the running process group is stopped, and no other starts."""
        self._cancelled.set()
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            stop_group(process.pid, self.settings.cancel_grace, process)

    def run(self) -> None:
        """Predict every input file; BatchRunError when the job fails. Returns early when cancelled."""
        for uri in resolve_inputs(self.inputs, self.settings.storage_emulator_host):
            if self.cancelled:
                return
            self.files += 1
            self.rows += self._predict(uri, predictions_file(self.output_dir, self.files, "csv"))

    def _predict(self, uri: str, out: str) -> int:
        log = self.folder / f"predictions_{self.files:04d}.log"
        home = self.folder / "home"
        home.mkdir(parents=True, exist_ok=True)
        command = [*self.command, "--model-dir", self.model_dir, "--data", uri, "--format", "csv", "--out", out]
        with open(log, "wb") as output, self._lock:
            if self.cancelled:
                return 0
            self._process = subprocess.Popen(
                command,
                cwd=self.settings.workdir,
                env=self._env(home),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group, stopped whole on cancel
            )
        code = self._process.wait()
        text = log.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace")
        if self.cancelled:
            return 0
        if code != 0:
            last = [line for line in text.splitlines() if line.strip()][-1:] or [f"exit status {code}"]
            raise BatchRunError(code_pb2.INVALID_ARGUMENT, f"Prediction failed on {uri}: {last[0].strip()}")
        return rows_written(text)

    def _env(self, home: Path) -> dict[str, str]:
        host = os.environ if self.settings.host_env is None else self.settings.host_env
        env = image_env(host, self.settings.workdir, home)
        if self.settings.storage_emulator_host:
            env["STORAGE_EMULATOR_HOST"] = self.settings.storage_emulator_host
        env.update({name: host[name] for name in PROCESS_MARKER_VARS if name in host})
        return env


def rows_written(log_text: str) -> int:
    """The `rows` of trainer.predict's `predictions written` line (trainer/logs.py: one JSON object a line)."""
    for line in reversed(log_text.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("message") == "predictions written":
            return int(record.get("rows", 0))
    return 0


def resolve_inputs(uris: list[str], storage_host: str | None) -> list[str]:
    """Each URI as it is, or the objects its wildcards match, in name order (GcsSource.uris "may contain
    wildcards"). A pattern that matches nothing fails the job."""
    resolved: list[str] = []
    for uri in uris:
        if not has_wildcard(uri):
            resolved.append(uri)
            continue
        if not storage_host:
            raise BatchRunError(
                code_pb2.FAILED_PRECONDITION, f"Cannot list {uri}: the local JobService has no storage emulator"
            )
        bucket = uri.removeprefix("gs://").split("/", 1)[0]
        matcher = wildcard_matcher(uri)
        names = [name for name in _object_names(storage_host, bucket, wildcard_prefix(uri)) if matcher.fullmatch(name)]
        if not names:
            raise BatchRunError(code_pb2.INVALID_ARGUMENT, f"No files match {uri}.")
        resolved += [f"gs://{bucket}/{name}" for name in sorted(names)]
    return resolved


def _object_names(host: str, bucket: str, prefix: str) -> list[str]:
    """Every object name under `prefix` (the JSON API's objects.list, page after page)."""
    names: list[str] = []
    token = ""
    while True:
        query = {"prefix": prefix, "fields": "items(name),nextPageToken"} | ({"pageToken": token} if token else {})
        url = f"{host.rstrip('/')}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                page = json.load(response)
        except OSError as error:
            raise BatchRunError(code_pb2.INVALID_ARGUMENT, f"Cannot list gs://{bucket}/{prefix}*: {error}") from None
        names += [item["name"] for item in page.get("items") or []]
        token = page.get("nextPageToken") or ""
        if not token:
            return names
