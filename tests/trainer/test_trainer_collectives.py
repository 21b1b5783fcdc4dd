"""Every collective the trainer calls outside DDP runs on the process group's device: NCCL refuses CPU tensors
("No backend type associated with device type cpu"), so a CPU tensor handed to a GPU group fails every sharded
GPU run. Held here without a GPU by a backend that serves only (fake) CUDA tensors, like NCCL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from trainer_runs import process_env

TRAINER = Path(__file__).resolve().parents[2] / "trainer"
WORLD = 2


def _rank_program(rank: int, store_path: str, out_path: str) -> None:
    from fake_cuda import BACKEND, use_fake_cuda

    from trainer.data.preprocess import Combine, Preprocessor
    from trainer.distributed import collectives
    from trainer.distributed.process_group import Coordination
    from trainer.model.objective import Objective

    os.environ["LOCAL_RANK"] = str(rank)
    on_fake_cuda = use_fake_cuda(local_rank=rank)
    store = dist.FileStore(store_path, WORLD)
    dist.init_process_group(BACKEND, store=store, rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
    collectives.open_side_group(60)
    device = collectives.group_device()
    rows = pa.table({"x": [float(rank), rank + 2.0, rank + 4.0], "c": ["a", "b", "a"], "y": [0, 1, rank]})
    with on_fake_cuda:
        prep = Preprocessor.fit(rows, "y", "auto", Combine(across_ranks=True))  # sums and gathers over ranks
        stop, checkpoint = Coordination(0.5, first_step=0).agree(1, rank == 1, False, 0.01)
        torch.manual_seed(0)
        model = torch.nn.Linear(prep.num_features, prep.num_outputs)
        # Evaluated on the CPU here, so only the all-reduce of its sums can put them on the group's device.
        cpu = torch.device("cpu")
        objective = Objective(prep)
        local = objective.local_sums(model, prep.features(rows), prep.targets(rows), cpu)
        metrics = objective.evaluate(model, prep.features(rows), prep.targets(rows), cpu)
        epoch_loss = collectives.all_reduce(torch.tensor(1.5).to(device)).cpu().item()
        result = {
            "device": str(device),
            "means": prep.means,
            "class_counts": prep.class_counts,
            "stop": stop,
            "checkpoint": checkpoint,
            "val_rows_metric": metrics["val_accuracy"],
            "local_hits_and_rows": [local[1].item(), local[3].item()],
            "largest": collectives.max_across_ranks(rank + 5),
            "total": collectives.sum_across_ranks(1),
            "epoch_loss": epoch_loss,
            "gathered": collectives.gather_objects({"rank": rank}),
            "from_zero": collectives.from_rank_zero("zero" if rank == 0 else None),
            "collective_devices": sorted(set(dist.group.WORLD.tensor_devices)),
        }
        collectives.wait_for_all()
    collectives.close_side_group()
    dist.destroy_process_group()
    Path(out_path).write_text(json.dumps(result))


def test_every_collective_runs_on_the_groups_device_under_a_backend_that_refuses_cpu_tensors(tmp_path):
    """Guards issue 17 item 1: preprocessing statistics, stop/checkpoint agreement, evaluation sums, epoch loss
    and the across-ranks counts all reach a NCCL-like group on its device; a CPU tensor there would raise."""
    outs = [tmp_path / f"rank-{r}.json" for r in range(WORLD)]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", "from test_trainer_collectives import _rank_program; "
             f"_rank_program({r}, {str(tmp_path / 'store')!r}, {str(outs[r])!r})"],
            env=process_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        for r in range(WORLD)
    ]  # fmt: skip
    try:
        outputs = [process.communicate(timeout=120)[0].decode(errors="replace") for process in ranks]
    finally:
        for process in ranks:
            process.kill()
    assert [p.returncode for p in ranks] == [0, 0], "\n".join(o[-3000:] for o in outputs)

    results = [json.loads(out.read_text()) for out in outs]
    for rank, result in enumerate(results):
        assert result["device"] == f"cuda:{rank}"
        assert result["collective_devices"] == [f"cuda:{rank}"]
        assert result["means"] == [2.5]  # x over both ranks: 0, 2, 4, 1, 3, 5
        assert result["class_counts"] == [3.0, 3.0]  # y: 0, 1, 0 and 0, 1, 1
        assert (result["stop"], result["checkpoint"]) == (True, False)  # rank 1 asked to stop; both do
        assert (result["largest"], result["total"], result["epoch_loss"]) == (6, 2, 3.0)
        assert result["gathered"] == [{"rank": 0}, {"rank": 1}] and result["from_zero"] == "zero"
    # The validation metric is over both ranks' rows: what each rank got right, summed, over the six rows.
    hits = sum(result["local_hits_and_rows"][0] for result in results)
    assert [result["local_hits_and_rows"][1] for result in results] == [3.0, 3.0]
    assert [result["val_rows_metric"] for result in results] == [hits / 6] * WORLD


COLLECTIVE_CALL = re.compile(
    r"\bdist\.(all_reduce|all_gather\w*|broadcast\w*|barrier|reduce\w*|gather\w*|scatter\w*|all_to_all\w*|send|recv)\("
)


def test_no_trainer_module_but_collectives_calls_a_collective_itself():
    """Guards issue 17 item 1: one module places every collective's tensors, so none can bypass it."""
    offenders = {
        path.name: COLLECTIVE_CALL.findall(path.read_text())
        for path in TRAINER.rglob("*.py")
        if path.name != "collectives.py"
    }
    assert {name: calls for name, calls in offenders.items() if calls} == {}


def test_the_gloo_group_communicates_on_the_cpu():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        from trainer.distributed import collectives

        assert collectives.group_device() == torch.device("cpu")
        assert collectives.sum_array(np.array([1.0, 2.0])).tolist() == [1.0, 2.0]
    finally:
        dist.destroy_process_group()
