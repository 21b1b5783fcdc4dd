"""What Vertex's ModelService refuses in a request, as (field, message) problems, and how it reads model
names. Pure functions: the registry (model_registry.py) calls them before it changes anything.

Sources (local/FIDELITY.md, "Vertex AI Model Registry"): googleapis google/cloud/aiplatform/v1/
model_service.proto and model.proto as python-aiplatform 2.7.0 ships them, the REST reference of
projects.locations.models, and https://cloud.google.com/vertex-ai/docs/model-registry/model-alias.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import Model, ModelEvaluation, UploadModelRequest

from local.jobservice.validation import PARENT_RE, Problem, vertex_error_text
from schemas.request import MAX_DISPLAY_NAME
from schemas.rules import gs_uri_problem, labels_problems

DEFAULT_ALIAS = "default"
# Model.version_aliases says [a-z][a-zA-Z0-9-]{0,126}[a-z0-9]; MergeVersionAliasesRequest ends in [a-z-0-9];
# the model-alias page says [a-z][a-z0-9-]{0,126}[a-z0-9]. The local registry takes only what all three accept.
ALIAS_RE = re.compile(r"[a-z][a-z0-9-]{0,126}[a-z0-9]")
# UploadModelRequest.model_id: "up to 63 characters, and valid characters are [a-z0-9_-]. The first character
# cannot be a number or hyphen."
MODEL_ID_RE = re.compile(r"[a-z_][a-z0-9_-]{0,62}")
# Vertex's own words for this refusal are not in any stored source; these say the rule and where it comes from.
CONTAINER_SPEC_REQUIRED = (
    "is required: the container that serves the model (image_uri at least); only AutoML models, which UploadModel "
    "does not make, come without one"
)
_MODEL_NAME_RE = re.compile(
    r"(?P<model>(?P<parent>projects/[^/]+/locations/[^/]+)/models/(?P<model_id>[^/@:]+))(?:@(?P<version>[^/@:]+))?"
)


class RegistryError(Exception):
    """A refusal: the gRPC code, the message, and the field violations of an INVALID_ARGUMENT."""

    def __init__(self, code: grpc.StatusCode, message: str, violations: Sequence[Problem] = ()):
        super().__init__(message)
        self.code, self.message, self.violations = code, message, list(violations)


def refuse_invalid(problems: Sequence[Problem | None]) -> None:
    """Raise INVALID_ARGUMENT with Vertex's "List of found errors" text when any problem was found."""
    found = [problem for problem in problems if problem is not None]
    if found:
        raise RegistryError(grpc.StatusCode.INVALID_ARGUMENT, vertex_error_text(found), found)


@dataclass(frozen=True)
class ModelRef:
    """A parsed `projects/P/locations/L/models/M[@VERSION_OR_ALIAS]`."""

    model: str  # the model's resource name, without any version
    parent: str  # projects/P/locations/L
    model_id: str
    version: str  # a version id, an alias, or "" (the default version)

    @property
    def names_version_id(self) -> bool:
        """Version ids are decimal; an alias always starts with a letter (ALIAS_RE)."""
        return self.version.isdigit()


def parse_model_name(name: str) -> ModelRef | None:
    found = _MODEL_NAME_RE.fullmatch(name)
    if found is None:
        return None
    return ModelRef(found["model"], found["parent"], found["model_id"], found["version"] or "")


def model_name_problem(field: str, name: str, versioned: str = "optional") -> Problem | None:
    """The problem with a model name in `field`: `versioned` is "optional" (@version or @alias may follow),
    "never" (a model, no version) or "version id" (`@<version id>` required, as DeleteModelVersion and
    MergeVersionAliases document it)."""
    ref = parse_model_name(name)
    if ref is None:
        return field, f"must look like projects/PROJECT/locations/LOCATION/models/MODEL, got {name!r}"
    if versioned == "never" and ref.version:
        return field, f"names a model, without @version or @alias, got {name!r}"
    if versioned == "version id" and not ref.names_version_id:
        return field, f"must name a version by its id, as projects/P/locations/L/models/MODEL@1, got {name!r}"
    return None


