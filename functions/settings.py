"""Controller settings, read once from `TRAINCTL_*` environment variables.

Every field `x` is set by the variable `TRAINCTL_X`; Terraform sets the same names (a test checks).
Lists are comma-separated; durations take seconds or '30m'/'24h'; an empty allow-list allows anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from functions.teams import Teams, TeamsError, parse_teams
from schemas.executors import EXECUTORS, Executors, ExecutorsError, parse_executors
from schemas.images import normalize_prefix, prefix_problem
from schemas.rules import parse_duration
from schemas.secrets import SECRET_RE

PREFIX = "TRAINCTL_"
DEFAULT_REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"


class SettingsError(ValueError):
    """A TRAINCTL_* variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Settings:
    project: str
    control_bucket: str
    events_topic: str
    trainer_image: str
    region: str = "us-central1"
    # JSON object: "gs://bucket/prefix/" → a partial request (object) or a gs:// URI of a YAML/JSON template.
    trigger_rules: dict[str, Any] = field(default_factory=dict)
    marker_names: tuple[str, ...] = ("_SUCCESS",)
    # Object basenames that ask for the folder's CSV files to be scored by the rule's model's champion (a Vertex
    # BatchPredictionJob: functions/models/scoring.py). A name in both lists scores.
    score_marker_names: tuple[str, ...] = ("_SCORE",)
    trainer_service_account: str = ""
    # What custom images run as: an account apart from the trainer's, so that custom code cannot write where the
    # built-in trainer's outputs live (gs://<control>/runs/). Empty where trainer_service_account is empty too (the
    # local stack without accounts); where only the trainer's is set, custom images are refused (admission.py).
    custom_service_account: str = ""
    reduction_server_image: str = DEFAULT_REDUCTION_SERVER_IMAGE
    allowed_machine_types: tuple[str, ...] = ()
    # Registries and folders custom images may come from, each matched at a path boundary (schemas/images.py):
    # read with a trailing '/' unless written as one full image. The built-in trainer's repository never
    # counts, whatever is listed here (functions/jobs/admission.py).
    allowed_image_prefixes: tuple[str, ...] = ()
    # Whether requests may run their own Python package on a prebuilt PyTorch container (trainer.python_package,
    # issue 31): custom code like an allowed image, run as the custom account; off unless the operator turns it on
    # (Terraform's allow_python_packages).
    allow_python_packages: bool = False
    # The prebuilt PyTorch training containers packages may run on (schemas/executors.py), by name: JSON, Terraform's
    # `executors`; unset, Google's list as the catalog records it. Admission refuses one past its end of availability.
    executors: Executors = field(default_factory=lambda: dict(EXECUTORS))
    allowed_data_buckets: tuple[str, ...] = ()
    allowed_output_buckets: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    max_gpus_per_job: int = 64
    max_nodes: int = 16
    max_timeout: int = 7 * 86400
    max_cost_usd: float = 1000.0
    # What all attempts of one request may spend together (its costliest rung's worst case × max_attempts);
    # 0: no limit beyond max_cost_usd per attempt.
    max_request_cost_usd: float = 0.0
    max_request_bytes: int = 64 * 1024
    # The base URL of a Vertex REST endpoint to use instead of https://{region}-aiplatform.googleapis.com.
    vertex_endpoint: str = ""
    # The base URL of a Cloud Quotas REST endpoint to use instead of https://cloudquotas.googleapis.com (the
    # local stack's stand-in); Terraform leaves it unset.
    quotas_endpoint: str = ""
    # The base URL of a Cloud Monitoring REST endpoint to use instead of https://monitoring.googleapis.com (the local
    # stack's stand-in, on the JobService's REST port); Terraform leaves it unset.
    monitoring_endpoint: str = ""
    # The base URL of a Compute Engine REST endpoint to use instead of https://compute.googleapis.com, where reserved
    # rungs' reservations are read (the local stack's stand-in, on the JobService's REST port); Terraform leaves it
    # unset.
    compute_endpoint: str = ""
    # Regions a request's fallback rung may name besides `region`; empty: only `region`.
    allowed_regions: tuple[str, ...] = ()
    lease: int = 600
    # How long a request whose submission Vertex refuses with PERMISSION_DENIED keeps being tried again: fresh IAM
    # grants and a just-enabled API take minutes to reach Vertex (functions/intake/submission.py).
    permission_wait: int = 20 * 60
    # How many active requests a reconcile tick observes at once (those whose job changed, ended or has a decision
    # due: functions/lifecycle/sweep.py): each observation waits mostly on Cloud Storage and Vertex.
    reconcile_concurrency: int = 16
    max_event_age: int = 24 * 3600
    # The function's own timeout (Terraform's function_timeout_seconds): every handler works to a deadline
    # inside it, so that it answers before Cloud Run cuts the request off and the event is redelivered.
    function_timeout: int = 120
    # Tuning for tests, right as they are in the cloud (Terraform leaves them unset): how old an unpublished
    # outbox event must be before another handler publishes it (functions/ledger/outbox.py), how long a delivery
    # waits for another delivery's live claim before asking for redelivery (functions/intake/submission.py), and a
    # factor on every pause between the adapters' retries (functions/cloud/retry.py), so that a test of a dependency
    # that is down need not sit through the backoff meant for the cloud's.
    # Teams (functions/teams.py; issue 32): JSON, Terraform's variable `teams` with each team's topic filled in.
    # None: one team, which holds the whole quota, and no budgets.
    teams: Teams | None = None
    # The secrets each team's own code may read (issue 40, point 7): JSON, team → ["projects/P/secrets/S", …], the
    # team being `default` without teams. Terraform's job_secrets, which grants the same team's job account
    # roles/secretmanager.secretAccessor on each: admission refuses a trainer.secret_env reference outside it.
    job_secrets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    outbox_grace: int = 8
    claim_wait: int = 20
    retry_pause_scale: float = 1.0

    def custom_account(self, team: str | None) -> str:
        """What your own code runs as when it arrives as `team`: the team's own account, where the teams setting
        names one (Terraform names one for every team but the default: terraform/teams.tf), else the custom
        images' account (issue 38, point 4: one team's code cannot rewrite another's outputs)."""
        own = self.teams.teams[team].custom_service_account if self.teams and team in self.teams.teams else None
        return own or self.custom_service_account

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = PREFIX + f.name.upper()
            raw = env.get(name)
            if raw is None or raw == "":
                if f.default is MISSING and f.default_factory is MISSING:
                    raise SettingsError(f"{name} is required")
                continue
            values[f.name] = _convert(name, f.name, raw, None if f.default is MISSING else f.default)
        return cls(**values)


