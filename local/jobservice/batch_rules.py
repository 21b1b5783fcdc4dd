"""What Vertex's CreateBatchPredictionJob refuses, how a batch job's input URIs and output folder are read, and what
the local JobService runs for a model version's container. Pure functions: batch_jobs.py calls them.

Sources (local/FIDELITY.md, "Vertex AI batch prediction"): googleapis google/cloud/aiplatform/v1/
batch_prediction_job.proto, io.proto and job_service.proto as python-aiplatform ships them (aiplatform_v1.types),
and https://cloud.google.com/storage/docs/wildcards for the wildcards GcsSource.uris "may contain".
"""

from __future__ import annotations

import datetime as dt
import re
import sys

from google.cloud.aiplatform_v1.types import BatchPredictionJob, CreateBatchPredictionJobRequest, Model

from local.jobservice.model_rules import model_name_problem, parse_model_name
from local.jobservice.validation import PARENT_RE, Problem
from schemas.request import MAX_DISPLAY_NAME
from schemas.rules import gs_uri_problem, labels_problems

# InputConfig.instances_format and OutputConfig.predictions_format name one of the Model's
# supported_{input,output}_storage_formats; a custom-trained model's are these (model.proto).
VERTEX_INPUT_FORMATS = ("jsonl", "csv", "tf-record", "tf-record-gzip", "bigquery", "file-list")
VERTEX_OUTPUT_FORMATS = ("jsonl", "csv", "bigquery")
# What the local JobService runs: `python -m trainer.predict` reads CSV (and Parquet, which Vertex has no format for)
# and writes CSV with the instance's columns followed by `prediction` (and `confidence`).
LOCAL_INPUT_FORMATS = ("csv",)
LOCAL_OUTPUT_FORMATS = ("csv",)
# A serving container the local JobService knows how to batch-predict with: the built-in trainer's server
# (functions/models/versions.py, SERVING_COMMAND) and its batch twin, which share trainer.predict.predict_rows.
BATCH_COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("python", "-m", "trainer.serve"): ("python", "-m", "trainer.predict"),
}
# Fields of BatchPredictionJob the local JobService does not imitate: refused, never silently ignored.
NOT_IMITATED = (
    "unmanaged_container_model",
    "instance_config",
    "model_parameters",
    "explanation_spec",
    "encryption_spec",
)
# Output-only fields a caller may send; the service sets them itself.
OUTPUT_ONLY = (
    "name",
    "model_version_id",
    "output_info",
    "state",
    "error",
    "partial_failures",
    "resources_consumed",
    "completion_stats",
    "create_time",
    "start_time",
    "end_time",
    "update_time",
    "satisfies_pzs",
    "satisfies_pzi",
)
WILDCARDS = re.compile(r"[*?\[]")


def create_problems(request: CreateBatchPredictionJobRequest) -> list[Problem]:
    """Every (field, message) CreateBatchPredictionJob refuses with INVALID_ARGUMENT."""
    problems: list[Problem] = []
    if not PARENT_RE.fullmatch(request.parent):
        problems.append(("parent", f"must look like projects/PROJECT/locations/LOCATION, got {request.parent!r}"))
    job = request.batch_prediction_job
    where = "batch_prediction_job"
    if not job.display_name:
        problems.append((f"{where}.display_name", "is required"))
    elif len(job.display_name) > MAX_DISPLAY_NAME:
        problems.append(
            (f"{where}.display_name", f"can be up to {MAX_DISPLAY_NAME} characters, got {len(job.display_name)}")
        )
    for field in NOT_IMITATED:
        if field in job:
            problems.append((f"{where}.{field}", "is not imitated by the local JobService; leave it out"))
    problems += _model_problems(request.parent, job)
    problems += _input_problems(job)
    problems += _output_problems(job)
    if job.generate_explanation:
        # batch_prediction_job.proto, generate_explanation: "csv: Generating explanations for CSV format is not
        # supported"; the local JobService writes CSV only, and has no explanations.
        problems.append((f"{where}.generate_explanation", "explanations are not supported for csv predictions"))
    if "dedicated_resources" in job:
        resources = job.dedicated_resources
        if not resources.machine_spec.machine_type:
            problems.append((f"{where}.dedicated_resources.machine_spec.machine_type", "is required"))
        starting, most = resources.starting_replica_count, resources.max_replica_count
        if starting < 0 or most < 0 or (starting and most and most < starting):
            problems.append(
                (
                    f"{where}.dedicated_resources.max_replica_count",
                    f"must be at least starting_replica_count ({starting}), got {most}",
                )
            )
    for key, problem in labels_problems(dict(job.labels)):
        problems.append((f"{where}.labels.{key}" if key else f"{where}.labels", problem))
    return problems


