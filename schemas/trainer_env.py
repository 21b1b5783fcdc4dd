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
)

# Names a broad rule above would refuse that change neither which code runs nor whom the job trusts, and that
# people set for good reasons: output buffering, no .pyc files, a fixed hash seed, tracebacks on a crash, and
# torch.distributed's own debug checks.
ENV_ALLOWED: frozenset[str] = frozenset(
    {"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONFAULTHANDLER", "TORCH_DISTRIBUTED_DEBUG"}
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
