"""Online prediction: `python -m trainer.serve`, an HTTP server that follows Vertex AI's custom-container contract,
so a model version whose serving container is the trainer image with `command: ["python", "-m", "trainer.serve"]`
can be deployed to an endpoint or used for batch prediction as it is.

- It listens on 0.0.0.0:$AIP_HTTP_PORT (8080 when unset, Vertex's default port) and loads `model.pt` from
  $AIP_STORAGE_URI, where Vertex copies the model's artifacts (or from `--model-dir`).
- GET $AIP_HEALTH_ROUTE answers 200 once the model is loaded and 503 until then.
- POST $AIP_PREDICT_ROUTE takes `{"instances": [{"column": value, …}, …]}` — each instance an object of the
  model's feature columns, a value null where it is missing — and answers `{"predictions": [{"prediction": …,
  "confidence": …}, …]}`, one per instance in order: the label in the target's own type and the predicted
  class's probability, or for regression the value in the target's units.

Predictions come from the code `python -m trainer.predict` runs on files (`model_outputs`, `prediction_columns`), on
the inputs `Preprocessor.features` would make of a file of the same rows (`Preprocessor.features_of_values`, the same
arithmetic without building a table per request): the same row gets the same prediction online and in batch. A
request that cannot be answered gets a 4xx whose `{"error": …}` says what to change — never a 500 for a client to
retry. Answers go out with TCP_NODELAY over kept-alive HTTP/1.1 connections (issue 41: bench/serving.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from trainer import logs
from trainer.data.preprocess import Preprocessor
from trainer.outputs.model_folder import load_model
from trainer.predict import model_outputs, prediction_columns

DEFAULT_HTTP_PORT = 8080
# The routes Vertex sets in AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE; these (the SDK's LocalModel defaults) serve
# only a server started by hand.
DEFAULT_HEALTH_ROUTE = "/health"
DEFAULT_PREDICT_ROUTE = "/predict"
# Vertex forwards at most 1.5 MB (shared public endpoints) or 10 MB (dedicated ones); the bound only stops a
# direct caller from making the server hold an arbitrary body in memory.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# How a Content-Length and a chunk's size line may be written: digits (at most 19: an int64), and 1 to 16 hex digits
# then an optional ';extension' and CRLF (RFC 9112 §6.3, §7.1). Only one length is read per line, of bounded bytes.
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
_CHUNK_LINE_BYTES = 1024
_MAX_TRAILER_LINES = 32
# What json.loads makes of a number or null: the values a numeric column takes.
_NUMBER_TYPES = {int, float, bool, type(None)}


class Refused(Exception):
    """A request this server will not answer: its HTTP status and what the caller should change."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def instances_features(body: bytes, prep: Preprocessor) -> torch.Tensor:
    """The model inputs of a prediction request's instances: the inputs `Preprocessor.features` makes of a CSV or
    Parquet file of the same rows (numbers read as float64, everything else as the text Arrow makes of it). Raises
    Refused (400) for anything else, naming the instance and the column."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, an integer of over 4,300 digits, deep nesting
        raise Refused(400, f"the request body is not JSON this server reads: {type(e).__name__}: {e}") from None
    if not isinstance(request, dict) or not isinstance(request.get("instances"), list):
        raise Refused(400, 'the request body must be a JSON object {"instances": [{"column": value, ...}, ...]}')
    unknown = sorted(set(request) - {"instances", "parameters"})
    if unknown:
        raise Refused(400, f"unknown request fields {unknown}; a request has `instances` and `parameters`")
    if request.get("parameters") not in (None, {}):
        raise Refused(400, "this model takes no `parameters`; leave them out")
    instances = request["instances"]
    if not instances:
        raise Refused(400, "`instances` is empty; send at least one instance")

    numbers = _numbers(instances, prep)
    try:
        # Row by row, so that the first value at fault is the one a reader of the request meets first.
        cells = None if numbers is None else [
            [_cell(instance[column], True, i, column) for column in prep.categories]
            for i, instance in enumerate(instances)
        ]  # fmt: skip
    except (KeyError, TypeError):  # an instance that lacks a string column, or is not an object
        cells = None
    if numbers is None or cells is None:
        _check_instances(instances, prep)  # raises Refused, naming the first instance and column at fault
        raise AssertionError("instances the quick read refused passed the full check")
    categories = [pa.array(column, pa.string()) for column in zip(*cells, strict=True)]
    return prep.features_of_values(numbers, categories)


def _numbers(instances: list, prep: Preprocessor) -> np.ndarray | None:
    """The numeric columns' values as float64, as `_cell` reads them (null: NaN, a boolean: 0 or 1), in C loops
    rather than a call per value; None when an instance is not an object, lacks one of them, or holds in one
    anything but a number or null — `_check_instances` then says which."""
    try:
        rows = [[instance[column] for column in prep.numeric] for instance in instances]
    except (KeyError, TypeError):  # not an object, or a column missing
        return None
    # The common case first: numpy finds every value a number (or a boolean) and no null among them. A list value
    # makes another shape or a ValueError; a string, a null or an object another kind.
    with contextlib.suppress(ValueError, OverflowError):
        numbers = np.array(rows)
        if numbers.ndim == 2 and numbers.dtype.kind in "fib":
            return numbers.astype(np.float64, copy=False)
    if not set(map(type, chain.from_iterable(rows))) <= _NUMBER_TYPES:
        return None
    try:
        return np.array(rows, dtype=np.float64).reshape(len(instances), len(prep.numeric))
    except OverflowError:  # an integer beyond float64
        return None


def _check_instances(instances: list, prep: Preprocessor) -> None:
    """Raise Refused for the first instance, in order, that is not an object of the feature columns with values of
    their kinds, and within it the first column at fault."""
    columns = [*prep.numeric, *prep.categories]
    for i, instance in enumerate(instances):
        if not isinstance(instance, dict):
            raise Refused(
                400,
                f"instances[{i}] is {_json_kind(instance)}; each instance must be an object of column names and "
                f"values, e.g. {_example(columns)} (batch prediction: JSONL objects, or BigQuery with "
                'instanceConfig.instanceType "object"; CSV rows arrive as arrays)',
            )
        missing = [c for c in columns if c not in instance]
        if missing:
            shown = ", ".join(json.dumps(c) for c in missing[:10]) + (", …" if len(missing) > 10 else "")
            raise Refused(400, f"instances[{i}] lacks {len(missing)} of the columns the model reads: {shown} "
                               "(a value may be null)")  # fmt: skip
        for column in columns:
            _cell(instance[column], column in prep.categories, i, column)


def _cell(value: Any, categorical: bool, index: int, column: str) -> Any:
    if value is None:
        return None
    if categorical and isinstance(value, (str, int, float)):
        # The text a file's column of such values becomes in preprocessing (5.0 → "5", true → "true").
        try:
            return value if isinstance(value, str) else pa.scalar(value).cast(pa.string()).as_py()
        except OverflowError:
            raise Refused(400, f"instances[{index}][{json.dumps(column)}] is an integer beyond 64 bits") from None
    if not categorical and isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise Refused(400, f"instances[{index}][{json.dumps(column)}] is a number beyond float64") from None
    wanted = "a string, a number or null" if categorical else "a number or null"
    raise Refused(400, f"instances[{index}][{json.dumps(column)}] must be {wanted}, not {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    """How JSON calls a decoded value: null, an object, an array, a string, a boolean or a number."""
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _example(columns: list[str]) -> str:
    return json.dumps({c: "..." for c in columns[:2]})


def answer(body: bytes, model: nn.Module, prep: Preprocessor) -> dict:
    """The response to a prediction request's body: one prediction per instance, as `trainer.predict` writes it."""
    columns = prediction_columns(prep, model_outputs(model, prep, instances_features(body, prep)))
    predictions = columns["prediction"].to_pylist()
    if "confidence" not in columns:
        return {"predictions": [{"prediction": p} for p in predictions]}
    confidences = columns["confidence"].to_pylist()
    return {"predictions": [{"prediction": p, "confidence": c} for p, c in zip(predictions, confidences, strict=True)]}


class PredictionServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], health_route: str, predict_route: str):
        super().__init__(address, PredictionHandler)
        self.health_route, self.predict_route = health_route, predict_route
        self.loaded: tuple[nn.Module, Preprocessor] | None = None
        self.load_error: str | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-request (a reset connection, a closed pipe) is not a fault of the server's:
        no traceback in the log for it. Anything else is printed as socketserver prints it."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def load(self, model_dir: str) -> None:
        """Load the model (in a thread of its own, so health checks are answered meanwhile); a model that cannot
        be loaded stops the server, whose exit status and log line then say why."""
        try:
            self.loaded = load_model(model_dir)
            logs.log("model loaded; ready for predictions", model_dir=model_dir, task=self.loaded[1].task)
        except Exception as e:
            self.load_error = f"{type(e).__name__}: {e}"
            logs.error(f"cannot load the model from {model_dir}: {self.load_error}")
            self.shutdown()


class PredictionHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every answer carries its Content-Length
    # TCP_NODELAY: an answer's headers and body are two writes, and with Nagle's algorithm the body waits for the
    # client's ACK of the headers, which a Linux client delays by 40 ms — every prediction took 48 ms (issue 41).
    disable_nagle_algorithm = True
    server: PredictionServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == self.server.health_route:
            if self.server.loaded is None:
                self._send(503, {"error": "the model is still loading"})
            else:
                self._send(200, {})
        else:
            self._send_not_here(path, "GET")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != self.server.predict_route:
            self._send_not_here(path, "POST")
            return
        try:
            body = self._read_body()
            if self.server.loaded is None:
                raise Refused(503, "the model is still loading; try again shortly")
            self._send(200, answer(body, *self.server.loaded))
        except Refused as refused:
            logs.warning("prediction request refused", status=refused.status, error=str(refused))
            self._send(refused.status, {"error": str(refused)})
        except Exception as e:  # a bug of ours, not the caller's: say so, and keep serving
            logs.error(f"prediction failed: {type(e).__name__}: {e}")
            self._send(500, {"error": f"prediction failed: {type(e).__name__}: {e}"})

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunks()
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise Refused(411, "a prediction request needs a Content-Length header or a chunked body")
        if not _CONTENT_LENGTH.fullmatch(length):  # isdigit() alone takes '²', and int() refuses 4,301 digits
            self.close_connection = True
            raise Refused(400, f"Content-Length {length[:40]!r} is not a number of bytes")
        if int(length) > MAX_REQUEST_BYTES:
            self.close_connection = True  # the body is left unread
            raise Refused(413, f"the request has {int(length):,} bytes; send at most {MAX_REQUEST_BYTES:,} at once")
        return self.rfile.read(int(length))

    def _read_chunks(self) -> bytes:
        """A body sent with `Transfer-Encoding: chunked` (the proxy in front of the container is not documented to
        always send a Content-Length), bounded as a sized one is. RFC 9112 §7.1: chunk-size is 1*HEXDIG, then
        chunk extensions after ';', then CRLF; int(…, 16) alone also took '-1' (rfile.read(-1) reads to the end of the
        connection, past the bound: issue 40, point 6), '0x10', '1_0' and '+f'. Each chunk's data ends in CRLF."""
        body = bytearray()
        while True:
            line = self.rfile.readline(_CHUNK_LINE_BYTES)
            found = _CHUNK_SIZE.match(line)
            if not found or not line.endswith(b"\n"):
                self.close_connection = True
                raise Refused(400, f"a chunked body with a malformed chunk size line {line[:40]!r}")
            size = int(found.group(1), 16)
            if size == 0:
                for _ in range(_MAX_TRAILER_LINES):
                    if self.rfile.readline(_CHUNK_LINE_BYTES) in (b"\r\n", b"\n", b""):
                        return bytes(body)  # after the trailer fields, if any
                self.close_connection = True
                raise Refused(400, f"a chunked body with more than {_MAX_TRAILER_LINES} trailer lines")
            if len(body) + size > MAX_REQUEST_BYTES:
                self.close_connection = True
                raise Refused(413, f"the request has more than {MAX_REQUEST_BYTES:,} bytes; send fewer at once")
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(_CHUNK_LINE_BYTES) not in (b"\r\n", b"\n"):
                self.close_connection = True
                raise Refused(400, f"a chunked body whose chunk of {size} bytes is cut short or not ended by CRLF")
            body += chunk

    def _send_not_here(self, path: str, method: str) -> None:
        if path in (self.server.health_route, self.server.predict_route):
            self._send(405, {"error": f"{method} is not served on {path}"})
        else:
            routes = f"GET {self.server.health_route}, POST {self.server.predict_route}"
            self._send(404, {"error": f"nothing is served on {path}; the routes are {routes}"})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log: refusals and failures have their own JSON lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.serve", description=__doc__.splitlines()[0])
    p.add_argument(
        "--model-dir",
        default=os.environ.get("AIP_STORAGE_URI"),
        help="the folder holding model.pt (default: $AIP_STORAGE_URI, where Vertex copies the model's artifacts)",
    )
    p.add_argument("--host", default="0.0.0.0", help="Vertex sends its checks and requests to 0.0.0.0")
    p.add_argument("--port", type=int, default=int(os.environ.get("AIP_HTTP_PORT") or DEFAULT_HTTP_PORT))
    args = p.parse_args(argv)
    if not args.model_dir:
        p.error("no model: set AIP_STORAGE_URI or pass --model-dir")
    health_route = os.environ.get("AIP_HEALTH_ROUTE") or DEFAULT_HEALTH_ROUTE
    predict_route = os.environ.get("AIP_PREDICT_ROUTE") or DEFAULT_PREDICT_ROUTE

    server = PredictionServer((args.host, args.port), health_route, predict_route)
    logs.log("serving predictions", port=server.server_address[1], health_route=health_route,
             predict_route=predict_route, model_dir=args.model_dir, mode=os.environ.get("AIP_MODE"))  # fmt: skip
    threading.Thread(target=server.load, args=(args.model_dir,), name="load-model", daemon=True).start()
    with server:
        server.serve_forever()
    return 1 if server.load_error else 0


if __name__ == "__main__":
    sys.exit(main())
