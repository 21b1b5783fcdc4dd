"""The local JobService's control API: fault injection and introspection for tests, from any process.

It is served on the JobService's own port as the gRPC service `trainctl.local.v1.JobServiceControl`,
with JSON objects as messages (no generated code needed on either side). `JobServiceControl(address)`
is the client:

    control = JobServiceControl("127.0.0.1:PORT")
    # CreateCustomJob
    control.fail_next_creates("RESOURCE_EXHAUSTED", count=2)      # Vertex's quota wording by default
    control.fail_next_creates("UNAVAILABLE", after_create=True)   # job created, response "lost"
    control.fail_next_creates("UNKNOWN", after_create=True)       # job created, stream broke: "Stream removed"
    control.delay_next_creates(seconds=10)                        # job created, answer late
    # UploadModel (the ModelService, on the REST port)
    control.fail_next_creates("UNAVAILABLE", after_create=True, method="UploadModel")  # started, answer "lost"
    control.slow_next_uploads(seconds=5)                          # the version exists 5 s later (else 0.5 s)
    # GetCustomJob / ListCustomJobs / CancelCustomJob
    control.rate_limit_next_calls(3)                              # RESOURCE_EXHAUSTED, the request-rate text
    control.rate_limit_next_calls(1, methods=("CancelCustomJob",))
    # any of CreateCustomJob / ListCustomJobs / GetCustomJob / CancelCustomJob
    control.deny_next_calls(2, methods=("ListCustomJobs",))       # PERMISSION_DENIED, IAM's text
    # the next created job(s)
    control.hold_next_in_queue(seconds=30)                        # QUEUED: waiting for quota
    control.hold_next_in_pending(seconds=30)                      # PENDING: waiting for capacity
    control.fail_next_for_quota(count=1)                          # FAILED, code 8, quota text with the GPU metric
    control.stock_out_next(count=2)                               # 2 stockouts, Vertex retries (≤3), then RUNNING
    control.stock_out_next(count=4)                               # one stockout too many: FAILED, code 8
    # a running job
    control.preempt(job_name)                                     # SIGTERM all nodes; Vertex restarts or fails it
    control.replica_logs(job_name)                                # {"workerpool0-0": "/…/workerpool0-0.log", …}
    # the capacity model (capacity.py: quotas per region and metric, stockouts and preemptions per machine)
    control.set_capacity({"regions": {"us-central1": {"quotas": {"custom_model_training_nvidia_l4_gpus": 8}}}})
    control.clear_capacity()                                      # no limits, always available
    # the Cloud Quotas stand-in (cloud_quotas.py, on the REST port)
    control.refuse_quota_reads(count=1)                           # 403 PERMISSION_DENIED: the API is disabled
    control.slow_quota_reads(seconds=0.1)                         # every call takes a round trip's time
    control.quota_reads()                                         # how many quotaInfos calls were served
    control.quota_calls()                                         # which: ["list", "get CustomModel…", …]
    control.crash()                                               # exit at once; nodes keep running
    # a deployed model of an endpoint (endpoint_service.py's router)
    control.disturb_predictions("123", error_fraction=0.5)         # half its requests answer 500
    control.disturb_predictions("123", added_seconds=0.2)          # each waits 0.2 s first
    # the list filter, and what was called
    control.read_hyphenated_label_keys()                          # take labels.a-b=… instead of refusing it
    control.park_jobs(parent, job_json, [{"k": "1"}, …])          # QUEUED jobs nothing runs, until cancelled
    control.cap_list_pages(100)                                   # a listing's pages hold at most 100 jobs
    control.call_counts()                                         # {"GetCustomJob": 3, "ListCustomJobs": 2, …}

With a capacity model, a job whose GPUs (with those of the PENDING/RUNNING jobs on the same quota metric in
its region) exceed the limit stays QUEUED until they fit, in creation order; one that needs more than the
limit alone is refused at create with RESOURCE_EXHAUSTED and the quota text. A machine rule's `stockouts`
and `preempt_after` go through Vertex's retry rules as stock_out_next and preempt do.

What preempt and a crashing replica lead to is vertex_retries.py's rule: Spot jobs restart up to 6
times, other jobs restart when `restart_job_on_worker_restart` is set, else as a stockout up to 3 times;
exits 6/134/11/139 restart up to 3 times; `disable_retries` turns Vertex's restarts off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc

SERVICE = "trainctl.local.v1.JobServiceControl"


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def _decode(data: bytes) -> Any:
    return json.loads(data or b"{}")


def control_handler(methods: dict[str, Callable[[dict, grpc.ServicerContext], dict]]) -> grpc.GenericRpcHandler:
    """A generic handler serving `methods` (name → function of the JSON request) as SERVICE."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(function, request_deserializer=_decode, response_serializer=_encode)
        for name, function in methods.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