def _model_problems(parent: str, job: BatchPredictionJob) -> list[Problem]:
    if not job.model:
        return [("batch_prediction_job.model", "is required: the Model (M, M@VERSION_ID or M@ALIAS) to predict with")]
    problem = model_name_problem("batch_prediction_job.model", job.model)
    if problem:
        return [problem]
    ref = parse_model_name(job.model)
    location = parent.split("/")[3] if PARENT_RE.fullmatch(parent) else None
    if ref is not None and location is not None and ref.parent.split("/")[3] != location:
        # batch_prediction_job.proto, model: "must share the same ancestor Location".
        return [("batch_prediction_job.model", f"must be a Model of location {location}, got {job.model!r}")]
    return []


def _input_problems(job: BatchPredictionJob) -> list[Problem]:
    where = "batch_prediction_job.input_config"
    if "input_config" not in job:
        return [(where, "is required")]
    config, problems = job.input_config, []
    problems += _format_problems(
        f"{where}.instances_format", config.instances_format, VERTEX_INPUT_FORMATS, LOCAL_INPUT_FORMATS
    )
    if "gcs_source" not in config:
        other = "bigquery_source" if "bigquery_source" in config else "gcs_source"
        problems.append(
            (f"{where}.{other}", "the local JobService reads instances from Cloud Storage only (gcs_source)")
        )
        return problems
    uris = list(config.gcs_source.uris)
    if not uris:
        problems.append((f"{where}.gcs_source.uris", "is required: at least one gs:// URI (wildcards allowed)"))
    for index, uri in enumerate(uris):
        problem = gs_uri_problem(uri)
        if problem:
            problems.append((f"{where}.gcs_source.uris[{index}]", problem))
    return problems


def _output_problems(job: BatchPredictionJob) -> list[Problem]:
    where = "batch_prediction_job.output_config"
    if "output_config" not in job:
        return [(where, "is required")]
    config = job.output_config
    problems = _format_problems(
        f"{where}.predictions_format", config.predictions_format, VERTEX_OUTPUT_FORMATS, LOCAL_OUTPUT_FORMATS
    )
    if "gcs_destination" not in config:
        problems.append((f"{where}.gcs_destination", "the local JobService writes predictions to Cloud Storage only"))
        return problems
    prefix = config.gcs_destination.output_uri_prefix
    problem = gs_uri_problem(prefix) if prefix else "is required: the gs:// folder the predictions go under"
    if problem:
        problems.append((f"{where}.gcs_destination.output_uri_prefix", problem))
    return problems


def _format_problems(field: str, given: str, vertex: tuple[str, ...], local: tuple[str, ...]) -> list[Problem]:
    if not given:
        return [(field, f"is required: one of {', '.join(local)}")]
    if given not in vertex:
        return [(field, f"{given!r} is not a format Vertex AI knows ({', '.join(vertex)})")]
    if given not in local:
        return [(field, f"{given!r} is not imitated by the local JobService, which takes {', '.join(local)}")]
    return []


def output_directory(prefix: str, model_display_name: str, create_time: dt.datetime) -> str:
    """OutputConfig.gcs_destination: "In the given directory a new directory is created. Its name is
    prediction-<model-display-name>-<job-create-time>, where timestamp is in YYYY-MM-DDThh:mm:ss.sssZ ISO-8601
    format"; GcsDestination.output_uri_prefix: "If the uri doesn't end with '/', a '/' will be automatically
    appended"."""
    stamp = create_time.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return f"{prefix.rstrip('/')}/prediction-{model_display_name}-{stamp}"


def predictions_file(directory: str, index: int, extension: str) -> str:
    """The index-th (from 1) predictions file: "files predictions_0001.<extension>, predictions_0002.<extension>,
    ..., predictions_N.<extension> are created"."""
    return f"{directory}/predictions_{index:04d}.{extension}"


def has_wildcard(uri: str) -> bool:
    return WILDCARDS.search(uri) is not None


def wildcard_prefix(pattern: str) -> str:
    """The object-name prefix every match of a `gs://bucket/…` pattern starts with (what a listing asks for)."""
    path = pattern.split("/", 3)[3] if pattern.count("/") >= 3 else ""
    found = WILDCARDS.search(path)
    return path[: found.start()] if found else path


def wildcard_matcher(pattern: str) -> re.Pattern[str]:
    """Cloud Storage's wildcards over object names: `*` any characters up to the next '/', `**` any characters at all,
    `?` one character, `[chars]` one of them."""
    path = pattern.split("/", 3)[3] if pattern.count("/") >= 3 else ""
    out, index = [], 0
    while index < len(path):
        char = path[index]
        if path.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in path[index + 1 :]:
            end = path.index("]", index + 1)
            out.append(f"[{re.escape(path[index + 1 : end])}]")
            index = end + 1
            continue
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out))


def batch_command(model: Model) -> list[str] | None:
    """What the local JobService runs for a version's serving container (the interpreter for `python`, as a node's
    command); None for a container it cannot batch-predict with."""
    command = BATCH_COMMANDS.get(tuple(model.container_spec.command))
    if command is None:
        return None
    return [sys.executable, *command[1:]]
