"""The local Vertex AI JobService: one gRPC server with the JobService API and the control API, a job
store in a state folder, and the executor that runs jobs as local processes.

In-process use (tests of the pieces, other tools):

    service = LocalJobService(state_dir, ExecutionSettings(...))
    address = service.start()            # "127.0.0.1:PORT"; port 0 picks a free one
    service.rest_url                     # "http://127.0.0.1:PORT2/": Vertex's REST mapping (JobService and
                                         # ModelService), Logging's entries:list and the Cloud Quotas stand-in
    service.add_transition_hook(print)   # called with the CustomJob on every state change
    ...
    service.stop()                       # stops running jobs (they fail) and the server

`python -m local.jobservice` runs it as its own process (see __main__.py).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
from google.cloud.aiplatform_v1.types import CustomJob, JobState

from local.jobservice.batch_jobs import BatchPredictions
from local.jobservice.batch_rest import batch_prediction_routes
from local.jobservice.batch_store import BatchJobStore
from local.jobservice.capacity import CapacityError, CapacityModel, parse_capacity
from local.jobservice.cloud_quotas import QuotaReads, cloud_quotas_routes
from local.jobservice.compute_rest import reservation_routes
from local.jobservice.control import control_handler
from local.jobservice.endpoint_rest import endpoint_service_routes
from local.jobservice.endpoint_service import EndpointService
from local.jobservice.endpoint_store import EndpointStore
from local.jobservice.execution import JobExecutor, TransitionHook, TransitionRefused
from local.jobservice.faults import PERMISSIONS, RATE_LIMITED_METHODS, FaultPlan
from local.jobservice.job_logs import JobLogs, logging_routes
from local.jobservice.model_registry import ModelRegistry
from local.jobservice.model_rest import model_service_routes
from local.jobservice.model_rules import ProjectNumbers
from local.jobservice.model_store import ModelStore
from local.jobservice.monitoring_rest import monitoring_routes
from local.jobservice.persistent_resources import PersistentResources
from local.jobservice.persistent_rest import persistent_resource_routes
from local.jobservice.prediction import PredictionRouter
from local.jobservice.prediction_metrics import PredictionLog
from local.jobservice.replicas import ExecutionSettings
from local.jobservice.rest import RestServer, rest_routes
from local.jobservice.secret_manager import NodeServices, SecretStore, secret_manager_routes
from local.jobservice.servicer import JobServiceServicer
from local.jobservice.serving import ServingProcesses
from local.jobservice.store import JobStore
from local.jobservice.validation import PARENT_RE

log = logging.getLogger("local.jobservice")


class LocalJobService:
    def __init__(
        self,
        state_dir: Path,
        settings: ExecutionSettings | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        exit_on_crash: bool = False,
        rest_port: int = 0,
        capacity: CapacityModel | None = None,
        project_numbers: ProjectNumbers | None = None,
        secrets: SecretStore | None = None,
    ):
        self.state_dir = Path(state_dir)
        self.settings = settings or ExecutionSettings()
        self.host = host
        self.port = port
        self.rest_port = rest_port
        # Only a server that is its own process may really exit on Crash; in-process, crash detaches.
        self.exit_on_crash = exit_on_crash
        self.store = JobStore(self.state_dir)
        # Vertex's Model Registry, on the REST port; it answers with project numbers (model_rules.project_numbers).
        self.registry = ModelRegistry(ModelStore(self.state_dir), numbers=project_numbers)
        self.faults = FaultPlan()
        # Vertex's endpoints (deployed models served by local processes) and the Monitoring stand-in's metrics.
        serving = ServingProcesses(self.settings, self.state_dir / "serving")
        self.endpoints = EndpointService(self.registry, serving, EndpointStore(self.state_dir), project_numbers)
        self.prediction_metrics = PredictionLog()
        self._project_numbers = project_numbers
        self.executor = JobExecutor(self.store, self.settings)
        if capacity is not None:
            self.executor.quota.set_model(capacity)
        self.quota_reads = QuotaReads()
        # Secret Manager's access method and the nodes' metadata servers (secret_manager.py): empty unless given.
        self.secrets = secrets or SecretStore(numbers=project_numbers)
        self.servicer = JobServiceServicer(self.store, self.executor, self.faults)
        # Vertex's persistent resources (persistent_resources.py), on the REST port: jobs on them skip provisioning.
        self.persistent = PersistentResources(self.executor, self.state_dir)
        self.executor.quota.pools = self.persistent
        self.servicer.persistent = self.persistent
        # BatchPredictionJobs (batch_jobs.py), on the REST port: the registry's versions run with trainer.predict.
        batch_store = BatchJobStore(self.state_dir)
        self.batches = BatchPredictions(batch_store, self.registry, self.settings, self.state_dir / "batch_runs")
        self._server: grpc.Server | None = None
        self._rest: RestServer | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def rest_url(self) -> str:
        """Where Vertex's REST mapping and Cloud Logging's entries:list are served (gcloud's endpoint form)."""
        return f"http://{self.host}:{self.rest_port}/"

    def add_transition_hook(self, hook: TransitionHook) -> None:
        self.executor.hooks.append(hook)

    def start(self) -> str:
        """Serve, and carry on with the jobs a previous server left unfinished. Returns the address."""
        # so_reuseport off: a second server on a taken port must fail, not share it silently.
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])
        servicer = self.servicer
        server.add_generic_rpc_handlers(
            [servicer.handler(), servicer.operations_handler(), control_handler(self._control_methods())]
        )
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"the local JobService cannot listen on {self.host}:{self.port}")
        self.port = bound
        # One HTTP port for the REST APIs: their paths (/v1/projects/P/locations/L/customJobs…, …/models…,
        # /v1/projects/P/locations/global/services/S/quotaInfos…, /v2/entries:list) never meet.
        routes = rest_routes(servicer) + model_service_routes(self.registry, self.faults)
        router = PredictionRouter(self.endpoints, self.faults, self.prediction_metrics)
        routes += endpoint_service_routes(self.endpoints, router)
        routes += monitoring_routes(self.prediction_metrics, self._project_numbers)
        routes += logging_routes(JobLogs(self.store))
        routes += cloud_quotas_routes(lambda: self.executor.quota.model, self.quota_reads)
        routes += reservation_routes(lambda: self.executor.quota.model, lambda: self.store.jobs())
        routes += secret_manager_routes(self.secrets)
        routes += batch_prediction_routes(self.batches, self.faults)
        routes += persistent_resource_routes(self.persistent)
        self._rest = RestServer(routes, self.host, self.rest_port)
        self.rest_port = self._rest.port
        self.executor.node_services = NodeServices(self.secrets, self.rest_url)
        server.start()
        self._server = server
        self._rest.start()
        self.persistent.start()
        self.executor.resume_all()
        self.batches.resume_all()
        self.endpoints.serve_deployed()
        return self.address

    def stop(self, stop_jobs: bool = True, grace: float = 1.0) -> None:
        """Stop serving. With `stop_jobs` every running job's nodes are stopped and the job fails;
        without, the nodes keep running and a server started on the same state folder adopts them."""
        if self._rest is not None:
            self._rest.stop()
            self._rest = None
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        self.persistent.stop()
        self.executor.shutdown(stop_jobs=stop_jobs)
        self.batches.shutdown(stop_jobs=stop_jobs)
        self.endpoints.stop()

    def _control_methods(self) -> dict:
        def fail_next_creates(request: dict, context: grpc.ServicerContext) -> dict:
            try:
                code = grpc.StatusCode[request.get("code", "UNAVAILABLE")]
            except KeyError:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown gRPC status code {request.get('code')!r}")
            count, after_create = int(request.get("count", 1)), bool(request.get("after_create"))
            try:
                method = request.get("method", "CreateCustomJob")
                self.faults.fail_next_creates(code, count, request.get("message"), after_create, method)
            except ValueError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            return {}

        def delay_next_creates(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.delay_next_creates(float(request["seconds"]), int(request.get("count", 1)))
            return {}

        def slow_next_uploads(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.slow_next_uploads(float(request["seconds"]), int(request.get("count", 1)))
            return {}

        def hold_next_in_queue(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.hold_next_in_queue(float(request["seconds"]), int(request.get("count", 1)))
            return {}

        def refusals(plan: Callable[[int, tuple[str, ...]], None], default: tuple[str, ...]) -> Callable:
            """A control method planning refusals of calls (rate limits, denials) of the methods it names."""

            def control(request: dict, context: grpc.ServicerContext) -> dict:
                try:
                    plan(int(request["count"]), tuple(request.get("methods") or default))
                except ValueError as error:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
                return {}

            return control

        def hold_next_in_pending(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.hold_next_in_pending(float(request["seconds"]), int(request.get("count", 1)))
            return {}

        def fail_next_for_quota(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.fail_next_for_quota(int(request.get("count", 1)))
            return {}

        def stock_out_next(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.stock_out_next(int(request.get("count", 1)))
            return {}

        def preempt(request: dict, context: grpc.ServicerContext) -> dict:
            if self.store.get(request["name"]) is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"The CustomJob {request['name']} does not exist.")
            try:
                self.executor.preempt(request["name"])
            except TransitionRefused as error:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
            return {}

        def set_capacity(request: dict, context: grpc.ServicerContext) -> dict:
            try:
                self.executor.quota.set_model(parse_capacity(request.get("model")))
            except CapacityError as error:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            return {}

        def refuse_quota_reads(request: dict, context: grpc.ServicerContext) -> dict:
            self.quota_reads.refuse_next(int(request.get("count", 1)))
            return {}

        def quota_reads(request: dict, context: grpc.ServicerContext) -> dict:
            return {"count": self.quota_reads.count, "calls": list(self.quota_reads.calls)}

        def slow_quota_reads(request: dict, context: grpc.ServicerContext) -> dict:
            self.quota_reads.slow_down(float(request["seconds"]))
            return {}

        def replica_logs(request: dict, context: grpc.ServicerContext) -> dict:
            return {"logs": self.executor.log_paths(request["name"])}

        def park_jobs(request: dict, context: grpc.ServicerContext) -> dict:
            parent = request["parent"]
            if not PARENT_RE.fullmatch(parent):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"parent must be projects/P/locations/L: {parent!r}")
            template = CustomJob.from_json(json.dumps(request["job"]), ignore_unknown_fields=False)
            names = []
            for labels in request["labels"]:
                now = dt.datetime.now(dt.UTC)
                job = CustomJob(template, labels=labels, state=JobState.JOB_STATE_QUEUED, create_time=now)
                job.name, job.update_time = f"{parent}/customJobs/{self.store.new_job_id()}", now
                self.executor.park(self.store.add(job))
                names.append(job.name)
            return {"names": names}

        def read_hyphenated_label_keys(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.hyphenated_label_keys = bool(request.get("read", True))
            return {}

        def cap_list_pages(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.max_page_size = int(request["size"]) if request.get("size") else None
            return {}

        def disturb_predictions(request: dict, context: grpc.ServicerContext) -> dict:
            try:
                self.faults.disturb_predictions(
                    str(request.get("deployed_model_id") or ""),
                    float(request.get("error_fraction") or 0.0),
                    float(request.get("added_seconds") or 0.0),
                )
            except ValueError as error:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            return {}

        def call_counts(request: dict, context: grpc.ServicerContext) -> dict:
            return {"counts": self.servicer.call_counts()}

        def clear_faults(request: dict, context: grpc.ServicerContext) -> dict:
            self.faults.clear()
            self.quota_reads.clear()
            return {}

        def info(request: dict, context: grpc.ServicerContext) -> dict:
            return {
                "pid": os.getpid(),
                "state_dir": str(self.state_dir),
                "address": self.address,
                "rest_url": self.rest_url,
            }

        def crash(request: dict, context: grpc.ServicerContext) -> dict:
            log.warning("crash requested through the control API")
            # After the reply has gone out: exit without any cleanup, as SIGKILL would.
            action = (lambda: os._exit(137)) if self.exit_on_crash else (lambda: self.stop(stop_jobs=False))
            threading.Timer(0.2, action).start()
            return {}

        return {
            "FailNextCreates": fail_next_creates,
            "SlowNextUploads": slow_next_uploads,
            "HoldNextInQueue": hold_next_in_queue,
            "HoldNextInPending": hold_next_in_pending,
            "RateLimitNextCalls": refusals(self.faults.rate_limit_next_calls, RATE_LIMITED_METHODS),
            "DenyNextCalls": refusals(self.faults.deny_next_calls, tuple(PERMISSIONS)),
            "FailNextForQuota": fail_next_for_quota,
            "StockOutNext": stock_out_next,
            "DelayNextCreates": delay_next_creates,
            "Preempt": preempt,
            "SetCapacity": set_capacity,
            "RefuseQuotaReads": refuse_quota_reads,
            "QuotaReads": quota_reads,
            "SlowQuotaReads": slow_quota_reads,
            "ReplicaLogs": replica_logs,
            "ParkJobs": park_jobs,
            "ReadHyphenatedLabelKeys": read_hyphenated_label_keys,
            "CapListPages": cap_list_pages,
            "DisturbPredictions": disturb_predictions,
            "CallCounts": call_counts,
            "ClearFaults": clear_faults,
            "Info": info,
            "Crash": crash,
        }