def _convert(name: str, attr: str, raw: str, default: Any) -> Any:
    try:
        if attr == "trigger_rules":
            rules = json.loads(raw)
            if not isinstance(rules, dict):
                raise ValueError("must be a JSON object mapping gs:// prefixes to templates")
            return rules
        if attr in (
            "max_timeout",
            "lease",
            "permission_wait",
            "max_event_age",
            "function_timeout",
            "outbox_grace",
            "claim_wait",
        ):
            return parse_duration(raw)
        if attr == "teams":
            return parse_teams(raw)
        if attr == "job_secrets":
            return parse_job_secrets(raw)
        if attr == "executors":
            return parse_executors(raw)
        if attr == "allowed_image_prefixes":
            prefixes = tuple(item.strip() for item in raw.split(",") if item.strip())
            problems = [problem for prefix in prefixes if (problem := prefix_problem(prefix))]
            if problems:
                raise ValueError("; ".join(problems))
            return tuple(dict.fromkeys(normalize_prefix(prefix) for prefix in prefixes))
        if attr == "retry_pause_scale" and not float(raw) >= 0:
            raise ValueError(f"must be a number of 0 or more, got {raw!r}")
        if isinstance(default, tuple):
            return tuple(item.strip() for item in raw.split(",") if item.strip())
        if isinstance(default, bool):
            return raw.lower() in ("1", "true", "yes")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        return raw
    except (ValueError, TeamsError, ExecutorsError) as exc:
        raise SettingsError(f"{name}: {exc}") from None


def parse_job_secrets(raw: str) -> dict[str, tuple[str, ...]]:
    """TRAINCTL_JOB_SECRETS: a JSON object, team → list of projects/P/secrets/S."""
    value = json.loads(raw)
    if not isinstance(value, dict) or not all(isinstance(names, list) for names in value.values()):
        raise ValueError('must be a JSON object, team → list of secrets: {"team": ["projects/P/secrets/S"]}')
    wrong = [str(name) for names in value.values() for name in names if not SECRET_RE.fullmatch(str(name))]
    if wrong:
        raise ValueError(f"not a secret (projects/P/secrets/S): {', '.join(wrong)}")
    return {str(team): tuple(str(name) for name in names) for team, names in value.items()}


def env_names() -> list[str]:
    """Every variable the settings read, for Terraform's and the local stack's checks."""
    return [PREFIX + f.name.upper() for f in fields(Settings)]