class JobServiceControl:
    """Client of the control API."""

    def __init__(self, address: str, timeout: float = 30.0):
        self._channel = grpc.insecure_channel(address)
        self._timeout = timeout

    def _call(self, rpc: str, /, **request: Any) -> dict:
        stub = self._channel.unary_unary(f"/{SERVICE}/{rpc}", request_serializer=_encode, response_deserializer=_decode)
        return stub(request, timeout=self._timeout)

    def fail_next_creates(
        self,
        code: str = "UNAVAILABLE",
        count: int = 1,
        message: str | None = None,
        after_create: bool = False,
        method: str = "CreateCustomJob",
    ) -> None:
        """The next `count` calls of `method` (CreateCustomJob, UploadModel or CreateBatchPredictionJob) fail with gRPC
        status `code` (a grpc.StatusCode name); with `after_create`, after the job was created (the upload started)."""
        self._call("FailNextCreates", code=code, count=count, message=message, after_create=after_create, method=method)

    def delay_next_creates(self, seconds: float, count: int = 1) -> None:
        """The next `count` CreateCustomJob calls create the job, then answer only after `seconds`."""
        self._call("DelayNextCreates", seconds=seconds, count=count)

    def slow_next_uploads(self, seconds: float, count: int = 1) -> None:
        """The next `count` UploadModel operations run `seconds` before their version exists (0.5 s otherwise)."""
        self._call("SlowNextUploads", seconds=seconds, count=count)

    def hold_next_in_queue(self, seconds: float, count: int = 1) -> None:
        """The next `count` created jobs stay in JOB_STATE_QUEUED for `seconds`."""
        self._call("HoldNextInQueue", seconds=seconds, count=count)

    def hold_next_in_pending(self, seconds: float, count: int = 1) -> None:
        """The next `count` created jobs stay in JOB_STATE_PENDING for `seconds` (waiting for capacity)."""
        self._call("HoldNextInPending", seconds=seconds, count=count)

    def rate_limit_next_calls(
        self, count: int, methods: tuple[str, ...] = ("GetCustomJob", "ListCustomJobs", "CancelCustomJob")
    ) -> None:
        """The next `count` calls of `methods` answer RESOURCE_EXHAUSTED with Vertex's request-rate text."""
        self._call("RateLimitNextCalls", count=count, methods=list(methods))

    def deny_next_calls(
        self,
        count: int,
        methods: tuple[str, ...] = ("CreateCustomJob", "ListCustomJobs", "GetCustomJob", "CancelCustomJob"),
    ) -> None:
        """The next `count` calls of `methods` answer PERMISSION_DENIED with IAM's text, naming the permission
        (as while a fresh grant propagates, or the caller lacks it)."""
        self._call("DenyNextCalls", count=count, methods=list(methods))

    def fail_next_for_quota(self, count: int = 1) -> None:
        """The next `count` created jobs end JOB_STATE_FAILED with error code 8 and Vertex's quota text,
        naming the GPU quota metric of the job's accelerator."""
        self._call("FailNextForQuota", count=count)

    def stock_out_next(self, count: int = 1) -> None:
        """The next created job meets `count` stockouts while its nodes are provisioned: Vertex retries
        up to 3 times, so with `count` ≥ 4 it ends FAILED with code 8 and the stockout text."""
        self._call("StockOutNext", count=count)

    def preempt(self, name: str) -> None:
        """Preempt a running job's nodes (SIGTERM, then SIGKILL): Vertex restarts it or it fails."""
        self._call("Preempt", name=name)

    def set_capacity(self, model: dict) -> None:
        """Replace the capacity model (the document capacity.py describes, as a dict); INVALID_ARGUMENT names
        a wrong key. Jobs already waiting in QUEUED look again at once."""
        self._call("SetCapacity", model=model)

    def clear_capacity(self) -> None:
        """No quota limits, no stockouts, no preemptions."""
        self._call("SetCapacity", model=None)

    def refuse_quota_reads(self, count: int = 1) -> None:
        """The next `count` Cloud Quotas calls answer 403 PERMISSION_DENIED (the API disabled in the project)."""
        self._call("RefuseQuotaReads", count=count)

    def slow_quota_reads(self, seconds: float) -> None:
        """Every Cloud Quotas call takes `seconds` more, as a round trip to Google would (until clear_faults)."""
        self._call("SlowQuotaReads", seconds=seconds)

    def quota_reads(self) -> int:
        """How many Cloud Quotas calls the stand-in has served (refused ones included)."""
        return int(self._call("QuotaReads")["count"])

    def quota_calls(self) -> list[str]:
        """The Cloud Quotas calls served, oldest first (the last 10,000): "list" for a page of quotaInfos.list,
        "get QUOTA_ID" for quotaInfos.get."""
        return list(self._call("QuotaReads")["calls"])

    def replica_logs(self, name: str) -> dict[str, str]:
        """Node name (and "service") → log file path, for a job's resource name."""
        return self._call("ReplicaLogs", name=name)["logs"]

    def park_jobs(self, parent: str, job: dict, labels: list[dict[str, str]]) -> list[str]:
        """Store one copy of `job` (a CustomJob as JSON) per entry of `labels`, in JOB_STATE_QUEUED with nothing to
        run it, as Vertex holds jobs for quota; cancelling one ends it at once. Their names, in order. For scale
        tests: thousands of jobs cost no thread or node each."""
        return list(self._call("ParkJobs", parent=parent, job=job, labels=labels)["names"])

    def read_hyphenated_label_keys(self, read: bool = True) -> None:
        """List filters read `labels.a-b=…` as the key "a-b" (what Vertex may do) instead of refusing it with
        INVALID_ARGUMENT (the default; local/FIDELITY.md); until clear_faults."""
        self._call("ReadHyphenatedLabelKeys", read=read)

    def cap_list_pages(self, size: int | None) -> None:
        """ListCustomJobs pages hold at most `size` jobs (None: the usual 1,000), as Vertex's pages may: its maximum
        is not documented; until clear_faults."""
        self._call("CapListPages", size=size)

    def call_counts(self) -> dict[str, int]:
        """How many calls of each JobService method the server has served (refused ones included)."""
        return {method: int(count) for method, count in self._call("CallCounts")["counts"].items()}

    def disturb_predictions(
        self, deployed_model_id: str, error_fraction: float = 0.0, added_seconds: float = 0.0
    ) -> None:
        """Make the endpoint's router answer 500 for this share of the deployed model's requests, and make every
        request of it wait `added_seconds` first (0 and 0 undo it)."""
        self._call(
            "DisturbPredictions",
            deployed_model_id=deployed_model_id,
            error_fraction=error_fraction,
            added_seconds=added_seconds,
        )

    def clear_faults(self) -> None:
        self._call("ClearFaults")

    def info(self) -> dict:
        """{"pid": …, "state_dir": …} of the server."""
        return self._call("Info")

    def crash(self) -> None:
        """Make the server exit at once, as SIGKILL would: no cleanup, the job nodes keep running."""
        self._call("Crash")

    def close(self) -> None:
        self._channel.close()
