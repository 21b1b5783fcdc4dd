"""The local EndpointService's bookkeeping without processes (a stand-in for serving.py): a deployed model is
listed only once its server is healthy, its deployment fails and leaves nothing when the server never is, and a
restarted service starts the servers of the models its state folder holds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from google.cloud.aiplatform_v1.types import DeployModelRequest, Endpoint, UploadModelRequest

from local.jobservice.endpoint_service import EndpointService
from local.jobservice.endpoint_store import EndpointStore
from local.jobservice.model_registry import ModelRegistry
from local.jobservice.model_rules import project_numbers
from local.jobservice.model_store import ModelStore

PARENT = "projects/p/locations/us-central1"
NUMBERS = project_numbers({"p": "123"})


class Serving:
    """serving.ServingProcesses' surface: `healthy` decides what wait_healthy answers (after `ready` is set)."""

    def __init__(self, problem: str | None = None) -> None:
        self.ready, self.problem = threading.Event(), problem
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, endpoint: str, deployed_model_id: str, model: Any, machine_type: str) -> str:
        self.started.append(deployed_model_id)
        return deployed_model_id

    def wait_healthy(self, served: str, timeout: float) -> str | None:
        self.ready.wait(10)
        return self.problem

    def stop(self, deployed_model_id: str, grace: float = 5.0) -> None:
        self.stopped.append(deployed_model_id)

    def stop_all(self) -> None:
        pass

    def get(self, deployed_model_id: str) -> None:
        return None


def service(state: Path | None, serving: Serving) -> tuple[EndpointService, ModelRegistry]:
    registry = ModelRegistry(ModelStore(state), upload_seconds=0, numbers=NUMBERS)
    store = EndpointStore(state)
    return EndpointService(registry, serving, store, NUMBERS), registry  # type: ignore[arg-type]


def deploy(endpoints: EndpointService, registry: ModelRegistry) -> tuple[str, str]:
    container = {"image_uri": "localhost/trainctl/trainer:latest", "command": ["python", "-m", "trainer.serve"]}
    registry.upload(
        UploadModelRequest(parent=PARENT, model_id="churn", model={"display_name": "c", "container_spec": container})
    )
    created = endpoints.create(PARENT, Endpoint(display_name="e"), "")
    name = Endpoint.pb(Endpoint()).FromString(created.response.value).name
    operation = endpoints.deploy(DeployModelRequest(endpoint=name, deployed_model={"model": f"{PARENT}/models/churn"}))
    return name, operation.name


def wait_done(endpoints: EndpointService, operation: str) -> Any:
    deadline = time.monotonic() + 10
    while not (answer := endpoints.get_operation(operation)).done:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return answer


def test_a_deployed_model_is_listed_only_once_its_server_is_healthy():
    serving = Serving()
    endpoints, registry = service(None, serving)
    name, operation = deploy(endpoints, registry)
    assert not endpoints.get_operation(operation).done and not endpoints.get(name).deployed_models
    serving.ready.set()
    assert not wait_done(endpoints, operation).HasField("error")
    endpoint = endpoints.get(name)
    assert [m.id for m in endpoint.deployed_models] == serving.started
    assert (endpoint.deployed_models[0].model, endpoint.deployed_models[0].model_version_id) == (
        "projects/123/locations/us-central1/models/churn",
        "1",
    )
    assert dict(endpoint.traffic_split) == {serving.started[0]: 100}


def test_a_server_that_never_becomes_healthy_fails_the_deployment_and_is_stopped():
    serving = Serving(problem="the model server exited with status 1")
    serving.ready.set()
    endpoints, registry = service(None, serving)
    name, operation = deploy(endpoints, registry)
    answer = wait_done(endpoints, operation)
    assert answer.error.code == 9 and "exited with status 1" in answer.error.message  # FAILED_PRECONDITION
    assert serving.stopped == serving.started and not endpoints.get(name).deployed_models


def test_a_restarted_service_serves_the_deployed_models_its_state_folder_holds(tmp_path: Path):
    serving = Serving()
    serving.ready.set()
    endpoints, registry = service(tmp_path, serving)
    name, operation = deploy(endpoints, registry)
    wait_done(endpoints, operation)
    again = Serving()
    restarted, _ = service(tmp_path, again)
    restarted.serve_deployed()
    assert again.started == serving.started
    assert [m.id for m in restarted.get(name).deployed_models] == serving.started
