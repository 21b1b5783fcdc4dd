"""Pub/Sub as a principal without some permission sees it: a gRPC proxy in front of the emulator that answers
PERMISSION_DENIED to the methods it is told to refuse and forwards every other call unchanged.

Google's emulator enforces no IAM, so nothing local ever refuses a call; a project does, with gRPC status 7 and
"User not authorized to perform this action." (the text Pub/Sub returns, quoted in googlearchive/pubsubbeat#13
for CreateSubscription and googleapis/google-cloud-ruby#17944 for a subscriber). Clients reach the proxy
through PUBSUB_EMULATOR_HOST, as they reach the emulator, so they get the refusal over the wire and raise the
exception a real project makes them raise. Unary methods only (Publish, CreateSubscription, Pull, Acknowledge,
DeleteSubscription …); StreamingPull is answered UNIMPLEMENTED.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc

REFUSAL = "User not authorized to perform this action."
# The methods a watcher without the deployment's grants cannot call, by their gRPC names.
CREATE_SUBSCRIPTION = "google.pubsub.v1.Subscriber/CreateSubscription"
DELETE_SUBSCRIPTION = "google.pubsub.v1.Subscriber/DeleteSubscription"
PULL = "google.pubsub.v1.Subscriber/Pull"
PUBLISH = "google.pubsub.v1.Publisher/Publish"


class _RefuseOrForward(grpc.GenericRpcHandler):
    def __init__(self, upstream: grpc.Channel, refused: frozenset[str]):
        self._upstream = upstream
        self._refused = refused

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method  # "/package.Service/Method"
        if method.endswith("/StreamingPull"):
            return None
        if method.lstrip("/") in self._refused:
            return grpc.unary_unary_rpc_method_handler(_refuse)
        # No (de)serializers on either side: the request and the response pass through as bytes.
        call = self._upstream.unary_unary(method)

        def forward(request: bytes, context: grpc.ServicerContext) -> Any:
            try:
                return call(request, timeout=context.time_remaining())
            except grpc.RpcError as error:
                context.abort(error.code(), error.details())

        return grpc.unary_unary_rpc_method_handler(forward)


def _refuse(request: bytes, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.PERMISSION_DENIED, REFUSAL)


@contextmanager
def refusing_pubsub(emulator_host: str, refused: Iterable[str]) -> Iterator[str]:
    """A proxy to the emulator at `emulator_host` that refuses the gRPC methods `refused`; yields the
    host:port to put in PUBSUB_EMULATOR_HOST, and stops the proxy on exit."""
    upstream = grpc.insecure_channel(emulator_host)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((_RefuseOrForward(upstream, frozenset(refused)),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
        upstream.close()
