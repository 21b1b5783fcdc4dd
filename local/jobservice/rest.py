"""Vertex AI's REST mapping of the JobService (`/v1/projects/*/locations/*/customJobs…`), on the same
servicer methods as gRPC, so `gcloud ai custom-jobs` and the Vertex SDK (`api_transport="rest"`) reach the
one model of Vertex's behaviour the gRPC clients reach.

Bodies are the `aiplatform_v1` messages through protobuf's `json_format` (camelCase names, int64 as
strings, enums by name, or as numbers when the query asks `$alt=json;enum-encoding=int`, as the SDK's REST
transport does). A refusal is Google's REST error body, `{"error": {"code", "message", "status",
"details"}}`, with the HTTP status google/rpc/code.proto gives its gRPC code.

`rest_routes(servicer)` gives the JobService's routes; `RestServer` serves routes (these, the Cloud
Logging and Cloud Quotas stand-ins' and the ModelService's of model_rest.py) on one HTTP port.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

import grpc
from google.cloud.aiplatform_v1.types import (
    CancelCustomJobRequest,
    CreateCustomJobRequest,
    CustomJob,
    DeleteCustomJobRequest,
    GetCustomJobRequest,
    ListCustomJobsRequest,
    ListCustomJobsResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import field_mask_pb2, json_format
from google.protobuf.message import Message
from google.rpc import status_pb2

from local.jobservice.servicer import JobServiceServicer

log = logging.getLogger("local.jobservice")

# google/rpc/code.proto: the HTTP mapping written beside each code.
HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_UNKNOWN_FIELD = re.compile(r'has no field named "([^"]+)"')

_LOCATION = r"projects/[^/]+/locations/[^/]+"
_JOB = rf"{_LOCATION}/customJobs/[^/:]+"
_OPERATION = rf"{_LOCATION}(?:/customJobs/[^/]+)?/operations/[^/:]+"


class RestAbort(Exception):
    """What `context.abort` raises in a REST call: the gRPC status the servicer chose."""

    def __init__(self, code: grpc.StatusCode, message: str, details: list[Any] | None = None):
        super().__init__(message)
        self.code, self.message, self.details = code, message, details or []


class RestContext:
    """The part of grpc.ServicerContext the servicer uses: its aborts become RestAbort."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise RestAbort(code, details)

    def abort_with_status(self, status: grpc.Status) -> None:
        details: list[Any] = []
        for key, value in status.trailing_metadata or ():
            if key == _STATUS_DETAILS_KEY:
                details = list(status_pb2.Status.FromString(value).details)
        raise RestAbort(status.code, status.details, details)


@dataclass(frozen=True)
class RestRequest:
    method: str
    path: str  # the URL path, without the query
    query: dict[str, str]
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case

    @property
    def integer_enums(self) -> bool:
        # The SDK's REST transport sends `$alt=json;enum-encoding=int` and parses enums as numbers.
        return "enum-encoding=int" in self.query.get("$alt", "")

    def json_body(self) -> dict[str, Any]:
        if not self.body.strip():
            return {}
        try:
            parsed = json.loads(self.body)
        except ValueError as error:
            raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid JSON payload received. {error}") from None
        if not isinstance(parsed, dict):
            raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, "Invalid JSON payload received. Expected an object.")
        return parsed


@dataclass(frozen=True)
class RestResponse:
    status: int
    body: dict[str, Any]


Handler = Callable[[RestRequest, re.Match[str]], RestResponse]
Route = tuple[str, re.Pattern[str], Handler]  # (HTTP method, full path pattern, handler)


def message_json(message: Message, integer_enums: bool = False) -> dict[str, Any]:
    """A protobuf message (or proto-plus's) in Google's JSON mapping."""
    pb = type(message).pb(message) if hasattr(type(message), "pb") else message
    return json_format.MessageToDict(pb, use_integers_for_enums=integer_enums)


def parse_message(body: dict[str, Any], message_type: Any, where: str) -> Any:
    """`body` as `message_type` (proto-plus); unknown fields refused as Vertex's JSON front refuses them."""
    message = message_type()
    try:
        json_format.ParseDict(body, message_type.pb(message))
    except json_format.ParseError as error:
        unknown = _UNKNOWN_FIELD.search(str(error))
        # Google's JSON front's wording for a field the message does not have.
        text = f"Unknown name \"{unknown[1]}\" at '{where}': Cannot find field." if unknown else str(error)
        raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid JSON payload received. {text}") from None
    return message


def error_response(code: grpc.StatusCode, message: str, details: Sequence[Any] = ()) -> RestResponse:
    """Google's REST error body for a gRPC status (https://cloud.google.com/apis/design/errors)."""
    error: dict[str, Any] = {"code": HTTP_STATUS[code], "message": message, "status": code.name}
    if details:
        error["details"] = [json_format.MessageToDict(detail) for detail in details]
    return RestResponse(HTTP_STATUS[code], {"error": error})


