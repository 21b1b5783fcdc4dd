"""What Vertex's EndpointService refuses and how it moves an endpoint's traffic split, as pure functions: the
endpoint service (endpoint_service.py) calls them before it changes anything.

Sources (local/FIDELITY.md, "Vertex AI endpoints and online prediction"): googleapis
google/cloud/aiplatform/v1/endpoint_service.proto and endpoint.proto as python-aiplatform ships them
(google/cloud/aiplatform_v1/types/endpoint_service.py, endpoint.py):
- Endpoint.traffic_split: "If a DeployedModel's ID is not listed in this map, then it receives no traffic. The
  traffic percentage values must add up to 100, or map must be empty if the Endpoint is to not accept any traffic".
- DeployModelRequest.traffic_split: "If this field is non-empty, then the Endpoint's traffic_split will be
  overwritten with it. To refer to the ID of the just being deployed Model, a "0" should be used ... If this field
  is empty, then the Endpoint's traffic_split is not updated." An endpoint with no deployed model (so an empty
  split) is the exception here: `gcloud ai endpoints deploy-model` sends no split unless --traffic-split is given,
  and Google's examples then predict at once, so the first model gets all traffic.
- UndeployModelRequest.traffic_split: "If this field is provided, then the Endpoint's traffic_split will be
  overwritten with it. If last DeployedModel is being undeployed from the Endpoint, the [Endpoint.traffic_split]
  will always end up empty ... A DeployedModel will be successfully undeployed only if it doesn't have any traffic
  assigned to it when this method executes, or if this field unassigns any traffic to it."
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

import grpc

from local.jobservice.model_rules import RegistryError, refuse_invalid
from local.jobservice.validation import Problem

ENDPOINT_NAME_RE = re.compile(r"(?P<parent>projects/[^/]+/locations/[^/]+)/endpoints/(?P<id>[^/:@]+)")
# CreateEndpointRequest.endpoint_id: "up to 63 characters, and valid characters are `[a-z0-9-]`. The first
# character cannot be a number or hyphen." (a numeric id is allowed too: the service's own ids are numbers)
ENDPOINT_ID_RE = re.compile(r"[a-z][a-z0-9-]{0,62}|[1-9][0-9]{0,18}")
NEW_MODEL_KEY = "0"  # DeployModelRequest.traffic_split: the model being deployed
UPDATE_FIELDS = ("display_name", "description", "labels", "traffic_split")


def endpoint_name_problem(field: str, name: str) -> Problem | None:
    if ENDPOINT_NAME_RE.fullmatch(name):
        return None
    return field, f"must look like projects/PROJECT/locations/LOCATION/endpoints/ENDPOINT, got {name!r}"


def endpoint_id_problem(endpoint_id: str) -> Problem | None:
    if not endpoint_id or ENDPOINT_ID_RE.fullmatch(endpoint_id):
        return None
    return (
        "endpoint_id",
        f"must be up to 63 characters of [a-z0-9-] starting with a letter, or a number, got {endpoint_id!r}",
    )


DEPLOYED_MODEL_ID_RE = re.compile(r"[0-9]{1,10}")


def deployed_model_id_problem(deployed_model_id: str) -> Problem | None:
    """DeployedModel.id, when the caller chooses it: "1-10 characters, and valid characters are /[0-9]/"
    (endpoint.proto)."""
    if not deployed_model_id or DEPLOYED_MODEL_ID_RE.fullmatch(deployed_model_id):
        return None
    return ("deployed_model.id", f"must be 1-10 digits, got {deployed_model_id!r}")


def split_problems(field: str, split: Mapping[str, int], known: Sequence[str]) -> list[Problem]:
    """An endpoint's split: percentages of known deployed models, each 0-100, adding up to 100 (or empty)."""
    problems: list[Problem] = []
    for key, value in sorted(split.items()):
        if key not in known:
            problems.append((f"{field}[{key}]", f"names no deployed model of the endpoint (deployed: {list(known)})"))
        if not 0 <= value <= 100:
            problems.append((f"{field}[{key}]", f"must be a percentage from 0 to 100, got {value}"))
    if split and sum(split.values()) != 100:
        problems.append((field, f"the percentages must add up to 100, got {sum(split.values())}"))
    return problems


def split_after_deploy(
    current: Mapping[str, int], requested: Mapping[str, int], deployed: Sequence[str], new_id: str
) -> dict[str, int]:
    """The endpoint's split once `new_id` joins the `deployed` models (refused with INVALID_ARGUMENT when
    `requested` is wrong)."""
    if not requested:
        return dict(current) if deployed else {new_id: 100}
    refuse_invalid(split_problems("traffic_split", requested, [*deployed, NEW_MODEL_KEY]))
    return {new_id if key == NEW_MODEL_KEY else key: value for key, value in requested.items()}


def split_after_undeploy(
    current: Mapping[str, int], requested: Mapping[str, int], deployed: Sequence[str], undeployed: str
) -> dict[str, int]:
    """The endpoint's split once `undeployed` is gone, from the deployed models' ids before the call."""
    remaining = [model for model in deployed if model != undeployed]
    if not remaining:
        return {}  # "If last DeployedModel is being undeployed ... will always end up empty"
    if requested:
        refuse_invalid(split_problems("traffic_split", requested, remaining))
        return dict(requested)
    if current.get(undeployed, 0) > 0:
        raise RegistryError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"DeployedModel {undeployed} has {current[undeployed]}% of the endpoint's traffic; give its traffic to "
            "other deployed models (traffic_split in this request, or UpdateEndpoint) before undeploying it.",
        )
    return {key: value for key, value in current.items() if key != undeployed}


def choose_deployed_model(split: Mapping[str, int], draw: random.Random) -> str | None:
    """The deployed model one request goes to, by the split's weights; None when no model takes traffic."""
    weighted = [(key, value) for key, value in sorted(split.items()) if value > 0]
    if not weighted:
        return None
    return draw.choices([key for key, _ in weighted], weights=[value for _, value in weighted])[0]


def update_mask_problems(paths: Sequence[str]) -> list[Problem]:
    if not paths:
        return [("update_mask", f"is required: the fields to change, of {', '.join(UPDATE_FIELDS)}")]
    return [
        ("update_mask", f"the local EndpointService updates only {', '.join(UPDATE_FIELDS)}, not {path!r}")
        for path in paths
        if path not in UPDATE_FIELDS
    ]
