"""Many GPUs, one run: the node checked before torchrun (GPUs, NCCL network, /dev/shm), process group, collectives."""
