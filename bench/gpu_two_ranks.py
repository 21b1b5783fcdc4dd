"""Two NCCL ranks on one GPU, without the trainer: NCCL refuses them ("Duplicate GPU detected", NVIDIA/nccl#418).

Run by bench/gpu_checks.sh as `torchrun --standalone --nproc-per-node 2 bench/gpu_two_ranks.py`.
"""

import torch
import torch.distributed as dist

torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))  # eager: NCCL's check runs here
summed = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(summed)
print("rank", dist.get_rank(), "all_reduce on a shared GPU:", summed.tolist(), flush=True)
dist.destroy_process_group()
