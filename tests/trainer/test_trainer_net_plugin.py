"""Which NCCL NET plugin a node expects (Reduction Server's, Vertex's GPUDirect one, or none), whether the library
NCCL would open is there, and what NCCL loaded — all held without a GPU: the decision is a function of the job,
the library search runs over folders made here, and what was loaded is read from a maps file made here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.distributed import net_plugin

REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"


def job_env(machine_type: str, reducers: int = 0, task: str = "workerpool0", **extra: str) -> dict[str, str]:
    """A node's environment as Vertex sets it: CLUSTER_SPEC with the job's pools (snake_case, as the local
    JobService writes it), pool 2 running the Reduction Server image when there are reducers."""
    machine = {"machine_type": machine_type, "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 8}
    pools = [{"machine_spec": machine, "replica_count": 1, "container_spec": {"image_uri": "trainer"}},
             {"machine_spec": machine, "replica_count": 1, "container_spec": {"image_uri": "trainer"}}]  # fmt: skip
    cluster = {"workerpool0": ["w0-0:2222"], "workerpool1": ["w1-0:2222"]}
    if reducers:
        pools.append({"machine_spec": {"machine_type": "n1-highcpu-16"}, "replica_count": reducers,
                      "container_spec": {"image_uri": REDUCTION_SERVER_IMAGE}})  # fmt: skip
        cluster["workerpool2"] = [f"w2-{i}:2222" for i in range(reducers)]
    spec = {"cluster": cluster, "task": {"type": task, "index": 0}, "job": {"worker_pool_specs": pools}}
    return {"CLUSTER_SPEC": json.dumps(spec), **extra}


@pytest.mark.parametrize(
    ("machine_type", "reducers", "expected", "reduction_server", "gpudirect"),
    [
        ("n1-highmem-96", 16, net_plugin.REDUCTION_SERVER_PLUGIN, True, None),
        ("a2-highgpu-8g", 2, net_plugin.REDUCTION_SERVER_PLUGIN, True, None),
        ("g2-standard-96", 4, net_plugin.REDUCTION_SERVER_PLUGIN, True, None),
        ("a2-highgpu-8g", 0, "none needed (NCCL's own sockets)", False, None),
        ("a3-highgpu-8g", 0, "Vertex's GPUDirect-TCPX plugin", False, "GPUDirect-TCPX"),
        ("a3-megagpu-8g", 0, "Vertex's GPUDirect-TCPXO plugin", False, "GPUDirect-TCPXO"),
        ("a3-ultragpu-8g", 0, "Vertex's GPUDirect-RDMA plugin", False, "GPUDirect-RDMA"),
        ("a4-highgpu-8g", 0, "Vertex's GPUDirect-RDMA plugin", False, "GPUDirect-RDMA"),
        # A hand-made job with reducers on A3: GPUDirect still wins, the reduction-server plugin is not wanted.
        ("a3-megagpu-8g", 32, "Vertex's GPUDirect-TCPXO plugin", False, "GPUDirect-TCPXO"),
    ],
)
def test_the_expected_net_plugin_per_machine_family_and_pool_layout(
    machine_type, reducers, expected, reduction_server, gpudirect
):
    """Guards issue 17 item 6: with Reduction Server the reduction-server plugin is expected, on A3/A4 the GPUDirect
    plugin, never the reduction-server one."""
    decided = net_plugin.plan(net_plugin.machine_type(job_env(machine_type, reducers)),
                              net_plugin.reducers_in_job(job_env(machine_type, reducers)))  # fmt: skip
    assert decided == net_plugin.NetPluginPlan(expected, reduction_server, gpudirect)


def test_a_pool_2_that_runs_another_image_is_not_reduction_server():
    """Guards issue 17 item 6: only a pool 2 running the reductionserver image counts as reducers."""
    env = job_env("n1-highmem-96", reducers=2)
    spec = json.loads(env["CLUSTER_SPEC"])
    spec["job"]["worker_pool_specs"][2]["container_spec"]["image_uri"] = "gcr.io/me/parameter-server"
    assert not net_plugin.reducers_in_job({"CLUSTER_SPEC": json.dumps(spec)})
    assert net_plugin.reducers_in_job(env)
    assert not net_plugin.reducers_in_job(job_env("n1-highmem-96"))


def plugin(folder: Path, name: str = "libnccl-net.so") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"\x7fELF")
    return folder / name


def test_the_library_is_searched_as_the_loader_and_nccl_do(tmp_path):
    """Guards issue 17 item 6: LD_LIBRARY_PATH before the system folders; NCCL_NET_PLUGIN=NAME means the file NAME
    or libnccl-net-NAME.so (NVIDIA/nccl src/plugin/net.cc)."""
    system = tmp_path / "usr-lib"
    image_plugin = plugin(system)
    vertex_plugin = plugin(tmp_path / "vertex" / "lib64")
    named = plugin(tmp_path / "vertex" / "lib64", "libnccl-net-gib.so")
    dirs = [str(system)]

    assert net_plugin.library_nccl_would_load({}, dirs) == image_plugin
    assert net_plugin.library_nccl_would_load({"LD_LIBRARY_PATH": str(vertex_plugin.parent)}, dirs) == vertex_plugin
    env = {"LD_LIBRARY_PATH": str(named.parent), "NCCL_NET_PLUGIN": "gib"}
    assert net_plugin.library_nccl_would_load(env, dirs) == named
    assert net_plugin.library_nccl_would_load({"NCCL_NET_PLUGIN": str(named)}, dirs) == named
    assert net_plugin.library_nccl_would_load({}, [str(tmp_path / "empty")]) is None


def events(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_reduction_server_without_its_plugin_warns_loudly_and_does_not_stop(tmp_path, capsys):
    """Guards issue 17 item 6: reducers in the job but no plugin in the image is a loud warning, not a failure."""
    decided = net_plugin.check_before_launch(job_env("a2-highgpu-8g", reducers=2), [str(tmp_path / "nothing")])

    assert decided.reduction_server
    [warning] = events(capsys)
    assert warning["severity"] == "WARNING"
    assert warning["message"].startswith("REDUCTION SERVER WILL NOT BE USED")
    assert "google-reduction-server" in warning["message"]


def test_reduction_server_with_its_plugin_says_which_library(tmp_path, capsys):
    """Guards issue 17 item 6: the plugin found is logged with its path."""
    library = plugin(tmp_path / "usr-lib")
    net_plugin.check_before_launch(job_env("a2-highgpu-8g", reducers=2), [str(library.parent)])

    [line] = events(capsys)
    assert (line["severity"], line["message"]) == ("INFO", "NCCL NET plugin expected")
    assert line["library"] == str(library) and line["expected"] == net_plugin.REDUCTION_SERVER_PLUGIN


def test_on_a3_the_images_own_plugin_shadowing_gpudirect_is_warned_about(tmp_path, capsys):
    """Guards issue 17 item 6: on A3 the image's libnccl-net.so (google-reduction-server's) must not be what NCCL
    opens; when Vertex's plugin comes first on LD_LIBRARY_PATH, the expected GPUDirect plugin is logged."""
    system = [str(plugin(tmp_path / "usr-lib").parent)]
    net_plugin.check_before_launch(job_env("a3-highgpu-8g"), system)
    [shadowed] = events(capsys)
    assert shadowed["severity"] == "WARNING" and "shadows GPUDirect" in shadowed["message"]

    vertex = plugin(tmp_path / "tcpx" / "lib64")
    decided = net_plugin.check_before_launch(job_env("a3-highgpu-8g", LD_LIBRARY_PATH=str(vertex.parent)), system)
    [line] = events(capsys)
    assert line["message"] == "NCCL NET plugin expected" and line["library"] == str(vertex)
    assert line["expected"] == "Vertex's GPUDirect-TCPX plugin" and not decided.reduction_server


def test_the_plugin_nccl_loaded_is_read_from_the_process_maps(tmp_path, capsys):
    """Guards issue 17 item 6: after NCCL started, the loaded plugin is logged (whatever NCCL_DEBUG is); none
    loaded where one was expected is a warning."""
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
        "7f20-7f30 r-xp 00000000 08:01 2 /usr/local/lib/libnccl-net.so\n"
        "7f30-7f40 r--p 00001000 08:01 2 /usr/local/lib/libnccl-net.so\n"
    )
    net_plugin.report_loaded(job_env("a2-highgpu-8g", reducers=2), maps)
    [loaded] = events(capsys)
    assert loaded["message"] == "NCCL NET plugin loaded" and loaded["loaded"] == ["/usr/local/lib/libnccl-net.so"]

    maps.write_text("7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libnccl.so.2\n")
    net_plugin.report_loaded(job_env("a2-highgpu-8g", reducers=2), maps)
    [missing] = events(capsys)
    assert missing["severity"] == "WARNING"
    assert missing["message"] == "NCCL loaded no NET plugin; it uses its own sockets"
