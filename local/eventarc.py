"""The Eventarc stand-in: fake-gcs-server's Pub/Sub notifications → `on_dataset_upload`, as the cloud delivers the data
bucket's notifications (issue 40, point 6): Cloud Storage publishes them to the uploads topic (terraform/storage.tf) and
an Eventarc trigger on that topic delivers each message as a `google.cloud.pubsub.topic.v1.messagePublished`
CloudEvent.

fake-gcs-server publishes messages of the Cloud Storage notification shape (attributes bucketId/objectId/eventType…,
data the object resource) for every bucket; a notification configuration covers one bucket. The bridge is an HTTP
endpoint for a Pub/Sub *push* subscription on the notification topic: it keeps the data bucket's messages, forwards
each push as it came to the function (functions-framework turns a Pub/Sub push into that CloudEvent, as Eventarc
would), and answers with the function's status, so Pub/Sub's own retry and backoff apply to failures — as they do for
the real trigger (reference/functions.md §2.1, §5.2).

`finalized_event` is the other shape of the same upload, `google.cloud.storage.object.v1.finalized` (what an Eventarc
Cloud Storage trigger delivers, which trainctl used before issue 40): the function still takes it (events recorded
then, `trainctl replay`), and tests use it.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FINALIZED = "google.cloud.storage.object.v1.finalized"


def finalized_event(message: dict[str, Any]) -> tuple[dict[str, str], bytes] | None:
    """A push message's `message` → (CloudEvent headers, body); None for anything but OBJECT_FINALIZE."""
    attributes = message.get("attributes") or {}
    if attributes.get("eventType") != "OBJECT_FINALIZE":
        return None
    data = json.loads(base64.b64decode(message.get("data") or b"") or b"{}")
    bucket, name = attributes["bucketId"], attributes["objectId"]
    generation = str(data.get("generation") or attributes.get("objectGeneration", ""))
    # The real event's data: StorageObjectData, int64 fields as strings, id "bucket/name/generation".
    data |= {
        "bucket": bucket,
        "name": name,
        "generation": generation,
        "id": f"{bucket}/{name}/{generation}",
        "metageneration": str(data.get("metageneration", "1")),
    }
    headers = {
        "content-type": "application/json",
        "ce-specversion": "1.0",
        "ce-type": FINALIZED,
        "ce-source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "ce-subject": f"objects/{name}",
        "ce-id": str(message.get("messageId") or message.get("message_id")),
        "ce-time": str(message.get("publishTime") or message.get("publish_time")),
        "ce-bucket": bucket,
    }
    return headers, json.dumps(data).encode()


def post(url: str, headers: dict[str, str], body: bytes, timeout: float = 600.0) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 503


class _PushHandler(BaseHTTPRequestHandler):
    target: str = ""
    bucket: str | None = None

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        try:
            attributes = json.loads(body)["message"].get("attributes") or {}
        except (ValueError, KeyError, TypeError, AttributeError):
            status = 204  # not a storage notification: drop it, never loop on it
        else:
            # Another bucket's, or another event type: the data bucket's notification would not have published it.
            finalized = attributes.get("eventType") == "OBJECT_FINALIZE"
            ours = self.bucket is None or attributes.get("bucketId") == self.bucket
            status = post(self.target, {"content-type": "application/json"}, body) if finalized and ours else 204
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class EventarcBridge:
    """Serves the push endpoint on 127.0.0.1:`port` (0: any free port) in a background thread. With `bucket`, only that
    bucket's objects are forwarded, like the notification configuration of that one bucket."""

    def __init__(self, target_url: str, port: int = 0, bucket: str | None = None, topic: str = ""):
        """`topic`: the notification topic's path (projects/P/topics/T), which the forwarded push names, as a push
        subscription's endpoint does (functions-framework makes it the CloudEvent's source)."""
        target = target_url.rstrip("/") + (f"/{topic}" if topic else "")
        handler = type("Handler", (_PushHandler,), {"target": target, "bucket": bucket})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="eventarc-bridge", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
