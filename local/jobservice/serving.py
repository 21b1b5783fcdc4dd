"""The servers of deployed models: one local process per DeployedModel, started from its model version's
containerSpec as a job's node is (replicas.container_command and container_env: the image map, `python` as this
interpreter, the storage emulator), with the variables Vertex sets for a custom container
(https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements, "Environment variables"):

    AIP_HTTP_PORT        a free port of this machine (Vertex: the containerSpec's port, 8080 by default)
    AIP_HEALTH_ROUTE     /v1/endpoints/ENDPOINT/deployedModels/DEPLOYED_MODEL (or containerSpec.healthRoute)
    AIP_PREDICT_ROUTE    /v1/endpoints/ENDPOINT/deployedModels/DEPLOYED_MODEL:predict (or containerSpec.predictRoute)
    AIP_STORAGE_URI      the version's artifactUri (Vertex copies the artifacts to a bucket of its own first)
    AIP_DEPLOYED_MODEL_ID, AIP_ENDPOINT_ID, AIP_MODEL_NAME, AIP_VERSION_NAME, AIP_PROJECT_NUMBER, AIP_MACHINE_TYPE,
    AIP_FRAMEWORK=CUSTOM_CONTAINER, AIP_MODE=PREDICTION, AIP_MODE_VERSION=1.0.0

One replica per deployed model. A server that exits while deployed is started again (Vertex replaces a failed
replica), its log line saying so; its predictions answer 503 meanwhile.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud.aiplatform_v1.types import Model

from local.jobservice.replicas import ExecutionSettings, container_command, container_env, request_env
from local.processes import ManagedProcess, free_port, start_process

log = logging.getLogger("local.jobservice")
RESTART_PAUSE = 1.0


@dataclass
class ServedModel:
    deployed_model_id: str
    port: int
    health_route: str
    predict_route: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: ManagedProcess | None = None
    stopping: bool = False
    restarts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def healthy(self) -> bool:
        try:
            status, _ = self.request("GET", self.health_route, None, timeout=2)
        except OSError:
            return False
        return status == 200

    def request(self, method: str, path: str, body: bytes | None, timeout: float = 60) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


class ServingProcesses:
    """The deployed models' servers, by deployed model id; their logs and homes under `folder`."""

    def __init__(self, settings: ExecutionSettings, folder: Path):
        self._settings, self._folder = settings, folder
        self._served: dict[str, ServedModel] = {}
        self._lock = threading.Lock()

    def start(self, endpoint: str, deployed_model_id: str, model: Model, machine_type: str) -> ServedModel:
        """Start the server of `model` (a version, as GetModel answers it) for the deployed model. Raises
        replicas.NodePlanError when its image has no local entry point."""
        project, endpoint_id = endpoint.split("/")[1], endpoint.rsplit("/", 1)[1]
        route = f"/v1/endpoints/{endpoint_id}/deployedModels/{deployed_model_id}"
        spec = model.container_spec
        port = free_port()
        platform = {
            "AIP_HTTP_PORT": str(port),
            "AIP_HEALTH_ROUTE": spec.health_route or route,
            "AIP_PREDICT_ROUTE": spec.predict_route or f"{route}:predict",
            "AIP_STORAGE_URI": model.artifact_uri,
            "AIP_DEPLOYED_MODEL_ID": deployed_model_id,
            "AIP_ENDPOINT_ID": endpoint_id,
            "AIP_MODEL_NAME": model.name,
            "AIP_VERSION_NAME": model.version_id,
            "AIP_PROJECT_NUMBER": project,
            "AIP_MACHINE_TYPE": machine_type,
            "AIP_FRAMEWORK": "CUSTOM_CONTAINER",
            "AIP_MODE": "PREDICTION",
            "AIP_MODE_VERSION": "1.0.0",
        }
        declared = request_env(spec.env, platform)
        command = container_command(spec, self._settings.image_map, {**declared, **platform})
        folder = self._folder / endpoint_id / deployed_model_id
        env = container_env(self._settings, declared, platform, folder / "home")
        (folder / "home").mkdir(parents=True, exist_ok=True)
        served = ServedModel(
            deployed_model_id,
            port,
            platform["AIP_HEALTH_ROUTE"],
            platform["AIP_PREDICT_ROUTE"],
            command,
            env,
            folder / "server.log",
        )
        with self._lock:
            self._served[deployed_model_id] = served
        self._launch(served)
        return served

    def get(self, deployed_model_id: str) -> ServedModel | None:
        with self._lock:
            return self._served.get(deployed_model_id)

    def wait_healthy(self, served: ServedModel, timeout: float) -> str | None:
        """None once the health route answers 200; else why not (the server exited, or never answered)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = served.process
            if served.stopping:
                return "the deployment was stopped"
            if process is not None and not process.running() and served.restarts == 0:
                return f"the model server exited with status {process.popen.returncode}: {process.log_tail(10)}"
            if served.healthy():
                return None
            time.sleep(0.2)
        return f"the model server did not answer its health route {served.health_route} in {timeout:.0f} s"

    def stop(self, deployed_model_id: str, grace: float = 5.0) -> None:
        with self._lock:
            served = self._served.pop(deployed_model_id, None)
        if served is None:
            return
        with served.lock:
            served.stopping = True
            process = served.process
        if process is not None:
            process.stop(grace)

    def stop_all(self) -> None:
        with self._lock:
            ids = list(self._served)
        for deployed_model_id in ids:
            self.stop(deployed_model_id, grace=2.0)

    def _launch(self, served: ServedModel) -> None:
        with served.lock:
            if served.stopping:
                return
            served.process = start_process(
                f"serve-{served.deployed_model_id}", served.command, served.log_path, served.env, self._settings.workdir
            )
            process = served.process
        threading.Thread(target=self._watch, args=(served, process), daemon=True).start()

    def _watch(self, served: ServedModel, process: ManagedProcess) -> None:
        """Start the server again when it exits while still deployed (after it was once healthy)."""
        process.popen.wait()
        time.sleep(RESTART_PAUSE)
        with served.lock:
            if served.stopping:
                return
            served.restarts += 1
        log.warning(
            "the server of deployed model %s exited with status %s; starting it again (restart %d)",
            served.deployed_model_id,
            process.popen.returncode,
            served.restarts,
        )
        self._launch(served)
