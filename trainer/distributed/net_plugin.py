"""Which NCCL NET plugin a node should use, and which one NCCL loaded.

NCCL opens `libnccl-net.so` when it starts, or `libnccl-net-NAME.so` (or NAME itself, a file name) when
`NCCL_NET_PLUGIN=NAME`, through the dynamic loader — `LD_LIBRARY_PATH` first, then the system's directories —
and falls back to its own sockets when none is found ("NET/Plugin : No plugin found …, using internal
implementation"; NVIDIA/nccl `src/plugin/net.cc`, `ncclNetPluginInit`/`openNetPluginLib`). Google's plugins all
take that default name: the Reduction Server plugin (package `google-reduction-server`, installed in the
image, reference/vertex.md §3.2), Fast Socket (google/nccl-fastsocket: `libnccl-net.so`; Google's Reduction
Server samples remove `google-fast-socket` before installing it) and GPUDirect-TCPX (google/nccl-plugin-
gpudirecttcpx: `libnccl-net.so`, "copied into your LD_LIBRARY_PATH"). So whichever the loader finds first wins:
- with Reduction Server (CLUSTER_SPEC's pool 2 runs the reductionserver image), NCCL must load the
  reduction-server plugin, or the reducers sit idle while NCCL all-reduces over its own sockets: a loud warning,
  not a failure (training still works, only slower);
- on A3/A4 machines the network is GPUDirect (TCPX on a3-highgpu, TCPXO on a3-megagpu, RDMA on a3-ultragpu and
  a4-highgpu; reference/vertex.md §4.2) and its plugin is Vertex's: the trainer never points `NCCL_NET_PLUGIN`
  at the reduction-server plugin there, says which plugin it expects, and warns when the library NCCL would open
  is the image's own (the reduction-server plugin shadowing GPUDirect).
After NCCL has started, `loaded_plugins` reads `/proc/self/maps` for the plugin libraries actually mapped, which
holds whatever `NCCL_DEBUG` is; with `NCCL_DEBUG=INFO` NCCL's own "NET/Plugin" lines are in the log too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainer import logs
from trainer.distributed.accelerators import _field, machine_spec

# Where the loader looks after LD_LIBRARY_PATH on the image's Debian/Ubuntu base (ld.so.conf's usual entries).
SYSTEM_LIBRARY_DIRS = ("/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/lib")
GPUDIRECT = {
    "a3-highgpu": "GPUDirect-TCPX",
    "a3-megagpu": "GPUDirect-TCPXO",
    "a3-ultragpu": "GPUDirect-RDMA",
    "a4-highgpu": "GPUDirect-RDMA",
}
REDUCTION_SERVER_PLUGIN = "the Reduction Server plugin (google-reduction-server's libnccl-net.so)"


@dataclass(frozen=True)
class NetPluginPlan:
    expected: str  # in words, for the log
    reduction_server: bool  # the job has reducers that this node's NCCL must reach through their plugin
    gpudirect: str | None  # the GPUDirect flavour of an A3/A4 machine


def plan(machine_type: str | None, reducers_in_job: bool) -> NetPluginPlan:
    """The NET plugin a node of `machine_type` should load, given whether the job has Reduction Server reducers."""
    family = (machine_type or "").rpartition("-")[0]
    gpudirect = GPUDIRECT.get(family)
    if gpudirect:  # reducers never take over from GPUDirect (the planner adds none on A3/A4 either)
        return NetPluginPlan(f"Vertex's {gpudirect} plugin", reduction_server=False, gpudirect=gpudirect)
    if reducers_in_job:
        return NetPluginPlan(REDUCTION_SERVER_PLUGIN, reduction_server=True, gpudirect=None)
    return NetPluginPlan("none needed (NCCL's own sockets)", reduction_server=False, gpudirect=None)


def _cluster_spec(env: Mapping[str, str]) -> dict:
    return json.loads(env["CLUSTER_SPEC"]) if env.get("CLUSTER_SPEC") else {}


def machine_type(env: Mapping[str, str]) -> str | None:
    """This node's machine type, from its pool's machine spec in CLUSTER_SPEC's `job`."""
    return _field(machine_spec(env)[1], "machine_type")


