"""The network Vertex gives a GPU machine, as NCCL needs to see it. On RDMA machines (A3 Ultra, A4) Vertex ships
a script that sets NCCL's environment for GPUDirect RDMA; Google's instruction is to `source` it before training
(`source /usr/local/gib/scripts/set_nccl_env.sh`, reference/vertex.md §3.3). The launcher runs it in a shell
when it is present and takes the variables it sets, so every worker starts with them. On other machines the
script is absent and nothing changes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

RDMA_SCRIPT = Path("/usr/local/gib/scripts/set_nccl_env.sh")


def variables_set_by(script: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables `source script` sets or changes, given the environment `env` it starts from."""
    shown = subprocess.run(
        ["bash", "-c", 'source "$0" >/dev/null && env -0', str(script)],
        env=dict(env),
        capture_output=True,
        check=True,
    ).stdout.decode()
    after = dict(item.split("=", 1) for item in shown.split("\0") if "=" in item)
    return {k: v for k, v in after.items() if env.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def rdma_environment(env: Mapping[str, str], script: Path = RDMA_SCRIPT) -> dict[str, str]:
    """What to add to the environment on an RDMA machine (nothing elsewhere)."""
    return variables_set_by(script, env) if script.exists() else {}
