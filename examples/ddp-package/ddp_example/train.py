"""`python -m ddp_example.train`: fit y = 3x + 1 with DistributedDataParallel, one process per node.

The contract, as Vertex and trainctl give it (README: Your own code):
- in: Vertex's environment on every node: MASTER_ADDR, MASTER_PORT, WORLD_SIZE (nodes), RANK (this node), and
  AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR (gs:// folders under the request's output_dir);
- out: metrics.json in AIP_MODEL_DIR (its numbers reach the `succeeded` event, history and promotion), checkpoints
  in AIP_CHECKPOINT_DIR, resumed from at start (a preemption or a move down the ladder runs the job again into the
  same folders).
Only rank 0 writes. One process per node keeps the example small; on a node with several GPUs start one process per
GPU with torchrun (--nnodes $WORLD_SIZE --node-rank $RANK --master-addr $MASTER_ADDR --master-port $MASTER_PORT).
"""

from __future__ import annotations

import argparse
import io
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def storage_client():
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):  # trainctl's local stack: fake-gcs-server, no credentials
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="local", credentials=AnonymousCredentials())
    return storage.Client()


def blob(uri: str):
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return storage_client().bucket(bucket).blob(name)


def load_checkpoint(folder: str) -> dict | None:
    target = blob(folder.rstrip("/") + "/last.pt")
    if not target.exists():
        return None
    return torch.load(io.BytesIO(target.download_as_bytes()), weights_only=True)


def save_checkpoint(folder: str, state: dict) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    blob(folder.rstrip("/") + "/last.pt").upload_from_string(buffer.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    args = parser.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)  # reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK from the environment
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
    start = 0
    checkpoint = load_checkpoint(os.environ["AIP_CHECKPOINT_DIR"])
    if checkpoint is not None:  # decided before DDP wraps the model, so every rank starts from the same state
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start = checkpoint["epoch"] + 1
    ddp = DistributedDataParallel(model)

    x = torch.linspace(-1, 1, 64).unsqueeze(1)[rank::world]  # each rank its own shard
    y = 3 * x + 1
    loss = torch.tensor(0.0)
    for epoch in range(start, args.epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # DDP all-reduces the gradients across the nodes
        optimizer.step()
        if rank == 0:
            save_checkpoint(os.environ["AIP_CHECKPOINT_DIR"], {"model": model.state_dict(),
                            "optimizer": optimizer.state_dict(), "epoch": epoch})  # fmt: skip

    final = loss.detach().clone()
    dist.all_reduce(final)
    if rank == 0:
        metrics = {"loss": final.item() / world, "world_size": world, "epochs": args.epochs, "resumed_from": start}
        blob(os.environ["AIP_MODEL_DIR"].rstrip("/") + "/metrics.json").upload_from_string(json.dumps(metrics))
        print(json.dumps({"severity": "INFO", "message": "trained", **metrics}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
