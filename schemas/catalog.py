"""The GPU catalog: which (machine_type, accelerator_type, accelerator_count) Vertex AI accepts, the boot
disks each machine series takes, each machine's NIC egress bandwidth, and approximate hourly prices.

Sources (see ../shared/reference/vertex.md): valid counts from Vertex "Configure compute resources"
(§4.2), egress figures from Compute Engine "GPU machine types" (§3.3), boot disks from Vertex's DiskSpec
(§1.3). Prices: see PRICE_BASIS. They feed the cost guardrail and the estimates in events, not invoices.

Only x86-64 machines are listed: the trainer image is built for linux/amd64, so A4X (Arm CPUs, the only
home of NVIDIA_GB200) is left out (Vertex "Compute resources" for training clusters: A4X needs images
built for Arm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRICES_TAKEN = "2026-11-22"
PRICES_REGION = "us-central1"
PRICE_BASIS = """\
Approximate and unverified: compiled by hand on PRICES_TAKEN, not read from a price list by any program.
- N1 machines with attachable GPUs (T4, P4, P100, V100), A2, A3 High/Mega and G2, on demand: Vertex AI's
  custom-training price tables, https://cloud.google.com/vertex-ai/pricing (us-central1, per node-hour;
  accelerator-optimized machines include their GPUs). Spot-checked: a2-highgpu-8g at $35.26/h matches the
  us-central1 figure quoted for 8 x A100 training.
- A3 Ultra, A4 and G4, on demand: estimates, not confirmed on that page.
- Spot: estimates at about a third of on demand; Spot training is billed at Spot VM rates
  (https://cloud.google.com/spot-vms/pricing), which can change as often as once a day.
Check https://cloud.google.com/vertex-ai/pricing before setting a budget by them."""

REDUCER_MACHINE = "n1-highcpu-16"
REDUCER_EGRESS_GBPS = 32

# Dynamic Workload Scheduler (FLEX_START) accepts only these GPUs (vertex.md §1.4).
FLEX_START_ACCELERATORS = frozenset(
    {
        "NVIDIA_L4",
        "NVIDIA_TESLA_A100",
        "NVIDIA_A100_80GB",
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
        "NVIDIA_B200",
    }
)

# Machine families on which Reduction Server helps; A3/A4 use GPUDirect instead (vertex.md §3.3).
REDUCTION_SERVER_FAMILIES = frozenset({"n1", "a2", "g2"})


# Vertex's DiskSpec.boot_disk_type accepts these three (googleapis machine_resources.proto, vertex.md §1.3).
BOOT_DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")


@dataclass(frozen=True)
class BootDisks:
    """The boot disk types a machine series takes, the one trainctl wants by default, and the one Vertex picks
    when DiskSpec.boot_disk_type is empty (so planning sends a type only when the two differ)."""

    allowed: tuple[str, ...]
    default: str
    vertex_default: str = "pd-ssd"  # DiskSpec: "For non-A3U machines, the default value is pd-ssd"


# N1, A2 and G2 predate Hyperdisk: Persistent Disk only, as DiskSpec offered before hyperdisk-balanced was added
# for A3U (older DiskSpec: "Valid values: pd-ssd or pd-standard").
_PERSISTENT_DISK = BootDisks(("pd-ssd", "pd-standard"), "pd-ssd")
# A3 High/Mega: all three are let through; Vertex's answer to pd-standard there is not confirmed (FIDELITY.md).
_A3_HIGH = BootDisks(BOOT_DISK_TYPES, "pd-ssd")
# A3 Ultra: Hyperdisk only; DiskSpec: "for A3U machines, the default value is hyperdisk-balanced".
_A3_ULTRA = BootDisks(("hyperdisk-balanced",), "hyperdisk-balanced", vertex_default="hyperdisk-balanced")
# A4 and G4: Hyperdisk only. Vertex's "Configure compute resources" names hyperdisk-balanced the default for
# a4-highgpu-8g, but the DiskSpec reference says pd-ssd for every non-A3U machine, and says nothing of G4:
# with the sources disagreeing, trainctl sends hyperdisk-balanced itself.
_HYPERDISK_ONLY = BootDisks(("hyperdisk-balanced",), "hyperdisk-balanced")

# Machine-type prefix → its series' boot disks; the longest matching prefix wins (a3-ultragpu before a3).
BOOT_DISKS_BY_SERIES: dict[str, BootDisks] = {
    "n1": _PERSISTENT_DISK,
    "a2": _PERSISTENT_DISK,
    "g2": _PERSISTENT_DISK,
    "a3-highgpu": _A3_HIGH,
    "a3-megagpu": _A3_HIGH,
    "a3-ultragpu": _A3_ULTRA,
    "a4": _HYPERDISK_ONLY,
    "g4": _HYPERDISK_ONLY,
}


@dataclass(frozen=True)
class Accelerator:
    name: str
    # Only N1 machines take attachable GPUs, priced per GPU-hour; accelerator-optimized machines have
    # their GPUs in the machine price.
    attach_price: float = 0.0
    attach_spot_price: float = 0.0


@dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    price: float  # USD per node-hour, built-in GPUs included
    spot_price: float
    egress_gbps: int
    builtin_accelerator: str | None = None
    builtin_count: int = 0
    memory_gb: float = 0.0  # the node's memory (Compute Engine machine types); what the trainer's budget divides

    @property
    def family(self) -> str:
        return self.name.split("-", 1)[0]

    @property
    def accelerator_optimized(self) -> bool:
        return self.builtin_accelerator is not None


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in [
        Accelerator("NVIDIA_TESLA_T4", 0.4025, 0.1400),
        Accelerator("NVIDIA_TESLA_P4", 0.6900, 0.2400),
        Accelerator("NVIDIA_TESLA_P100", 1.6790, 0.5800),
        Accelerator("NVIDIA_TESLA_V100", 2.8520, 0.9900),
        Accelerator("NVIDIA_TESLA_A100"),
        Accelerator("NVIDIA_A100_80GB"),
        Accelerator("NVIDIA_L4"),
        Accelerator("NVIDIA_H100_80GB"),
        Accelerator("NVIDIA_H100_MEGA_80GB"),
        Accelerator("NVIDIA_H200_141GB"),
        Accelerator("NVIDIA_B200"),
        Accelerator("NVIDIA_RTX_PRO_6000"),
    ]
}


