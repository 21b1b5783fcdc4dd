"""The Vertex SDK's CustomJob example, run against the local stack: only `aiplatform.init` has arguments
added (the endpoint, REST, anonymous credentials, a staging bucket on fake-gcs-server).

    eval "$(trainctl local env)"
    python examples/vertex_sdk/custom_job.py [IMAGE [ARG ...]]

IMAGE defaults to the trainctl trainer image; any image the stack's `--image-map` knows runs.
"""

import os
import sys

from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform

image = sys.argv[1] if len(sys.argv) > 1 else "localhost/trainctl/trainer:latest"
args = sys.argv[2:]

aiplatform.init(
    project=os.environ["CLOUDSDK_CORE_PROJECT"],
    location=os.environ["TRAINCTL_REGION"],
    api_endpoint=os.environ["TRAINCTL_LOCAL_VERTEX_REST_URL"],  # the local JobService's REST port
    api_transport="rest",
    credentials=AnonymousCredentials(),
    staging_bucket=f"gs://{os.environ['TRAINCTL_CONTROL_BUCKET']}",  # a bucket of the stack's fake-gcs-server
)

job = aiplatform.CustomJob(
    display_name="sdk-example",
    worker_pool_specs=[
        {
            "machine_spec": {"machine_type": "g2-standard-24", "accelerator_type": "NVIDIA_L4", "accelerator_count": 2},
            "replica_count": 1,
            "container_spec": {"image_uri": image, "args": args},
        },
        {
            "machine_spec": {"machine_type": "g2-standard-24", "accelerator_type": "NVIDIA_L4", "accelerator_count": 2},
            "replica_count": 1,
            "container_spec": {"image_uri": image, "args": args},
        },
    ],
)
job.run()  # returns once the job has succeeded; raises RuntimeError if it fails or is cancelled
print(job.resource_name, job.state.name)
