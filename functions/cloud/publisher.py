"""Publishing lifecycle events to the events topic over Pub/Sub's REST API.

One small HTTPS call per event instead of the gRPC publisher client: that client's import and its batching
threads cost more at cold start than the whole duplicate path (reference/functions.md §8), and a function
publishes a handful of messages per invocation. Honours PUBSUB_EMULATOR_HOST like the client libraries do.

Each event carries its request id as the ordering key. Pub/Sub keeps a key's order only among publishes that
reach one region (cloud.google.com/pubsub/docs/ordering), so the controller publishes through its own
region's endpoint rather than the global one, which routes to the nearest region.
"""

from __future__ import annotations

import base64
import os

from functions.cloud.errors import Transient
from functions.cloud.rest import rest_session
from functions.cloud.retry import Retryable, RetryPolicy
from schemas.events import JobEvent, to_pubsub_message

_SCOPES = ["https://www.googleapis.com/auth/pubsub"]
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
POLICY = RetryPolicy(attempts=4, first_pause=0.25, max_pause=4.0, call_timeout=10.0)


class EventPublisher:
    def __init__(self, project: str, topic: str, source: str, policy: RetryPolicy = POLICY, region: str | None = None):
        emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
        endpoint = f"https://{region}-pubsub.googleapis.com" if region else "https://pubsub.googleapis.com"
        self._session, base = rest_session(emulator and f"http://{emulator}", endpoint, _SCOPES)
        self._url = f"{base}/v1/projects/{project}/topics/{topic}:publish"
        self.source = source
        self._policy = policy

    def publish(self, event: JobEvent) -> str:
        """Publish one event; returns its message id. Raises Transient when Pub/Sub stays unreachable."""
        message = to_pubsub_message(event, self.source)
        body = {
            "messages": [
                {
                    "data": base64.b64encode(message.data).decode(),
                    "attributes": message.attributes,
                    "orderingKey": message.ordering_key,
                }
            ]
        }

        def attempt(timeout: float) -> str:
            try:
                response = self._session.post(self._url, json=body, timeout=timeout)
            except OSError as exc:  # requests' ConnectionError and Timeout are OSErrors
                raise Retryable(f"cannot reach Pub/Sub: {exc}") from None
            if response.status_code == 200:
                return response.json()["messageIds"][0]
            problem = f"Pub/Sub answered {response.status_code}: {response.text[:200]}"
            if response.status_code in _RETRYABLE_STATUS:
                raise Retryable(problem)
            # Refused (permission, missing topic): not retried here, but the event stays in the record's
            # outbox and the delivery is redelivered, so it goes out once the deployment is fixed.
            raise Transient(f"could not publish {event.ce_type} for {event.request_id}: {problem}")

        return self._policy.call(f"publishing {event.ce_type} for {event.request_id}", attempt)