def rest_routes(servicer: JobServiceServicer) -> list[Route]:
    """The JobService's REST routes (reference/apis.md §1), each calling the servicer's own method."""
    context = RestContext()

    def create(request: RestRequest, match: re.Match[str]) -> RestResponse:
        job = parse_message(request.json_body(), CustomJob, "custom_job")
        created = servicer.create_custom_job(CreateCustomJobRequest(parent=match["parent"], custom_job=job), context)
        return RestResponse(200, message_json(created, request.integer_enums))

    def get(request: RestRequest, match: re.Match[str]) -> RestResponse:
        job = servicer.get_custom_job(GetCustomJobRequest(name=match["name"]), context)
        return RestResponse(200, message_json(job, request.integer_enums))

    def list_jobs(request: RestRequest, match: re.Match[str]) -> RestResponse:
        query = request.query
        try:
            page_size = int(query.get("pageSize") or 0)
        except ValueError:
            raise RestAbort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Invalid value at 'page_size' (TYPE_INT32), {query['pageSize']!r}"
            ) from None
        listing = ListCustomJobsRequest(
            parent=match["parent"],
            filter=query.get("filter", ""),
            page_size=page_size,
            page_token=query.get("pageToken", ""),
        )
        if "readMask" in query:  # a FieldMask in its JSON form: camelCase paths joined by commas
            mask = field_mask_pb2.FieldMask()
            mask.FromJsonString(query["readMask"])
            listing.read_mask = mask
        listed: ListCustomJobsResponse = servicer.list_custom_jobs(listing, context)
        return RestResponse(200, message_json(listed, request.integer_enums))

    def cancel(request: RestRequest, match: re.Match[str]) -> RestResponse:
        servicer.cancel_custom_job(CancelCustomJobRequest(name=match["name"]), context)
        return RestResponse(200, {})

    def delete(request: RestRequest, match: re.Match[str]) -> RestResponse:
        operation = servicer.delete_custom_job(DeleteCustomJobRequest(name=match["name"]), context)
        return RestResponse(200, message_json(operation, request.integer_enums))

    def get_operation(request: RestRequest, match: re.Match[str]) -> RestResponse:
        operation = servicer.get_operation(operations_pb2.GetOperationRequest(name=match["name"]), context)
        return RestResponse(200, message_json(operation, request.integer_enums))

    return [
        ("POST", re.compile(rf"/v1/(?P<parent>{_LOCATION})/customJobs"), create),
        ("GET", re.compile(rf"/v1/(?P<parent>{_LOCATION})/customJobs"), list_jobs),
        ("GET", re.compile(rf"/v1/(?P<name>{_OPERATION})"), get_operation),
        ("GET", re.compile(rf"/v1/(?P<name>{_JOB})"), get),
        ("POST", re.compile(rf"/v1/(?P<name>{_JOB}):cancel"), cancel),
        ("DELETE", re.compile(rf"/v1/(?P<name>{_JOB})"), delete),
    ]


def dispatch(
    routes: list[Route], method: str, target: str, body: bytes, headers: dict[str, str] | None = None
) -> RestResponse:
    """The response to one HTTP request: the route's, or Google's error body."""
    url = urlsplit(target)
    query = {key: values[-1] for key, values in parse_qs(url.query, keep_blank_values=True).items()}
    path = unquote(url.path)  # a model version's `@` may come as %40
    path_matched = False
    for route_method, pattern, handler in routes:
        match = pattern.fullmatch(path)
        if match is None:
            continue
        path_matched = True
        if route_method != method:
            continue
        try:
            return handler(RestRequest(method, path, query, body, headers or {}), match)
        except RestAbort as abort:
            return error_response(abort.code, abort.message, abort.details)
    if path_matched:
        return error_response(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not supported on {path}.")
    return error_response(grpc.StatusCode.NOT_FOUND, f"The requested URL {path} was not found on this server.")


class RestServer:
    """`routes` over HTTP/1.1 on host:port (0 picks a free port); a thread per request, as gRPC's pool."""

    def __init__(self, routes: list[Route], host: str = "127.0.0.1", port: int = 0):
        self.routes = routes

        class Handler(_RequestHandler):
            server_routes = routes

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="rest", daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        host = self._httpd.server_address[0]
        return f"http://{host!s}:{self.port}/"

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _RequestHandler(BaseHTTPRequestHandler):
    server_routes: ClassVar[list[Route]] = []
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients' sessions expect

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            headers = {name.lower(): value for name, value in self.headers.items()}
            response = dispatch(self.server_routes, self.command, self.path, body, headers)
        except Exception as error:  # a bug here must reach the caller as INTERNAL, not a dropped connection
            log.exception("REST %s %s failed", self.command, self.path)
            response = error_response(grpc.StatusCode.INTERNAL, f"Internal error: {error}")
        payload = json.dumps(response.body).encode()
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("REST " + format, *args)
