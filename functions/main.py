"""Cloud Function entry points, and nothing else: each decodes nothing itself and delegates to handlers,
inside the invocation's deadline."""

import functions_framework

from functions import handlers

# The deployed functions, by name: Terraform's root main.py re-exports exactly these, and the local stack
# serves each (terraform/locals.tf's keys must match; tests/terraform checks).
__all__ = ["on_dataset_upload", "on_job_request", "on_job_state", "on_retrain", "reconcile"]


@functions_framework.cloud_event
def on_dataset_upload(cloud_event):
    """google.cloud.storage.object.v1.finalized: a marker object starts a job; anything else is ignored."""
    with handlers.within_deadline():
        handlers.dataset_upload(cloud_event)


@functions_framework.cloud_event
def on_job_request(cloud_event):
    """google.cloud.pubsub.topic.v1.messagePublished carrying a TrainingJobRequest (JSON or YAML)."""
    with handlers.within_deadline():
        handlers.job_request(cloud_event)


@functions_framework.cloud_event
def on_job_state(cloud_event):
    """Pub/Sub messages from the log sink on Vertex job-state log lines."""
    with handlers.within_deadline():
        handlers.job_state(cloud_event)


@functions_framework.cloud_event
def on_retrain(cloud_event):
    """Messages of the retrain topic: a rule's schedule tick (Cloud Scheduler) or an alert (a Monitoring incident)."""
    with handlers.within_deadline():
        handlers.retrain(cloud_event)


@functions_framework.http
def reconcile(request):
    """The scheduler tick: bring every active request up to date with Vertex."""
    with handlers.within_deadline():
        return handlers.reconcile_tick()
