"""The GPU catalog: valid combinations, egress and prices, against reference/vertex.md §3-4."""

import pytest

from schemas import catalog


@pytest.mark.parametrize(
    ("machine", "accel", "count"),
    [
        ("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2),
        ("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16),
        ("g2-standard-24", "NVIDIA_L4", 2),
        ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
        ("n1-standard-4", "NVIDIA_TESLA_T4", 4),
        ("n1-standard-4", "NVIDIA_TESLA_V100", 8),
        ("n1-highcpu-16", "NVIDIA_TESLA_V100", 2),
        ("n1-standard-32", "NVIDIA_TESLA_P100", 2),
        ("n1-highcpu-64", "NVIDIA_TESLA_P100", 4),
        ("n1-highmem-96", "NVIDIA_TESLA_V100", 8),
    ],
)
def test_documented_combinations_are_valid(machine, accel, count):
    assert catalog.accelerator_problem(machine, accel, count) is None


@pytest.mark.parametrize(
    ("machine", "accel", "count", "words"),
    [
        ("a2-highgpu-2g", "NVIDIA_TESLA_A100", 4, "a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 4"),
        ("a2-highgpu-2g", "NVIDIA_L4", 2, "does not take NVIDIA_L4"),
        ("n1-highcpu-16", "NVIDIA_TESLA_V100", 1, "takes 2, 4, 8"),
        ("n1-standard-64", "NVIDIA_TESLA_P100", 4, "does not take NVIDIA_TESLA_P100"),
        ("n1-standard-32", "NVIDIA_TESLA_T4", 1, "takes 2, 4"),
        ("e2-standard-4", "NVIDIA_TESLA_T4", 1, "unknown machine type"),
    ],
)
def test_invalid_combinations_say_why(machine, accel, count, words):
    assert words in catalog.accelerator_problem(machine, accel, count)


def test_reduction_server_sizing_matches_the_documented_examples():
    # 4 × a2-highgpu-8g → ceil(400/32) = 13; 2 × a2-highgpu-4g → 4; 8 × a2-megagpu-16g → 25.
    assert catalog.reducers_needed(4 * catalog.node_egress_gbps("a2-highgpu-8g")) == 13
    assert catalog.reducers_needed(2 * catalog.node_egress_gbps("a2-highgpu-4g")) == 4
    assert catalog.reducers_needed(8 * catalog.node_egress_gbps("a2-megagpu-16g")) == 25
    # n1-highmem-96 + 8 × V100 = 100 Gbps per node (vertex.md §3.3): 5 nodes → 16 reducers.
    assert catalog.reducers_needed(5 * catalog.node_egress_gbps("n1-highmem-96", "NVIDIA_TESLA_V100", 8)) == 16


def test_prices_include_attached_gpus_and_spot_is_cheaper():
    base = catalog.node_hourly_price("n1-standard-8", None, 0, spot=False)
    with_t4 = catalog.node_hourly_price("n1-standard-8", "NVIDIA_TESLA_T4", 2, spot=False)
    assert with_t4 == pytest.approx(base + 2 * 0.4025)
    for name, m in catalog.MACHINES.items():
        assert 0 < m.spot_price < m.price, name


def test_every_flex_start_and_builtin_accelerator_is_known():
    assert catalog.FLEX_START_ACCELERATORS <= set(catalog.ACCELERATORS)
    for m in catalog.MACHINES.values():
        assert m.builtin_accelerator is None or m.builtin_accelerator in catalog.ACCELERATORS
    for rules in catalog.N1_ACCELERATORS.values():
        assert set(rules) <= set(catalog.ACCELERATORS)
