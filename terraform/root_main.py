"""Cloud Functions entry points. Cloud Functions imports main.py from the root of the uploaded source, so
terraform/functions.tf puts this file there as main.py; the functions themselves live in functions/main.py.

Keep the names equal to the keys of local.functions in terraform/locals.tf (tests/terraform checks).
"""

from functions.main import on_dataset_upload, on_job_request, on_job_state, reconcile

__all__ = ["on_dataset_upload", "on_job_request", "on_job_state", "reconcile"]
