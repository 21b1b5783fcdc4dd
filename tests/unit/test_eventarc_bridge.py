"""The local stand-in for the uploads topic's Eventarc trigger (issue 40, point 6): fake-gcs-server's notifications of
the data bucket reach on_dataset_upload as the cloud delivers them, a Pub/Sub push naming the topic, unchanged; other
buckets' objects and other event types do not, as the data bucket's notification configuration would not publish them.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from local.eventarc import EventarcBridge

TOPIC = "projects/p/topics/fake-gcs-notifications"


class _Recorder(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        self.received.append((self.path, self.rfile.read(int(self.headers.get("content-length") or 0))))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def bridge() -> Iterator[tuple[EventarcBridge, list[tuple[str, bytes]]]]:
    handler = type("Recorder", (_Recorder,), {"received": []})
    function = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=function.serve_forever, daemon=True).start()
    host, port = function.server_address[:2]
    bridge = EventarcBridge(f"http://{host!s}:{port}/", bucket="data", topic=TOPIC)
    try:
        yield bridge, handler.received
    finally:
        bridge.stop()
        function.shutdown()
        function.server_close()


def push(bridge: EventarcBridge, body: bytes) -> int:
    request = urllib.request.Request(bridge.url, data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def notification(bucket: str, event_type: str = "OBJECT_FINALIZE") -> bytes:
    attributes = {"eventType": event_type, "bucketId": bucket, "objectId": "churn/_SUCCESS", "objectGeneration": "7"}
    message = {"attributes": attributes, "data": "e30=", "messageId": "1"}
    return json.dumps({"subscription": "projects/p/subscriptions/s", "message": message}).encode()


def test_the_data_buckets_finalize_notifications_reach_the_function_unchanged_at_the_topics_path(bridge):
    server, received = bridge
    assert push(server, notification("data")) == 200
    assert received == [(f"/{TOPIC}", notification("data"))]


@pytest.mark.parametrize(
    "body", [notification("control"), notification("data", "OBJECT_DELETE"), b"not json", b'{"message": 3}']
)
def test_other_buckets_other_events_and_garbage_are_dropped_never_looped_on(bridge, body):
    server, received = bridge
    assert push(server, body) == 204
    assert received == []
