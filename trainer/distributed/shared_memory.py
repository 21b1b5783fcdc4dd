"""`/dev/shm`, where NCCL puts the buffers that processes on one machine exchange through. Docker gives a
container 64 MB unless told otherwise, and NCCL then fails at start-up or mid-run ("Error while creating
shared memory segment") with several processes per node; the size is logged, and a small one warned about,
before any worker starts."""

from __future__ import annotations

import os

from trainer import logs

SHM = "/dev/shm"
ENOUGH_BYTES = 1 << 30  # 1 GiB: NCCL's buffers for 8 local ranks with room to spare


def size_bytes(path: str = SHM) -> int | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_frsize * stats.f_blocks


def advice(size: int | None, processes_per_node: int, path: str = SHM) -> str | None:
    """A warning when several processes will share a small (or missing) shared-memory folder, else None."""
    if processes_per_node < 2 or (size is not None and size >= ENOUGH_BYTES):
        return None
    return (
        f"{path} holds {size} bytes, less than {ENOUGH_BYTES} for {processes_per_node} processes on this node; "
        "NCCL may fail to create its shared memory segments (give the container a larger /dev/shm)"
    )


def check(processes_per_node: int, path: str = SHM) -> None:
    size = size_bytes(path)
    logs.log("shared memory", path=path, bytes=size)
    warning = advice(size, processes_per_node, path)
    if warning:
        logs.warning(warning)