def alias_problem(field: str, alias: str) -> Problem | None:
    if not ALIAS_RE.fullmatch(alias):
        return (
            field,
            f"alias {alias!r} must be 2-128 characters of lowercase letters, digits and '-', starting with a "
            "letter and ending with a letter or digit (so that it can never be read as a version id)",
        )
    return None


def merge_problems(aliases: list[str]) -> list[Problem]:
    """MergeVersionAliasesRequest.version_aliases: each an alias, or `-alias` to remove one."""
    if not aliases:
        return [("version_aliases", "is required: the aliases to add, or to remove with a leading '-'")]
    problems: list[Problem] = []
    for index, entry in enumerate(aliases):
        problem = alias_problem(f"version_aliases[{index}]", entry.removeprefix("-"))
        if problem:
            problems.append(problem)
        elif entry == f"-{DEFAULT_ALIAS}":
            problems.append(
                (
                    f"version_aliases[{index}]",
                    "the default alias cannot be removed: one version carries it at all times; add it to "
                    "another version to move it there",
                )
            )
    return problems


def parent_problem(parent: str) -> Problem | None:
    if PARENT_RE.fullmatch(parent):
        return None
    return "parent", f"must look like projects/PROJECT/locations/LOCATION, got {parent!r}"


def upload_problems(request: UploadModelRequest) -> list[Problem]:
    problems: list[Problem] = []
    problem = parent_problem(request.parent)
    if problem:
        problems.append(problem)
    if request.parent_model:
        problem = model_name_problem("parent_model", request.parent_model, versioned="never")
        ref = parse_model_name(request.parent_model)
        if problem:
            problems.append(problem)
        elif ref is not None and ref.parent != request.parent:
            problems.append(("parent_model", f"must be a model of {request.parent}, got {request.parent_model!r}"))
        if request.model_id:
            problems.append(("model_id", "names a new model; leave it out when uploading a version of parent_model"))
    elif request.model_id and not MODEL_ID_RE.fullmatch(request.model_id):
        problems.append(
            (
                "model_id",
                f"{request.model_id!r} must be 1-63 characters of lowercase letters, digits, '_' and '-', and "
                "must not start with a digit or '-'",
            )
        )
    return problems + model_problems(request.model)


def model_problems(model: Model) -> list[Problem]:
    problems: list[Problem] = []
    if not model.display_name:
        problems.append(("model.display_name", "is required"))
    elif len(model.display_name) > MAX_DISPLAY_NAME:
        problems.append(
            ("model.display_name", f"can be up to {MAX_DISPLAY_NAME} characters long, got {len(model.display_name)}")
        )
    aliases = list(model.version_aliases)
    for index, alias in enumerate(aliases):
        problem = alias_problem(f"model.version_aliases[{index}]", alias)
        if problem:
            problems.append(problem)
        elif alias in aliases[:index]:
            problems.append((f"model.version_aliases[{index}]", f"alias {alias!r} is listed twice"))
    for key, label_problem in labels_problems(dict(model.labels)):
        problems.append((f"model.labels.{key}" if key else "model.labels", label_problem))
    if model.artifact_uri:
        uri_problem = gs_uri_problem(model.artifact_uri)
        if uri_problem:
            problems.append(("model.artifact_uri", uri_problem))
    if "container_spec" not in model:
        # model.proto: Model.container_spec is "Not required for AutoML Models"; UploadModel never makes one (AutoML
        # models come from training pipelines), so every upload needs it (issue 40, point 13).
        problems.append(("model.container_spec", CONTAINER_SPEC_REQUIRED))
    elif not model.container_spec.image_uri:
        problems.append(("model.container_spec.image_uri", "is required when container_spec is given"))
    return problems