def reducers_in_job(env: Mapping[str, str]) -> bool:
    """Pool 2 exists and runs the Reduction Server image (when the job spec says which image it runs)."""
    spec = _cluster_spec(env)
    if not (spec.get("cluster") or {}).get("workerpool2"):
        return False
    pools = _field(spec.get("job") or {}, "worker_pool_specs") or []
    if len(pools) < 3 or not pools[2]:
        return True  # no job spec to tell: a pool 2 beside a trainer is taken to be reducers
    image = _field(_field(pools[2], "container_spec") or {}, "image_uri") or ""
    return "reductionserver" in image


def library_nccl_would_load(env: Mapping[str, str], system_dirs: Sequence[str] = SYSTEM_LIBRARY_DIRS) -> Path | None:
    """The NET plugin file NCCL would open with this environment, searched as the loader does, or None."""
    chosen = env.get("NCCL_NET_PLUGIN", "")
    names = [chosen, f"libnccl-net-{chosen}.so"] if chosen else ["libnccl-net.so"]
    for name in names:
        if os.sep in name:
            if Path(name).is_file():
                return Path(name)
            continue
        dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d] + list(system_dirs)
        for folder in dirs:
            if (Path(folder) / name).is_file():
                return Path(folder) / name
    return None


def check_before_launch(env: Mapping[str, str], system_dirs: Sequence[str] = SYSTEM_LIBRARY_DIRS) -> NetPluginPlan:
    """Log which NET plugin this node expects and warn loudly when the library NCCL would open is not it."""
    decided = plan(machine_type(env), reducers_in_job(env))
    library = library_nccl_would_load(env, system_dirs)
    found = str(library) if library else None
    if decided.reduction_server and library is None:
        logs.warning(
            "REDUCTION SERVER WILL NOT BE USED: this job has reducers, but the image has no NCCL NET plugin "
            "(libnccl-net.so from google-reduction-server); NCCL will all-reduce over its own sockets and the "
            "reducers will sit idle. Install google-reduction-server in the image (reference/vertex.md §3.2).",
            expected=decided.expected,
            nccl_net_plugin=env.get("NCCL_NET_PLUGIN"),
        )
    elif decided.gpudirect and library is not None and str(library.parent) in system_dirs:
        logs.warning(
            f"the NCCL NET plugin NCCL would open is the image's own {library}, not Vertex's {decided.gpudirect} "
            "plugin: if it is google-reduction-server's, it shadows GPUDirect and inter-node traffic goes over "
            "plain TCP; Vertex's plugin must come first on LD_LIBRARY_PATH",
            expected=decided.expected,
            library=found,
        )
    else:
        logs.log("NCCL NET plugin expected", expected=decided.expected, library=found)
    return decided


def loaded_plugins(maps: Path = Path("/proc/self/maps")) -> list[str]:
    """The NCCL NET plugin libraries mapped into this process (after NCCL has started)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return []
    paths = {line.split()[-1] for line in lines if "libnccl-net" in line.rpartition("/")[2]}
    return sorted(paths)


def report_loaded(env: Mapping[str, str], maps: Path = Path("/proc/self/maps")) -> None:
    """After NCCL's first collective: log the plugin it loaded, and warn when the expected one is missing."""
    decided = plan(machine_type(env), reducers_in_job(env))
    loaded = loaded_plugins(maps)
    if (decided.reduction_server or decided.gpudirect) and not loaded:
        logs.warning("NCCL loaded no NET plugin; it uses its own sockets", expected=decided.expected)
    else:
        logs.log("NCCL NET plugin loaded", loaded=loaded or None, expected=decided.expected)
