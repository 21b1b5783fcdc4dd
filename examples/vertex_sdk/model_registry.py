"""The Vertex SDK's Model Registry calls, run against the local stack's ModelService: only `aiplatform.init`
has arguments added, as in custom_job.py. It uploads a model, then a second version of it as a challenger,
promotes that version (the `champion` alias and `default` move to it), and reads versions by alias.

    eval "$(trainctl local env)"
    python examples/vertex_sdk/model_registry.py [MODEL_ID]
"""

import os
import sys

from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform

model_id = sys.argv[1] if len(sys.argv) > 1 else "churn"
image = "localhost/trainctl/trainer:latest"
artifacts = f"gs://{os.environ['TRAINCTL_CONTROL_BUCKET']}/models/{model_id}"

aiplatform.init(
    project=os.environ["CLOUDSDK_CORE_PROJECT"],
    location=os.environ["TRAINCTL_REGION"],
    api_endpoint=os.environ["TRAINCTL_LOCAL_VERTEX_REST_URL"],  # the local JobService's REST port
    api_transport="rest",
    credentials=AnonymousCredentials(),
)

first = aiplatform.Model.upload(
    model_id=model_id,
    display_name=model_id,
    artifact_uri=f"{artifacts}/1",
    serving_container_image_uri=image,
    version_aliases=["champion"],
)
challenger = aiplatform.Model.upload(
    parent_model=model_id,
    display_name=model_id,
    artifact_uri=f"{artifacts}/2",
    serving_container_image_uri=image,
    is_default_version=False,  # `default` stays on version 1 until the promotion below
    version_aliases=["challenger"],
)

registry = aiplatform.ModelRegistry(model_id)
registry.add_version_aliases(["champion", "default"], version=challenger.version_id)  # moves both
registry.remove_version_aliases(["challenger"], version=challenger.version_id)

for version in registry.list_versions():
    print("version", version.version_id, ",".join(version.version_aliases) or "-")
print("champion", aiplatform.Model(model_id, version="champion").version_id)
print("default", aiplatform.Model(model_id).version_id, aiplatform.Model(f"{model_id}@1").uri)
