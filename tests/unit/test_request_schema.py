"""TrainingJobRequest: every rule rejects with its field path, defaults fill in, arbitrary input never crashes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.untrusted.documents import load_document
from schemas.errors import RequestInvalid, parse_request
from schemas.export import request_schema
from schemas.trainer_env import ENV_RULES
from tests.unit.conftest import BASE_REQUEST

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples").glob("*.*"))

VALID = BASE_REQUEST


def with_changes(**changes: Any) -> dict[str, Any]:
    """VALID with dotted-path changes applied; a value of DELETE removes the key."""
    request = copy.deepcopy(VALID)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = request
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return request


DELETE = object()

# (request, the field path that must be named, words the message must contain)
INVALID = [
    (with_changes(api_version="trainctl/v2"), "api_version", "trainctl/v1"),
    (with_changes(request_id=DELETE), "request_id", "required"),
    (with_changes(request_id="Churn"), "request_id", "lowercase"),
    (with_changes(request_id="-churn"), "request_id", "starting with a letter or digit"),
    (with_changes(request_id="a" * 129), "request_id", "1-128"),
    (with_changes(request_id="churn/1"), "request_id", "lowercase"),
    (with_changes(display_name="x" * 129), "display_name", "at most 128"),
    (with_changes(display_name="line\nbreak"), "display_name", "control characters"),
    (with_changes(surprise=1), "surprise", "unknown field"),
    (with_changes(dataset__uri="s3://bucket/data"), "dataset.uri", "gs://bucket/path"),
    (with_changes(dataset__uri="gs://Bad_Bucket/data"), "dataset.uri", "lowercase"),
    (with_changes(dataset__uri="gs://ab/data"), "dataset.uri", "3-63 characters"),
    (with_changes(dataset__uri="gs://b/data"), "dataset.uri", "3-63 characters"),
    (with_changes(dataset__uri="gs://google-data/x"), "dataset.uri", "google"),
    (with_changes(dataset__uri="gs://192.168.1.1/x"), "dataset.uri", "IP address"),
    (with_changes(dataset__uri="gs://data-bucket/a/../b"), "dataset.uri", "'..'"),
    (with_changes(dataset__uri="gs://data-bucket/a\x00b"), "dataset.uri", "control characters"),
    (with_changes(dataset__target=DELETE), "dataset.target", "required"),
    (with_changes(dataset__format="xlsx"), "dataset.format", "'csv'"),
    (with_changes(dataset__validation_fraction=1.0), "dataset.validation_fraction", "less than 1"),
    (with_changes(dataset__extra="x"), "dataset.extra", "unknown field"),
    (with_changes(trainer={}), "trainer", "exactly one of"),
    (with_changes(trainer={"builtin": "tabular", "image": "gcr.io/p/i:1"}), "trainer", "exactly one of"),
    (with_changes(trainer={"builtin": "vision"}), "trainer.builtin", "'tabular'"),
    (with_changes(trainer={"builtin": "tabular", "command": ["x"]}), "trainer.command", "only with a custom"),
    (with_changes(trainer={"image": "gcr.io/p/i:1", "hyperparameters": {}}), "trainer.hyperparameters", "only"),
    (with_changes(trainer={"image": "not an image"}), "trainer.image", "container image URI"),
    (with_changes(trainer={"image": "gcr.io/p/i:1", "env": {"1BAD": "x"}}), "trainer.env", "C identifier"),
    (with_changes(trainer={"image": "gcr.io/p/i:1", "env": {"MASTER_ADDR": "x"}}), "trainer.env", "set by Vertex"),
    (
        with_changes(trainer={"image": "gcr.io/p/i:1", "env": {f"V{i}": "x" for i in range(101)}}),
        "trainer.env",
        "at most 100",
    ),
    (
        with_changes(trainer={"builtin": "tabular", "hyperparameters": {"epochs": 0}}),
        "trainer.hyperparameters.epochs",
        "greater than or equal to 1",
    ),
    (
        with_changes(trainer={"builtin": "tabular", "hyperparameters": {"learning_rate": "fast"}}),
        "trainer.hyperparameters.learning_rate",
        "valid number",
    ),
    (
        with_changes(trainer={"builtin": "tabular", "hyperparameters": {"hidden_sizes": []}}),
        "trainer.hyperparameters.hidden_sizes",
        "at least 1",
    ),
    (
        with_changes(trainer={"builtin": "tabular", "hyperparameters": {"epochs": "10"}}),
        "trainer.hyperparameters.epochs",
        "valid integer",
    ),
    (with_changes(dataset__target=5), "dataset.target", "valid string"),
    (
        with_changes(scheduling={"restart_job_on_worker_restart": "yes"}),
        "scheduling.restart_job_on_worker_restart",
        "valid boolean",
    ),
    (with_changes(resources__replica_count=2.0), "resources.replica_count", "valid integer"),
    (with_changes(resources__machine_type="e2-standard-8"), "resources.machine_type", "unknown machine type"),
    (
        with_changes(resources__accelerator_count=4),
        "resources.accelerator_count",
        "a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 4",
    ),
    (with_changes(resources__accelerator_type="NVIDIA_L4"), "resources.accelerator_type", "does not take NVIDIA_L4"),
    (with_changes(resources={"machine_type": "n1-standard-8"}), "resources.accelerator_type", "no built-in GPUs"),
    (
        with_changes(resources={"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4"}),
        "resources.accelerator_count",
        "valid counts: 1, 2, 4",
    ),
    (
        with_changes(
            resources={"machine_type": "n1-highcpu-16", "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 1}
        ),
        "resources.accelerator_count",
        "takes 2, 4, 8",
    ),
    (with_changes(resources={"machine_type": "g2-standard-8"}), "resources.accelerator_count", "at least 2 GPUs"),
    (with_changes(resources__replica_count=0), "resources.replica_count", "greater than or equal to 1"),
    (with_changes(resources__boot_disk={"size_gb": 50}), "resources.boot_disk.size_gb", "100"),
    (with_changes(reduction_server={"mode": "sometimes"}), "reduction_server.mode", "'auto'"),
    (
        with_changes(reduction_server={"mode": "off", "replica_count": 4}),
        "reduction_server.replica_count",
        "only with mode",
    ),
    (with_changes(reduction_server={"mode": "on"}), "reduction_server.mode", "multi-node"),
    (
        with_changes(resources={"machine_type": "a3-highgpu-8g", "replica_count": 2}, reduction_server={"mode": "on"}),
        "reduction_server.mode",
        "GPUDirect",
    ),
    (with_changes(scheduling={"strategy": "preemptible"}), "scheduling.strategy", "'spot'"),
    (
        with_changes(
            resources={"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2},
            scheduling={"strategy": "flex_start"},
        ),
        "scheduling.strategy",
        "flex_start needs",
    ),
    (with_changes(scheduling={"timeout": "8d"}), "scheduling.timeout", "at most 7 days"),
    (with_changes(scheduling={"timeout": 0}), "scheduling.timeout", "positive"),
    (with_changes(scheduling={"timeout": "soon"}), "scheduling.timeout", "not a duration"),
    (with_changes(scheduling={"max_pending": -5}), "scheduling.max_pending", "positive"),
    (with_changes(scheduling={"max_attempts": 11}), "scheduling.max_attempts", "less than or equal to 10"),
    (with_changes(output_dir="/tmp/out"), "output_dir", "gs://bucket/path"),
    (with_changes(labels={"Team": "x"}), "labels.Team", "starting with a lowercase letter"),
    (with_changes(labels={"team": "Growth"}), "labels.team", "value 'Growth'"),
    (with_changes(labels={"k" * 64: "x"}), "labels." + "k" * 64, "1-63"),
    (with_changes(labels={"managed-by": "me"}), "labels.managed-by", "set by trainctl"),
    (with_changes(labels={"trainctl_key": "k"}), "labels.trainctl_key", "set by trainctl"),
    (with_changes(labels={"trainctl-key": "k"}), "labels.trainctl-key", "set by trainctl"),  # jobs before issue 25
    (with_changes(labels={f"k{i}": "v" for i in range(61)}), "labels", "at most 60"),
    (with_changes(service_account="root"), "service_account", "service account email"),
]


@pytest.mark.parametrize(("request_doc", "path", "words"), INVALID, ids=[f"{p}:{w}" for _, p, w in INVALID])
def test_invalid_request_is_rejected_naming_the_field(request_doc, path, words):
    with pytest.raises(RequestInvalid) as caught:
        parse_request(request_doc)
    named = [e for e in caught.value.errors if e.path == path]
    assert named, f"no error for {path}: {[str(e) for e in caught.value.errors]}"
    assert any(words in e.message for e in named), [str(e) for e in named]


def env_errors(env: dict[str, str]) -> list[str]:
    """The trainer.env errors of a custom-image request setting `env`."""
    try:
        parse_request(with_changes(trainer={"image": "gcr.io/p/i:1", "env": env}))
    except RequestInvalid as caught:
        return [e.message for e in caught.errors if e.path == "trainer.env"]
    return []


# (name, the rule it breaks, words of the reason): each rule of schemas/trainer_env.py, and case variants.
REFUSED_ENV = [
    ("AIP_MODEL_DIR", "AIP_*", "set by Vertex AI"),
    ("CLOUD_ML_PROJECT_ID", "CLOUD_ML_*", "set by Vertex AI"),
    ("CLUSTER_SPEC", "CLUSTER_SPEC", "set by Vertex AI"),
    ("TF_CONFIG", "TF_CONFIG", "set by Vertex AI"),
    ("MASTER_ADDR", "MASTER_*", "set by Vertex AI"),
    ("MASTER_PORT", "MASTER_*", "set by Vertex AI"),
    ("WORLD_SIZE", "WORLD_SIZE", "set by Vertex AI"),
    ("RANK", "RANK", "set by Vertex AI"),
    ("rank", "RANK", "set by Vertex AI"),
    ("LOCAL_RANK", "LOCAL_RANK", "set by torchrun"),
    ("GROUP_RANK", "GROUP_RANK", "set by torchrun"),
    ("LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "set by torchrun"),
    ("GROUP_WORLD_SIZE", "GROUP_WORLD_SIZE", "set by torchrun"),
    ("ROLE_NAME", "ROLE_*", "set by torchrun"),
    ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_*", "set by torchrun"),
    ("TRAINCTL_LOCAL_PROCS_PER_NODE", "TRAINCTL_*", "belongs to trainctl"),
    ("LD_PRELOAD", "LD_*", "loads code into every process"),
    ("LD_LIBRARY_PATH", "LD_*", "loads code into every process"),
    ("ld_preload", "LD_*", "loads code into every process"),
    ("GCONV_PATH", "GCONV_PATH", "loads code into every process"),
    ("PYTHONPATH", "PYTHON*", "changes which Python code runs"),
    ("PYTHONSTARTUP", "PYTHON*", "changes which Python code runs"),
    ("PATH", "PATH", "which program a command name runs"),
    ("HOME", "HOME", "user site-packages"),
    ("BASH_ENV", "BASH_ENV", "a shell runs"),
    ("ENV", "ENV", "a shell runs"),
    ("SHELLOPTS", "SHELLOPTS", "bash run code"),
    ("BASHOPTS", "BASHOPTS", "bash run code"),
    ("PS4", "PS4", "bash run code"),
    ("NODE_OPTIONS", "NODE_OPTIONS", "Node.js load extra code"),
    ("NODE_PATH", "NODE_PATH", "Node.js modules"),
    ("JAVA_TOOL_OPTIONS", "JAVA_TOOL_OPTIONS", "JVM load extra code"),
    ("_JAVA_OPTIONS", "_JAVA_OPTIONS", "JVM load extra code"),
    ("JDK_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JVM load extra code"),
    ("CLASSPATH", "CLASSPATH", "Java classes"),
    ("PERL5LIB", "PERL5LIB", "Perl code"),
    ("PERLLIB", "PERLLIB", "Perl code"),
    ("PERL5OPT", "PERL5OPT", "Perl load extra code"),
    ("RUBYLIB", "RUBYLIB", "Ruby code"),
    ("RUBYOPT", "RUBYOPT", "Ruby load extra code"),
    ("OPENSSL_CONF", "OPENSSL_*", "OpenSSL"),
    ("NCCL_NET_PLUGIN", "NCCL_*PLUGIN*", "plugin library"),
    ("NCCL_TUNER_PLUGIN", "NCCL_*PLUGIN*", "plugin library"),
    ("TORCH_HOME", "TORCH*", "PyTorch loads code"),
    ("TORCHINDUCTOR_CACHE_DIR", "TORCH*", "PyTorch loads code"),
    ("TRITON_CACHE_DIR", "TRITON_*", "Triton loads compiled kernels"),
    ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_*", "Google credentials"),
    ("google_cloud_project", "GOOGLE_*", "Google credentials"),
    ("CLOUDSDK_CONFIG", "CLOUDSDK_*", "gcloud"),
    ("GCE_METADATA_HOST", "GCE_METADATA_*", "another metadata server"),
    ("GCE_METADATA_IP", "GCE_METADATA_*", "another metadata server"),
    ("STORAGE_EMULATOR_HOST", "*_EMULATOR_HOST", "to another host"),
    ("PUBSUB_EMULATOR_HOST", "*_EMULATOR_HOST", "to another host"),
    ("HTTPS_PROXY", "*_PROXY", "network traffic through another host"),
    ("http_proxy", "*_PROXY", "network traffic through another host"),
    ("All_Proxy", "*_PROXY", "network traffic through another host"),
    ("SSL_CERT_FILE", "SSL_CERT_FILE", "TLS certificate authorities"),
    ("SSL_CERT_DIR", "SSL_CERT_DIR", "TLS certificate authorities"),
    ("REQUESTS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "TLS certificate authorities"),
    ("CURL_CA_BUNDLE", "CURL_CA_BUNDLE", "TLS certificate authorities"),
    ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "TLS certificate authorities"),
    ("NODE_EXTRA_CA_CERTS", "NODE_EXTRA_CA_CERTS", "TLS certificate authorities"),
    ("SSLKEYLOGFILE", "SSLKEYLOGFILE", "TLS session keys"),
    # Issue 40, point 6: caches code is loaded from, and the tools that fetch code.
    ("PYTORCH_KERNEL_CACHE_PATH", "PYTORCH_*", "compiled kernels"),
    ("PYTORCH_JIT", "PYTORCH_*", "compiled kernels"),
    ("TMPDIR", "TMPDIR", "torchinductor_"),
    ("TEMP", "TEMP", "tempfile"),
    ("tmp", "TMP", "tempfile"),
    ("XDG_CACHE_HOME", "XDG_*", "pip.conf"),
    ("XDG_CONFIG_HOME", "XDG_*", "credentials"),
    ("PIP_INDEX_URL", "PIP_*", "where pip installs code from"),
    ("pip_extra_index_url", "PIP_*", "where pip installs code from"),
    ("UV_INDEX_URL", "UV_*", "where uv installs code from"),
    ("HF_ENDPOINT", "HF_*", "remote code"),
    ("HF_HOME", "HF_*", "remote code"),
    ("HUGGINGFACE_HUB_CACHE", "HUGGINGFACE_*", "older spelling"),
    ("TRANSFORMERS_CACHE", "TRANSFORMERS_*", "model cache"),
    ("GIT_SSH_COMMAND", "GIT_*", "run other programs"),
    ("CC", "CC", "C compiler"),
    ("CXX", "CXX", "C++ compiler"),
    ("NETRC", "NETRC", "credentials"),
    ("CURL_HOME", "CURL_HOME", "curl read another configuration"),
]


@pytest.mark.parametrize(("name", "rule", "words"), REFUSED_ENV)
def test_trainer_env_may_not_change_what_runs_or_whom_the_job_trusts(name, rule, words):
    """Guards issue 24, point 3: names the platform sets, and names that load code or move trust, are refused
    naming trainer.env, the variable and the rule it breaks (in any case: `http_proxy` is honoured in lower
    case)."""
    [error] = env_errors({"MY_FLAG": "1", name: "x"})
    case = "" if name == name.upper() else ", in any case"
    assert error.startswith(f"{name!r} may not be set (rule {rule}{case}): it "), error
    assert words in error, error


def test_every_env_rule_is_exercised_and_every_refused_name_is_reported():
    """Guards issue 24, point 3: the table is the whole policy, so each of its rules has a case above; a request
    with several refused names hears about each of them at once."""
    exercised = {rule for _, rule, _ in REFUSED_ENV}
    assert [rule.pattern for rule in ENV_RULES if rule.pattern not in exercised] == []
    errors = env_errors({"LD_PRELOAD": "/gcs/data/evil.so", "RANK": "0", "OK_NAME": "1"})
    assert len(errors) == 1 and "'LD_PRELOAD'" in errors[0] and "'RANK'" in errors[0] and "OK_NAME" not in errors[0]


@pytest.mark.parametrize(
    "name",
    [
        "MY_FLAG", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
        "WANDB_MODE", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "TORCH_DISTRIBUTED_DEBUG", "MY_PATH",
        "PROXY_URL", "ENVIRONMENT", "HOMEDIR", "RANKING_K", "my_rank", "_PRIVATE", "PYTORCH_CUDA_ALLOC_CONF",
        "HF_TOKEN", "TMPDIR_NAME", "CCACHE_OFF", "XDGX", "GITHUB_SHA", "CUDA_CACHE_DISABLE",
    ],
)  # fmt: skip
def test_ordinary_trainer_env_names_stay_allowed(name):
    """Guards issue 24, point 3: the rules refuse what the platform owns and what moves code or trust, not the
    names a training job sets for itself."""
    assert env_errors({name: "1"}) == []


def test_the_invalid_cases_are_each_built_on_a_valid_request():
    parse_request(VALID)  # each case is VALID with one change, so the change is what gets rejected


def test_valid_request_gets_defaults_from_the_catalog_and_schema():
    request = parse_request(VALID)
    assert request.resources.accelerator_type == "NVIDIA_TESLA_A100"
    assert request.resources.accelerator_count == 2
    assert request.resources.total_gpus == 2
    assert request.reduction_server.mode == "auto"
    assert request.scheduling.timeout == 24 * 3600
    assert request.scheduling.restart_job_on_worker_restart is True


def test_durations_accept_strings_and_seconds():
    request = parse_request(with_changes(scheduling={"timeout": "1h30m", "max_pending": 600}))
    assert request.scheduling.timeout == 5400
    assert request.scheduling.max_pending == 600


def test_multi_node_counts_gpus_across_nodes():
    request = parse_request(with_changes(resources={"machine_type": "g2-standard-8", "replica_count": 2}))
    assert request.resources.total_gpus == 2


def test_several_problems_are_all_reported():
    doc = with_changes(request_id="BAD", dataset__uri="http://x", resources__accelerator_count=3)
    with pytest.raises(RequestInvalid) as caught:
        parse_request(doc)
    assert {e.path for e in caught.value.errors} == {"request_id", "dataset.uri", "resources.accelerator_count"}


def test_a_non_mapping_document_is_rejected_plainly():
    with pytest.raises(RequestInvalid, match="mapping"):
        parse_request(["not", "a", "request"])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid_and_matches_the_checked_in_json_schema(path):
    document = load_document(path.read_bytes())
    parse_request(document)
    schema = json.loads(Path(__file__).parents[2].joinpath("schemas/training_job.schema.json").read_text())
    jsonschema.validate(document, schema)


def test_examples_cover_the_documented_kinds():
    requests = [parse_request(load_document(p.read_bytes())) for p in EXAMPLES]
    assert any(r.trainer.builtin == "tabular" and r.resources.accelerator_type == "NVIDIA_TESLA_A100" for r in requests)
    assert any(r.resources.replica_count >= 4 for r in requests)
    assert any(r.scheduling.strategy == "spot" for r in requests)
    assert any(r.trainer.image for r in requests)
    assert {p.suffix for p in EXAMPLES} >= {".yaml", ".json"}


def test_json_schema_rejects_what_the_model_rejects_structurally():
    schema = request_schema()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(with_changes(surprise=1), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(with_changes(trainer={}), schema)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
# Mostly-valid requests with one part replaced by arbitrary JSON reach the deeper validators.
request_keys = st.sampled_from([*sorted(VALID), "labels", "scheduling", "reduction_server", "output_dir"])


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_arbitrary_json_only_ever_raises_request_invalid(value):
    try:
        parse_request(value)
    except RequestInvalid as exc:
        assert exc.errors and all(str(e) for e in exc.errors)


@settings(max_examples=300, deadline=None)
@given(key=request_keys, value=json_values)
def test_one_arbitrary_field_only_ever_raises_request_invalid(key, value):
    try:
        parse_request({**VALID, key: value})
    except RequestInvalid as exc:
        assert exc.errors and all(str(e) for e in exc.errors)