def _n1(name: str, vcpus: int, per_vcpu: float) -> Machine:
    # N1 egress without GPUs: 2 Gbps per vCPU, at most 32 Gbps.
    price = round(vcpus * per_vcpu, 4)
    memory = vcpus * _N1_MEMORY_PER_VCPU[name.split("-")[1]]
    return Machine(name, vcpus, price, round(price * 0.3, 4), min(2 * vcpus, 32), memory_gb=memory)


def _gpu(name: str, vcpus: int, price: float, spot: float, gbps: int, accel: str, count: int) -> Machine:
    return Machine(name, vcpus, price, spot, gbps, accel, count, memory_gb=_GPU_MACHINE_MEMORY_GB[name])


_N1_STANDARD, _N1_HIGHMEM, _N1_HIGHCPU = 0.0547, 0.0681, 0.0409
# Memory per vCPU (GB) of N1 machines, and of each accelerator-optimized machine (Compute Engine "Machine types"
# and "Accelerator-optimized machine family"; see local/FIDELITY.md for which figures were confirmed there).
_N1_MEMORY_PER_VCPU = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}
_GPU_MACHINE_MEMORY_GB = {
    **{f"a2-highgpu-{n}g": 85 * n for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": 1360,
    **{f"a2-ultragpu-{n}g": 170 * n for n in (1, 2, 4, 8)},
    **{f"g2-standard-{v}": 4 * v for v in (4, 8, 12, 16, 24, 32, 48, 96)},
    **{f"g4-standard-{v}": 3.75 * v for v in (48, 96, 192, 384)},
    **{f"a3-highgpu-{n}g": 234 * n for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": 1872,
    "a3-ultragpu-8g": 2944,
    "a4-highgpu-8g": 3968,
}

MACHINES: dict[str, Machine] = {
    m.name: m
    for m in [
        *(_n1(f"n1-standard-{v}", v, _N1_STANDARD) for v in (4, 8, 16, 32, 64, 96)),
        *(_n1(f"n1-highmem-{v}", v, _N1_HIGHMEM) for v in (2, 4, 8, 16, 32, 64, 96)),
        *(_n1(f"n1-highcpu-{v}", v, _N1_HIGHCPU) for v in (16, 32, 64, 96)),
        _gpu("a2-highgpu-1g", 12, 4.41, 1.54, 24, "NVIDIA_TESLA_A100", 1),
        _gpu("a2-highgpu-2g", 24, 8.82, 3.08, 32, "NVIDIA_TESLA_A100", 2),
        _gpu("a2-highgpu-4g", 48, 17.63, 6.17, 50, "NVIDIA_TESLA_A100", 4),
        _gpu("a2-highgpu-8g", 96, 35.26, 12.34, 100, "NVIDIA_TESLA_A100", 8),
        _gpu("a2-megagpu-16g", 96, 70.52, 24.68, 100, "NVIDIA_TESLA_A100", 16),
        _gpu("a2-ultragpu-1g", 12, 5.86, 2.05, 24, "NVIDIA_A100_80GB", 1),
        _gpu("a2-ultragpu-2g", 24, 11.73, 4.10, 32, "NVIDIA_A100_80GB", 2),
        _gpu("a2-ultragpu-4g", 48, 23.46, 8.21, 50, "NVIDIA_A100_80GB", 4),
        _gpu("a2-ultragpu-8g", 96, 46.91, 16.42, 100, "NVIDIA_A100_80GB", 8),
        _gpu("g2-standard-4", 4, 0.81, 0.32, 10, "NVIDIA_L4", 1),
        _gpu("g2-standard-8", 8, 0.98, 0.39, 16, "NVIDIA_L4", 1),
        _gpu("g2-standard-12", 12, 1.16, 0.46, 16, "NVIDIA_L4", 1),
        _gpu("g2-standard-16", 16, 1.35, 0.54, 32, "NVIDIA_L4", 1),
        _gpu("g2-standard-24", 24, 2.32, 0.93, 32, "NVIDIA_L4", 2),
        _gpu("g2-standard-32", 32, 2.07, 0.83, 32, "NVIDIA_L4", 1),
        _gpu("g2-standard-48", 48, 4.65, 1.86, 50, "NVIDIA_L4", 4),
        _gpu("g2-standard-96", 96, 9.30, 3.72, 100, "NVIDIA_L4", 8),
        _gpu("g4-standard-48", 48, 5.12, 2.05, 50, "NVIDIA_RTX_PRO_6000", 1),
        _gpu("g4-standard-96", 96, 10.24, 4.10, 100, "NVIDIA_RTX_PRO_6000", 2),
        _gpu("g4-standard-192", 192, 20.48, 8.19, 200, "NVIDIA_RTX_PRO_6000", 4),
        _gpu("g4-standard-384", 384, 40.96, 16.38, 400, "NVIDIA_RTX_PRO_6000", 8),
        _gpu("a3-highgpu-1g", 26, 12.63, 4.42, 25, "NVIDIA_H100_80GB", 1),
        _gpu("a3-highgpu-2g", 52, 25.26, 8.84, 50, "NVIDIA_H100_80GB", 2),
        _gpu("a3-highgpu-4g", 104, 50.52, 17.68, 100, "NVIDIA_H100_80GB", 4),
        _gpu("a3-highgpu-8g", 208, 101.01, 35.35, 1000, "NVIDIA_H100_80GB", 8),
        _gpu("a3-megagpu-8g", 208, 106.50, 37.28, 1800, "NVIDIA_H100_MEGA_80GB", 8),
        _gpu("a3-ultragpu-8g", 224, 121.00, 42.35, 3600, "NVIDIA_H200_141GB", 8),
        _gpu("a4-highgpu-8g", 224, 150.00, 52.50, 3600, "NVIDIA_B200", 8),
    ]
}

# Valid counts of attachable GPUs on N1 machines, by machine group (vertex.md §4.2).
_N1_SMALL = ("n1-standard-4", "n1-standard-8", "n1-highmem-2", "n1-highmem-4", "n1-highmem-8")
_N1_16 = ("n1-standard-16", "n1-highmem-16", "n1-highcpu-16")
_N1_32 = ("n1-standard-32", "n1-highmem-32", "n1-highcpu-32")
_N1_LARGE = ("n1-standard-64", "n1-standard-96", "n1-highmem-64", "n1-highmem-96", "n1-highcpu-96")
_N1_RULES: dict[tuple[str, ...], dict[str, tuple[int, ...]]] = {
    _N1_SMALL: {
        "NVIDIA_TESLA_P4": (1, 2, 4),
        "NVIDIA_TESLA_P100": (1, 2, 4),
        "NVIDIA_TESLA_T4": (1, 2, 4),
        "NVIDIA_TESLA_V100": (1, 2, 4, 8),
    },
    _N1_16: {
        "NVIDIA_TESLA_P4": (1, 2, 4),
        "NVIDIA_TESLA_P100": (1, 2, 4),
        "NVIDIA_TESLA_T4": (1, 2, 4),
        "NVIDIA_TESLA_V100": (2, 4, 8),
    },
    _N1_32: {
        "NVIDIA_TESLA_P4": (2, 4),
        "NVIDIA_TESLA_P100": (2, 4),
        "NVIDIA_TESLA_T4": (2, 4),
        "NVIDIA_TESLA_V100": (4, 8),
    },
    _N1_LARGE: {"NVIDIA_TESLA_P4": (4,), "NVIDIA_TESLA_T4": (4,), "NVIDIA_TESLA_V100": (8,)},
    ("n1-highcpu-64",): {
        "NVIDIA_TESLA_P4": (4,),
        "NVIDIA_TESLA_P100": (4,),
        "NVIDIA_TESLA_T4": (4,),
        "NVIDIA_TESLA_V100": (8,),
    },
}
N1_ACCELERATORS: dict[str, dict[str, tuple[int, ...]]] = {
    machine: rules for group, rules in _N1_RULES.items() for machine in group
}

# N1 egress rises with attached V100/T4 GPUs (Compute Engine "Network bandwidths and GPUs").
_N1_GPU_EGRESS = {
    "NVIDIA_TESLA_V100": {1: 24, 2: 32, 4: 50, 8: 100},
    "NVIDIA_TESLA_T4": {1: 24, 2: 50, 4: 100},
}


def machine(name: str) -> Machine | None:
    return MACHINES.get(name)


def valid_accelerators(machine_type: str) -> dict[str, tuple[int, ...]]:
    """Accelerator type → the counts Vertex accepts on this machine type (empty when unknown)."""
    m = MACHINES.get(machine_type)
    if m is None:
        return {}
    if m.builtin_accelerator is not None:
        return {m.builtin_accelerator: (m.builtin_count,)}
    return dict(N1_ACCELERATORS.get(machine_type, {}))


def unknown_machine(machine_type: str) -> str:
    return f"unknown machine type {machine_type!r}; known GPU machine types: {', '.join(sorted(MACHINES))}"


def unknown_accelerator(machine_type: str, accelerator_type: str | None) -> str:
    choices = ", ".join(valid_accelerators(machine_type)) or "none"
    return f"{machine_type} does not take {accelerator_type}; valid accelerator types: {choices}"


def accelerator_problem(machine_type: str, accelerator_type: str | None, count: int | None) -> str | None:
    """Why this combination is not valid on Vertex, in words; None when it is.

    A missing type or count is filled from the machine's built-in GPUs before this is called; here both
    must be present.
    """
    if machine_type not in MACHINES:
        return unknown_machine(machine_type)
    valid = valid_accelerators(machine_type)
    if accelerator_type not in valid:
        return unknown_accelerator(machine_type, accelerator_type)
    counts = valid[accelerator_type]
    if count not in counts:
        if len(counts) == 1 and MACHINES[machine_type].accelerator_optimized:
            return f"{machine_type} has exactly {counts[0]} {accelerator_type}, got {count}"
        return f"{machine_type} takes {', '.join(map(str, counts))} × {accelerator_type}, got {count}"
    return None


def node_egress_gbps(machine_type: str, accelerator_type: str | None = None, count: int = 0) -> int:
    m = MACHINES[machine_type]
    if m.accelerator_optimized or accelerator_type is None:
        return m.egress_gbps
    return max(m.egress_gbps, _N1_GPU_EGRESS.get(accelerator_type, {}).get(count, 0))


def node_hourly_price(machine_type: str, accelerator_type: str | None, count: int, spot: bool) -> float:
    """USD per node-hour: the machine plus any attached GPUs."""
    m = MACHINES[machine_type]
    price = m.spot_price if spot else m.price
    if not m.accelerator_optimized and accelerator_type is not None:
        a = ACCELERATORS[accelerator_type]
        price += (a.attach_spot_price if spot else a.attach_price) * count
    return round(price, 4)


def boot_disks(machine_type: str) -> BootDisks:
    """The boot disks of this machine's series (Persistent Disk rules for a series the table does not name)."""
    prefixes = [p for p in BOOT_DISKS_BY_SERIES if machine_type == p or machine_type.startswith(p + "-")]
    return BOOT_DISKS_BY_SERIES[max(prefixes, key=len)] if prefixes else _PERSISTENT_DISK


def boot_disk_problem(machine_type: str, disk_type: str) -> str | None:
    """Why this machine cannot boot from this disk type, in words; None when it can."""
    allowed = boot_disks(machine_type).allowed
    if disk_type in allowed:
        return None
    return f"{machine_type} does not take a {disk_type} boot disk; allowed: {', '.join(allowed)}"


def boot_disk_type_to_send(machine_type: str, chosen: str | None) -> str | None:
    """DiskSpec.boot_disk_type for this machine: the user's choice, else the series' default where Vertex's
    own default differs from it, else None (Vertex's default applies)."""
    if chosen is not None:
        return chosen
    disks = boot_disks(machine_type)
    return disks.default if disks.default != disks.vertex_default else None


def reducers_needed(total_worker_egress_gbps: float) -> int:
    """Reduction Server sizing: reducer egress must match the workers' (vertex.md §3.3)."""
    return max(1, math.ceil(total_worker_egress_gbps / REDUCER_EGRESS_GBPS))


# Vertex custom-training GPU quotas (service aiplatform.googleapis.com), each known by its metric and by its quota
# id in the Cloud Quotas API: on demand, custom_model_training_nvidia_<gpu>_gpus with the id
# CustomModelTraining<GPU>PerProjectPerRegion; for Spot and FLEX_START, custom_model_training_preemptible_… with
# CustomModelTrainingPreemptible<GPU>PerProjectPerRegion. The words come from Google's Model Garden quota check in
# GoogleCloudPlatform/vertex-ai-samples (local/FIDELITY.md has the files): its metric map (T4 to H200) and its
# quota-id map (every GPU below but P4); B200, GB200 and RTX PRO 6000 metric words from the serving metrics its
# notebooks link beside those ids. Preemptible for FLEX_START: Vertex's Dynamic Workload Scheduler page; for
# Spot: the same repository's A3 Mega training sample, while its quota check maps Spot training to the on-demand
# metric, so trainctl gates Spot on both (quota_metrics). The words do not follow the AcceleratorType names:
# NVIDIA_H100_80GB is h100 / H100GPUs, NVIDIA_H200_141GB is h200 / H200GPUs.
QUOTA_SERVICE = "aiplatform.googleapis.com"
CPU_QUOTA_METRIC = f"{QUOTA_SERVICE}/custom_model_training_cpus"


@dataclass(frozen=True)
class GpuQuotaNames:
    metric_word: str  # custom_model_training_[preemptible_]<metric_word>_gpus
    id_word: str  # CustomModelTraining[Preemptible]<id_word>PerProjectPerRegion


GPU_QUOTA_NAMES: dict[str, GpuQuotaNames] = {
    "NVIDIA_TESLA_T4": GpuQuotaNames("nvidia_t4", "T4GPUs"),
    "NVIDIA_TESLA_P4": GpuQuotaNames("nvidia_p4", "P4GPUs"),  # not in Google's map: by the same rule, unconfirmed
    "NVIDIA_TESLA_P100": GpuQuotaNames("nvidia_p100", "P100GPUs"),
    "NVIDIA_TESLA_V100": GpuQuotaNames("nvidia_v100", "V100GPUs"),
    "NVIDIA_TESLA_A100": GpuQuotaNames("nvidia_a100", "A100GPUs"),
    "NVIDIA_A100_80GB": GpuQuotaNames("nvidia_a100_80gb", "A10080GBGPUs"),
    "NVIDIA_L4": GpuQuotaNames("nvidia_l4", "L4GPUs"),
    "NVIDIA_H100_80GB": GpuQuotaNames("nvidia_h100", "H100GPUs"),
    "NVIDIA_H100_MEGA_80GB": GpuQuotaNames("nvidia_h100_mega", "H100MEGAGPUs"),
    "NVIDIA_H200_141GB": GpuQuotaNames("nvidia_h200", "H200GPUs"),
    "NVIDIA_B200": GpuQuotaNames("nvidia_b200", "B200GPUs"),
    "NVIDIA_GB200": GpuQuotaNames("nvidia_gb200", "GB200GPUs"),  # A4X only, not in MACHINES (Arm)
    "NVIDIA_RTX_PRO_6000": GpuQuotaNames("nvidia_rtx_pro_6000", "RTXPRO6000GPUs"),
}
_PREEMPTIBLE_STRATEGIES = frozenset({"SPOT", "FLEX_START"})


def _preemptible(strategy: str) -> bool:
    return strategy.upper() in _PREEMPTIBLE_STRATEGIES


def quota_metric(accelerator_type: str | None, strategy: str = "STRATEGY_UNSPECIFIED") -> str:
    """The Vertex training quota metric that limits `accelerator_type` GPUs (an AcceleratorType name), e.g.
    NVIDIA_TESLA_T4 → aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus. `strategy` is a
    Scheduling.Strategy name or a request's strategy (spot, flex_start: any case); Spot and FLEX_START draw
    on the preemptible metric. Without an accelerator, the CPU metric. A GPU the table does not name (the local
    JobService takes any AcceleratorType) gets its enum name's words, as most of the table's follow."""
    if not accelerator_type or accelerator_type == "ACCELERATOR_TYPE_UNSPECIFIED":
        return CPU_QUOTA_METRIC
    names = GPU_QUOTA_NAMES.get(accelerator_type)
    word = names.metric_word if names else accelerator_type.lower().replace("_tesla_", "_")
    preemptible = "preemptible_" if _preemptible(strategy) else ""
    return f"{QUOTA_SERVICE}/custom_model_training_{preemptible}{word}_gpus"


def quota_metrics(accelerator_type: str | None, strategy: str = "STRATEGY_UNSPECIFIED") -> tuple[str, ...]:
    """Every quota metric trainctl gates a rung on, `quota_metric`'s first. A Spot rung is gated on the preemptible
    metric and on the on-demand one (issue 40, point 12): the sources disagree on which one Spot training draws on.
    Google's Model Garden quota check maps training to the on-demand metric whether or not it is Spot (only the
    Dynamic Workload Scheduler, FLEX_START, to the preemptible one: vertex-ai-samples notebook_util/common_util.py
    `get_resource_id`), while its A3 Mega training README says to request the preemptible quota for Spot VMs; no
    Vertex page says. Gating on both (each one that has a limit) admits nothing either reading would queue."""
    first = quota_metric(accelerator_type, strategy)
    if strategy.upper() != "SPOT" or first == CPU_QUOTA_METRIC:
        return (first,)
    return first, quota_metric(accelerator_type, "STANDARD")


def _quota_ids() -> dict[str, str]:
    ids = {}
    for accelerator, names in GPU_QUOTA_NAMES.items():
        for strategy, prefix in (("STANDARD", "CustomModelTraining"), ("SPOT", "CustomModelTrainingPreemptible")):
            ids[quota_metric(accelerator, strategy)] = f"{prefix}{names.id_word}PerProjectPerRegion"
    return ids


QUOTA_IDS: dict[str, str] = _quota_ids()  # full GPU metric name → its quota id in the Cloud Quotas API


def quota_id(metric: str) -> str | None:
    """The Cloud Quotas id of a GPU metric quota_metric gives (…/custom_model_training_nvidia_l4_gpus →
    CustomModelTrainingL4GPUsPerProjectPerRegion); None for a metric the table does not name."""
    return QUOTA_IDS.get(metric)


# NVIDIA compute capability of each GPU (https://developer.nvidia.com/cuda-gpus): what an executor's kernels must
# cover (schemas/executors.py).
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "NVIDIA_TESLA_P4": (6, 1),
    "NVIDIA_TESLA_P100": (6, 0),
    "NVIDIA_TESLA_V100": (7, 0),
    "NVIDIA_TESLA_T4": (7, 5),
    "NVIDIA_TESLA_A100": (8, 0),
    "NVIDIA_A100_80GB": (8, 0),
    "NVIDIA_L4": (8, 9),
    "NVIDIA_H100_80GB": (9, 0),
    "NVIDIA_H100_MEGA_80GB": (9, 0),
    "NVIDIA_H200_141GB": (9, 0),
    "NVIDIA_B200": (10, 0),
    "NVIDIA_RTX_PRO_6000": (12, 0),
}


def nearest_multiregion(region: str) -> str:
    """The Artifact Registry multi-region (us, europe, asia) nearest a region, where Google's images are served."""
    return "europe" if region.startswith("europe-") else "asia" if region.startswith(("asia-", "australia-")) else "us"
