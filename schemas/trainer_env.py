"""What `trainer.env` may not set (issue 24, point 3): the names the platform sets on every node, and the names
that change which code runs or whom the job trusts. One table, quoted by SECURITY.md and README.md.

What Vertex itself reserves: nothing beyond the name's form. `EnvVar.name` "Must be a valid C identifier"
(googleapis google/cloud/aiplatform/v1/env_var.proto) and a container takes at most 100 (custom_job.proto,
ContainerSpec.env). The legacy AI Platform API refused names starting with `AIP_` (ml/v1 `GoogleCloudMlV1__EnvVar`:
"must not begin with the prefix `AIP_`"); Vertex documents instead what it sets on every node: `AIP_MODEL_DIR`,
`AIP_CHECKPOINT_DIR`, `AIP_TENSORBOARD_LOG_DIR` and the other `AIP_*`, `CLOUD_ML_JOB_ID`, `CLOUD_ML_PROJECT_ID`,
`CLUSTER_SPEC`, `TF_CONFIG`, and for PyTorch `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK` (training
"code-requirements" and "distributed-training" pages; python-aiplatform
`google/cloud/aiplatform/training_utils/environment_variables.py`; reference/vertex.md §2). A request's own value
would be set beside Vertex's, so trainctl refuses those names itself. torchrun then sets, for each process,
`RANK`, `GROUP_RANK`, `ROLE_RANK`, `ROLE_NAME`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `WORLD_SIZE`, `GROUP_WORLD_SIZE`,
`ROLE_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and `TORCHELASTIC_*` (torch 2.x
`torch/distributed/elastic/agent/server/local_elastic_agent.py`, `_start_workers`).

Names match in any case: `http_proxy` is honoured in lower case (curl reads only the lower-case one), and a name
refused in one case has no honest use in another. The first rule that matches gives the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class EnvRule:
    pattern: str  # a name, NAME_*, *_NAME or NAME_*_NAME, in upper case
    reason: str  # completes "it …"


_VERTEX = "is set by Vertex AI on every node"
_TORCHRUN = "is set by torchrun for each training process"
_LOADS_CODE = "loads code into every process"
_TLS_TRUST = "chooses which TLS certificate authorities the job trusts"
_CACHES_CODE = "chooses the temporary folder, where compiled code is cached and loaded from"

ENV_RULES: tuple[EnvRule, ...] = (
    # The platform: Vertex AI, torchrun and trainctl own these; a request's value would break or redirect the job.
    EnvRule("AIP_*", f"{_VERTEX} (its output folders and services)"),
    EnvRule("CLOUD_ML_*", f"{_VERTEX} (the job and the project it runs for)"),
    EnvRule("CLUSTER_SPEC", f"{_VERTEX} (the job's cluster)"),
    EnvRule("TF_CONFIG", f"{_VERTEX} (the job's cluster)"),
    EnvRule("MASTER_*", f"{_VERTEX} (where the nodes meet: another value sends collectives to another host)"),
    EnvRule("WORLD_SIZE", f"{_VERTEX} (the number of nodes)"),
    EnvRule("RANK", f"{_VERTEX} (this node's index)"),
    EnvRule("LOCAL_RANK", _TORCHRUN),
    EnvRule("GROUP_RANK", _TORCHRUN),
    EnvRule("LOCAL_WORLD_SIZE", _TORCHRUN),
    EnvRule("GROUP_WORLD_SIZE", _TORCHRUN),
    EnvRule("ROLE_*", _TORCHRUN),
    EnvRule("TORCHELASTIC_*", _TORCHRUN),
    EnvRule("TRAINCTL_*", "belongs to trainctl (its launcher and the local stack read TRAINCTL_*)"),
    # Code: what a process loads or runs besides the image's entry point. Files in /gcs/<bucket>/ (Vertex mounts
    # every bucket the job can read) are written by data uploaders, so a path here can name their code.
    EnvRule("LD_*", f"{_LOADS_CODE} (the dynamic loader reads LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT …)"),
    EnvRule("GCONV_PATH", f"{_LOADS_CODE} (the C library's character-set modules)"),
    EnvRule("PYTHON*", "changes which Python code runs (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE …)"),
    EnvRule("PATH", "chooses which program a command name runs"),
    EnvRule(
        "HOME",
        "is where Python loads user site-packages (whose .pth files run code) and tools read their "
        "configuration and credentials",
    ),
    EnvRule("BASH_ENV", "names a file that a shell runs when it starts"),
    EnvRule("ENV", "names a file that a shell runs when it starts"),
    EnvRule("SHELLOPTS", "makes bash run code from the environment (xtrace expands PS4 before every command)"),
    EnvRule("BASHOPTS", "makes bash run code from the environment (xtrace expands PS4 before every command)"),
    EnvRule("PS4", "makes bash run code from the environment (xtrace expands PS4 before every command)"),
    EnvRule("NODE_OPTIONS", "makes Node.js load extra code (--require)"),
    EnvRule("NODE_PATH", "changes which Node.js modules load"),
    EnvRule("JAVA_TOOL_OPTIONS", "makes the JVM load extra code (an agent)"),
    EnvRule("_JAVA_OPTIONS", "makes the JVM load extra code (an agent)"),
    EnvRule("JDK_JAVA_OPTIONS", "makes the JVM load extra code (an agent)"),
    EnvRule("CLASSPATH", "changes which Java classes load"),
    EnvRule("PERL5LIB", "changes which Perl code loads"),
    EnvRule("PERLLIB", "changes which Perl code loads"),
    EnvRule("PERL5OPT", "makes Perl load extra code"),
    EnvRule("RUBYLIB", "changes which Ruby code loads"),
    EnvRule("RUBYOPT", "makes Ruby load extra code"),
    EnvRule("OPENSSL_*", "makes OpenSSL read another configuration, which loads modules (code) and sets trust"),
    EnvRule("NCCL_*PLUGIN*", f"{_LOADS_CODE} that uses NCCL (a NET, tuner, profiler or env plugin library)"),
    EnvRule(
        "TORCH*",
        "changes where PyTorch loads code from (hub models, compiled extensions and kernels) and how "
        "its collectives behave",
    ),
    EnvRule("TRITON_*", "changes where Triton loads compiled kernels and libraries from"),
    # TORCH* does not cover PYTORCH_*: PYTORCH_KERNEL_CACHE_PATH names where the CUDA kernels ATen compiles at run
    # time are cached and loaded from (ATen/native/cuda/jit_utils.cpp), and PYTORCH_JIT_* changes TorchScript.
    EnvRule("PYTORCH_*", "changes where PyTorch caches and loads compiled kernels from, and how it compiles code"),
    # Issue 40, point 6: the folders code is cached in and loaded from, and the tools that fetch code.
    EnvRule(
        "TMPDIR",
        f"{_CACHES_CODE}: Python's tempfile uses it, and torch.compile keeps its compiled kernels in "
        "<temp>/torchinductor_<user> (torch/_inductor/runtime/cache_dir_utils.py) and loads them from there",
    ),
    EnvRule("TEMP", f"{_CACHES_CODE}: Python's tempfile reads it when TMPDIR is unset, as TMPDIR"),
    EnvRule("TMP", f"{_CACHES_CODE}: Python's tempfile reads it when TMPDIR and TEMP are unset, as TMPDIR"),
    EnvRule(
        "XDG_*",
        "moves the folders tools read their configuration (pip.conf, gcloud's), credentials and caches from "
        "(XDG Base Directory: XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_DATA_HOME …; the torch hub and Hugging Face "
        "caches live under XDG_CACHE_HOME)",
    ),
    EnvRule("PIP_*", "changes where pip installs code from (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_CONFIG_FILE …)"),
    EnvRule("UV_*", "changes where uv installs code from (UV_INDEX_URL, UV_EXTRA_INDEX_URL, UV_CONFIG_FILE …)"),
    EnvRule(
        "HF_*",
        "changes where Hugging Face libraries download models and datasets from and cache them (HF_ENDPOINT, "
        "HF_HOME, HF_HUB_CACHE …): a model's files can be pickles or remote code, which run when loaded",
    ),
    EnvRule("HUGGINGFACE_*", "is the older spelling of HF_* (HUGGINGFACE_HUB_CACHE …), read as HF_* is"),
    EnvRule("TRANSFORMERS_*", "moves the transformers library's model cache (TRANSFORMERS_CACHE), as HF_HUB_CACHE"),
    EnvRule("GIT_*", "makes git run other programs or read another configuration (GIT_SSH_COMMAND, GIT_CONFIG_* …)"),
    EnvRule("CC", "names the C compiler that Triton and build tools run"),
    EnvRule(
        "CXX",
        "names the C++ compiler that torch.compile and PyTorch's extensions run (torch/_inductor/cpp_builder.py, "
        "torch/utils/cpp_extension.py read CXX)",
    ),
    # Trust: where the job's credentials come from and whom its network traffic reaches.
    EnvRule("GOOGLE_*", "chooses the job's Google credentials, project or API endpoints"),
    EnvRule("CLOUDSDK_*", "configures gcloud: its account, credentials and endpoints"),
    EnvRule(
        "GCE_METADATA_*",
        "points Google's auth libraries at another metadata server, where the job's credentials come from",
    ),
    EnvRule("*_EMULATOR_HOST", "sends a Google client's calls, and the data in them, to another host"),
    EnvRule("*_PROXY", "routes the job's network traffic through another host"),
    EnvRule("SSL_CERT_FILE", _TLS_TRUST),
    EnvRule("SSL_CERT_DIR", _TLS_TRUST),
    EnvRule("REQUESTS_CA_BUNDLE", _TLS_TRUST),
    EnvRule("CURL_CA_BUNDLE", _TLS_TRUST),
    EnvRule("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", _TLS_TRUST),
    EnvRule("NODE_EXTRA_CA_CERTS", _TLS_TRUST),
    EnvRule("SSLKEYLOGFILE", "writes the job's TLS session keys to a file"),
    EnvRule("NETRC", "names the file of credentials (~/.netrc) that requests, curl and pip send to hosts"),
    EnvRule("CURL_HOME", "makes curl read another configuration (.curlrc: proxies, trust, credentials)"),
)

# Names a broad rule above would refuse that change neither which code runs nor whom the job trusts, and that
# people set for good reasons: output buffering, no .pyc files, a fixed hash seed, tracebacks on a crash,
# torch.distributed's own debug checks, the CUDA caching allocator's settings (PYTORCH_CUDA_ALLOC_CONF chooses
# among PyTorch's own allocators and sizes; a pluggable allocator is loaded from Python, not from this), and the
# requester's own Hugging Face token (it authenticates the job to the Hub as the requester and moves nothing: give
# it in `trainer.secret_env`, and its value never enters a record).
ENV_ALLOWED: frozenset[str] = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER",
        "TORCH_DISTRIBUTED_DEBUG",
        "PYTORCH_CUDA_ALLOC_CONF",
        "HF_TOKEN",
    }
)


def env_rule(name: str) -> EnvRule | None:
    """The rule that refuses `name`, or None when a request may set it."""
    if name in ENV_ALLOWED:
        return None
    upper = name.upper()
    return next((rule for rule in ENV_RULES if fnmatchcase(upper, rule.pattern)), None)


def env_name_problem(name: str) -> str | None:
    """Why `trainer.env` may not set `name`, naming the rule, or None."""
    rule = env_rule(name)
    if rule is None:
        return None
    case = ", in any case" if name != name.upper() else ""
    return f"{name!r} may not be set (rule {rule.pattern}{case}): it {rule.reason}"
