"""How trainer.launch reads the node's place in a Vertex job and builds the torchrun command line."""

from __future__ import annotations

import json

import pytest

from trainer.distributed import accelerators, nccl_env, shared_memory
from trainer.launch import LOCAL_PROCS_ENV, Cluster, cluster_from_env, parse_args, processes_per_node, torchrun_argv


def cluster_spec(task_type: str, index: int, workers: int = 2, reducers: int = 3) -> str:
    return json.dumps({
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
            "workerpool1": [f"cmle-training-workerpool1-ab-{i}:2222" for i in range(workers)],
            "workerpool2": [f"cmle-training-workerpool2-ab-{i}:2222" for i in range(reducers)],
        },
        "environment": "cloud",
        "task": {"type": task_type, "index": index, "trial": ""},
        "job": {},
    })  # fmt: skip


def test_vertex_pytorch_variables_give_nodes_node_rank_and_master():
    env = {"WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "cmle-training-workerpool0-ab-0", "MASTER_PORT": "3333"}
    assert cluster_from_env(env) == Cluster(nnodes=3, node_rank=2, master_addr="cmle-training-workerpool0-ab-0",
                                            master_port=3333)  # fmt: skip


def test_cluster_spec_is_the_fallback_and_reduction_server_nodes_are_not_counted():
    primary = cluster_from_env({"CLUSTER_SPEC": cluster_spec("workerpool0", 0)})
    second_worker = cluster_from_env({"CLUSTER_SPEC": cluster_spec("workerpool1", 1)})
    assert primary == Cluster(nnodes=3, node_rank=0, master_addr="cmle-training-workerpool0-ab-0", master_port=2222,
                              local_addr="cmle-training-workerpool0-ab-0")  # fmt: skip
    assert second_worker.nnodes == 3 and second_worker.node_rank == 2


def test_a_reducer_node_is_refused_with_a_reason():
    with pytest.raises(ValueError, match=r"workerpool2.*runs no trainer"):
        cluster_from_env({"CLUSTER_SPEC": cluster_spec("workerpool2", 0)})


def test_no_vertex_environment_means_one_node():
    assert cluster_from_env({}) == Cluster(nnodes=1, node_rank=0)


def test_process_count_prefers_the_flag_then_gpus_then_the_local_stack():
    env = {LOCAL_PROCS_ENV: "3"}
    assert processes_per_node(2, env, visible_gpus=8) == 2
    assert processes_per_node(None, env, visible_gpus=8) == 8
    assert processes_per_node(None, env, visible_gpus=0) == 3
    assert processes_per_node(None, {}, visible_gpus=0) == 1


def test_more_processes_than_gpus_is_refused_before_torchrun_naming_the_count():
    # On an H100, a second process on the one GPU died with "invalid device ordinal" inside torchrun.
    refusal = accelerators.too_many_processes(2, visible_gpus=1)
    assert refusal is not None and "--nproc-per-node 2" in refusal and "1 visible GPU" in refusal
    assert accelerators.too_many_processes(8, visible_gpus=8) is None
    assert accelerators.too_many_processes(1, visible_gpus=8) is None
    assert accelerators.too_many_processes(4, visible_gpus=0) is None  # CPU (gloo): any number of processes


def test_multi_node_torchrun_meets_at_the_primary_with_c10d_and_bounded_restarts():
    argv = torchrun_argv(Cluster(2, 1, "10.0.0.2", 3333), nproc=4, max_restarts=2, run_id="job-7",
                         train_args=["--data", "gs://b/d", "--epochs", "3"])  # fmt: skip
    assert argv == [
        "--nproc-per-node", "4", "--max-restarts", "2",
        "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.2:3333", "--rdzv-id", "job-7",
        "--rdzv-conf", "is_host=false,join_timeout=1800,read_timeout=1800",
        "--module", "trainer.train", "--data", "gs://b/d", "--epochs", "3",
    ]  # fmt: skip
    primary = torchrun_argv(Cluster(2, 0, "10.0.0.2", 3333), nproc=4, max_restarts=2, run_id="job-7", train_args=[])
    assert "is_host=true,join_timeout=1800,read_timeout=1800" in primary


def test_rendezvous_waits_long_for_late_nodes_and_names_this_node_as_the_others_know_it():
    """Guards issue 17 item 5: read/join timeouts long enough for nodes that pull the image at different times
    (torch's defaults are 60 s and 600 s), and --local-addr from this node's CLUSTER_SPEC address."""
    env = {"WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "cmle-training-workerpool0-ab-0", "MASTER_PORT": "3333",
           "CLUSTER_SPEC": cluster_spec("workerpool1", 1)}  # fmt: skip
    argv = torchrun_argv(cluster_from_env(env), nproc=8, max_restarts=1, run_id="j", train_args=[],
                         rendezvous_timeout=2400)  # fmt: skip
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=false,join_timeout=2400,read_timeout=2400"
    assert argv[argv.index("--local-addr") + 1] == "cmle-training-workerpool1-ab-1"


def test_a_small_dev_shm_is_warned_about_when_processes_share_the_node():
    """Guards issue 17 item 5: /dev/shm is checked at start-up (Docker's default is 64 MB)."""
    assert "64000000 bytes" in shared_memory.advice(64_000_000, processes_per_node=8)
    assert shared_memory.advice(64_000_000, processes_per_node=1) is None
    assert shared_memory.advice(16 << 30, processes_per_node=8) is None
    assert shared_memory.size_bytes("/dev/shm") is None or shared_memory.size_bytes("/dev/shm") > 0


def test_single_node_torchrun_is_standalone():
    argv = torchrun_argv(Cluster(1, 0), nproc=2, max_restarts=3, run_id="x", train_args=[])
    assert "--standalone" in argv and "--rdzv-endpoint" not in argv


def test_arguments_launch_does_not_know_pass_through_to_the_trainer():
    args, rest = parse_args(["--nproc-per-node", "2", "--data", "gs://b/d", "--max-restarts", "1", "--nproc", "9"])
    assert (args.nproc_per_node, args.max_restarts) == (2, 1)
    assert rest == ["--data", "gs://b/d", "--nproc", "9"]  # no abbreviations: --nproc is the trainer's business


def test_vertex_rdma_nccl_script_is_sourced_when_present(tmp_path):
    """Guards issue 17 item 6: on RDMA machines the variables of Vertex's set_nccl_env.sh reach the workers."""
    script = tmp_path / "set_nccl_env.sh"
    script.write_text(
        'export NCCL_NET=gIB\nexport NCCL_CROSS_NIC=0\nexport LD_LIBRARY_PATH="/g/lib:$LD_LIBRARY_PATH"\n'
    )
    added = nccl_env.rdma_environment({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/x"}, script)
    assert added == {"NCCL_NET": "gIB", "NCCL_CROSS_NIC": "0", "LD_LIBRARY_PATH": "/g/lib:/x"}
    assert nccl_env.rdma_environment({"PATH": "/usr/bin"}, tmp_path / "absent.sh") == {}
