"""What the controller's core needs of Cloud Storage, Pub/Sub, Vertex (jobs, batch predictions, the Model Registry and
endpoints), Cloud Monitoring and Cloud Quotas: the adapters' shapes as Protocols, so that each adapter
(functions/cloud/gcs.py, publisher.py, vertex.py, batch_predictions.py, registry.py, endpoints.py, monitoring.py,
quotas.py) and trainctl replay's in-memory stand-ins are checked against the same interface by the type checker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol

from functions.cloud.batch_snapshot import BatchPrediction
from functions.cloud.endpoint_types import EndpointState, Operation
from functions.cloud.gcs import ListedObject, ObjectDigest
from functions.cloud.job_snapshot import JobSnapshot
from functions.cloud.pool_state import PoolState
from functions.cloud.registry_types import ModelVersion, Upload
from functions.cloud.reservations import ReservationState
from schemas.events import JobEvent, ServingFigures


class Storage(Protocol):
    def read(
        self, bucket: str, name: str, generation: int | None = None, max_bytes: int | None = None
    ) -> tuple[bytes, int] | None:
        """(content, generation) or None; with `max_bytes`, gcs.TooLarge for a larger object (never read whole)."""
        ...

    def digest(self, bucket: str, name: str, max_bytes: int) -> ObjectDigest | None:
        """The sha256 of the object's bytes (streamed, never held whole), its generation and stated hashes; None when
        it does not exist; gcs.TooLarge past `max_bytes`."""
        ...

    def read_range(self, bucket: str, name: str, start: int, length: int) -> bytes | None:
        """At most `length` bytes of the object from `start`, or None when it does not exist (never read whole)."""
        ...

    def write(
        self,
        bucket: str,
        name: str,
        data: bytes | str,
        if_generation_match: int,
        custom_metadata: dict[str, str] | None = None,
    ) -> int: ...

    def copy(self, bucket: str, name: str, to_bucket: str, to_name: str) -> int | None:
        """Server-side copy; the new generation, None when the source does not exist."""
        ...

    def delete(self, bucket: str, name: str) -> None: ...

    def set_metadata(self, bucket: str, name: str, custom_metadata: dict[str, str]) -> bool: ...

    def names(self, bucket: str, prefix: str) -> list[str]: ...

    def objects_under(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]: ...

    def listing(self, bucket: str, prefix: str) -> Iterator[ListedObject]:
        """Each object under `prefix` with its generation, CRC32C and update time, in name order."""
        ...

    def any_under(self, bucket: str, prefix: str) -> bool: ...

    def metadata_under(
        self, bucket: str, prefix: str, start_offset: str = ""
    ) -> Iterator[tuple[str, dict[str, str]]]: ...


class Events(Protocol):
    source: str

    def publish(self, event: JobEvent) -> str: ...


class Jobs(Protocol):
    @property
    def parent(self) -> str: ...

    def find_or_create(
        self, custom_job: dict[str, Any], region: str | None = None, legacy: bool = True
    ) -> tuple[JobSnapshot, bool]: ...

    def active_jobs(
        self, region: str, deployment: str, since: datetime | None = None, before: datetime | None = None
    ) -> dict[str, JobSnapshot]:
        """The deployment's jobs that wait or run in `region`, created in [since, before) when given, by name
        (ListCustomJobs, page after page)."""
        ...

    def get(self, name: str) -> JobSnapshot | None: ...

    def cancel(self, name: str) -> None: ...


class Quotas(Protocol):
    def limit(self, metric: str, region: str) -> int | None:
        """The project's limit on a Vertex quota metric in a region; None when it cannot be known."""
        ...


class Reservations(Protocol):
    """Compute Engine reservations (functions/cloud/reservations.py)."""

    def get(self, name: str) -> ReservationState:
        """The reservation projects/P/zones/Z/reservations/N; ReservationUnreadable when it never can be read."""
        ...


class PersistentResources(Protocol):
    """Vertex AI's PersistentResourceService: the warm pools (functions/cloud/persistent_resources.py)."""

    def resource_name(self, resource_id: str) -> str: ...

    def get(self, resource_id: str) -> PoolState | None: ...

    def create(self, resource_id: str, body: dict[str, Any]) -> bool: ...

    def delete(self, resource_id: str) -> bool: ...


class Registry(Protocol):
    """Vertex AI's Model Registry (functions/cloud/registry.py)."""

    @property
    def parent(self) -> str: ...

    def model_name(self, model_id: str) -> str: ...

    def get(self, name: str) -> ModelVersion | None:
        """The version a name gives (models/M, models/M@VERSION, models/M@ALIAS); None when there is none."""
        ...

    def find_version(self, model_id: str, label: str, value: str) -> ModelVersion | None: ...

    def upload(self, body: dict[str, Any]) -> Upload: ...

    def operation(self, name: str) -> Upload | None: ...

    def merge_aliases(self, version_name: str, aliases: list[str]) -> ModelVersion: ...

    def evaluations(self, version_name: str) -> list[dict[str, Any]]: ...

    def import_evaluation(self, version_name: str, evaluation: dict[str, Any]) -> dict[str, Any]: ...


class Endpoints(Protocol):
    """Vertex AI's EndpointService and online prediction (functions/cloud/endpoints.py)."""

    @property
    def parent(self) -> str: ...

    def endpoint_name(self, endpoint_id: str) -> str: ...

    def get(self, name: str) -> EndpointState | None: ...

    def create(self, endpoint_id: str, display_name: str, labels: dict[str, str]) -> Operation | None: ...

    def deploy(self, name: str, deployed_model: dict[str, Any], traffic_split: dict[str, int]) -> Operation | None: ...

    def undeploy(self, name: str, deployed_model_id: str, traffic_split: dict[str, int]) -> Operation | None: ...

    def set_traffic(self, name: str, traffic_split: dict[str, int]) -> EndpointState: ...

    def operation(self, name: str) -> Operation | None: ...


class Metrics(Protocol):
    """A deployed model's answers from Cloud Monitoring (functions/cloud/monitoring.py)."""

    def figures(self, endpoint_id: str, deployed_model_id: str, since: datetime, until: datetime) -> ServingFigures: ...


class BatchPredictions(Protocol):
    """Vertex AI's BatchPredictionJobs (functions/cloud/batch_predictions.py)."""

    @property
    def parent(self) -> str: ...

    def find(self, label: str, value: str) -> BatchPrediction | None:
        """The job labelled `label=value`; None when there is none."""
        ...

    def find_or_create(self, job: dict[str, Any], label: str) -> tuple[BatchPrediction, bool]:
        """(the job, adopted): the one labelled with `job`'s `label` value, else a new one from `job` (REST form)."""
        ...

    def get(self, name: str) -> BatchPrediction | None: ...

    def cancel(self, name: str) -> None: ...