# --- names: Vertex answers with the project's number, whichever spelling the request used

ProjectNumbers = Callable[[str], str]


def derived_project_number(project: str) -> str:
    """A stable 12-digit stand-in for a project's number (a real one comes from Resource Manager); a number is
    itself. Vertex takes either spelling in a request and answers with the number: the upload's operation and its
    UploadModelResponse.model, every Model.name and ModelEvaluation.name (the ModelService pages of the Vertex
    documentation, local/FIDELITY.md)."""
    if project.isdigit():
        return project
    return str(10**11 + int(hashlib.sha256(project.encode()).hexdigest(), 16) % (9 * 10**11))


def project_numbers(pinned: Mapping[str, str] | None = None, derive: bool = True) -> ProjectNumbers:
    """How the registry spells a project: `pinned` ids by their number, any other id by derived_project_number
    (or as asked, with derive=False: what the registry did before issue 38)."""
    pins = dict(pinned or {})

    def number(project: str) -> str:
        if project in pins:
            return pins[project]
        return derived_project_number(project) if derive else project

    return number


def with_project_number(name: str, number: ProjectNumbers) -> str:
    """`projects/P/…` with P spelled as the registry answers; any other text as it is."""
    parts = name.split("/", 2)
    if len(parts) >= 2 and parts[0] == "projects" and parts[1]:
        parts[1] = number(parts[1])
    return "/".join(parts)


# --- evaluations: metrics under a schema must be that schema's fields

# The fields of Google's ModelEvaluation metrics schemas trainctl imports under, each with the JSON type it holds
# (classification_metrics_1.0.0.yaml: ClassificationEvaluationMetrics; regression_metrics_1.0.0.yaml:
# RegressionEvaluationMetrics; the aiplatform v1 discovery document's GoogleCloudAiplatformV1SchemaModelevaluation…
# types and the evaluate-model page's responses, local/FIDELITY.md).
_SCHEMA_ROOT = "gs://google-cloud-aiplatform/schema/modelevaluation/"
METRICS_SCHEMAS: dict[str, dict[str, type]] = {
    f"{_SCHEMA_ROOT}classification_metrics_1.0.0.yaml": {
        "auPrc": float,
        "auRoc": float,
        "logLoss": float,
        "confidenceMetrics": list,
        "confusionMatrix": dict,
    },
    f"{_SCHEMA_ROOT}regression_metrics_1.0.0.yaml": {
        "rootMeanSquaredError": float,
        "meanAbsoluteError": float,
        "meanAbsolutePercentageError": float,
        "rSquared": float,
        "rootMeanSquaredLogError": float,
    },
}


def evaluation_problems(evaluation: ModelEvaluation) -> list[Problem]:
    """An evaluation under one of the schemas above whose metrics are not that schema's fields: each entry that is
    not a field of it, or holds the wrong kind of value. Other schemas are not checked (the local registry does not
    know them)."""
    fields = METRICS_SCHEMAS.get(evaluation.metrics_schema_uri)
    if fields is None:
        return []
    metrics: Any = ModelEvaluation.to_dict(evaluation).get("metrics")
    if metrics in (None, {}):
        return []
    if not isinstance(metrics, dict):
        return [("model_evaluation.metrics", f"must be an object of {evaluation.metrics_schema_uri}'s fields")]
    problems: list[Problem] = []
    known = ", ".join(fields)
    for name, value in metrics.items():
        kind = fields.get(name)
        where = f"model_evaluation.metrics.{name}"
        if kind is None:
            problems.append((where, f"is not a field of {evaluation.metrics_schema_uri.rsplit('/', 1)[1]} ({known})"))
        elif kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            problems.append((where, f"must be a number, got {value!r}"))
        elif kind is not float and not isinstance(value, kind):
            problems.append((where, f"must be {'a list' if kind is list else 'an object'}, got {value!r}"))
    return problems
