"""Multi-process training through torchrun: process group, rank roles, small collectives.

`torchrun --nproc_per_node=N -m seq2seq train …` sets RANK/WORLD_SIZE/LOCAL_RANK; without them
everything here is a no-op for a single process, so the trainer has one code path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    """This process's place among the training processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes checkpoints, logs and progress bars."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def from_env() -> Dist:
    """Read torchrun's environment (a single process when it is absent)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    return Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def setup(info: Dist, device: torch.device) -> None:
    """Join the process group: nccl for CUDA, gloo for CPU."""
    if not info.enabled or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def teardown(info: Dist) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def device_for(info: Dist, device: torch.device) -> torch.device:
    """Each process on a GPU machine takes the GPU of its local rank."""
    if info.enabled and device.type == "cuda" and device.index is None:
        return torch.device("cuda", info.local_rank)
    return device


def all_sum(values: list[float], info: Dist, device: torch.device) -> list[float]:
    """Element-wise sum over all processes (float64, so token counts stay exact)."""
    if not info.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def barrier(info: Dist) -> None:
    if info.enabled:
        dist.barrier()


# How long the other ranks wait for rank 0's final choice (train.final_choice, average_last),
# which decodes the whole valid set once per candidate: minutes to hours, past the collective
# timeout of the process group (10 minutes under NCCL). A rank 0 that crashes still ends the
# wait at once (its connection closes); only a hung one is waited for this long.
LONG_WAIT = timedelta(hours=24)


def new_waiting_group(info: Dist):
    """A gloo group of every rank whose collectives time out after LONG_WAIT (None without
    DDP); every rank calls this together, before the wait it is made for."""
    if not info.enabled:
        return None
    # gloo whatever the training backend: waiting is all it does, on the CPU, with no NCCL
    # communicator (and its watchdog) held open on the GPU for hours.
    return dist.new_group(backend="gloo", timeout=LONG_WAIT)


def wait_in(group, info: Dist) -> None:
    """Every rank waits for the others in `group` (made by new_waiting_group), then leaves it."""
    if group is None or not info.enabled:
        return
    try:
        dist.barrier(group=group)
    finally:
        dist.destroy_process_group(group)


def broadcast(obj, info: Dist):
    """Rank 0's value of a picklable object, on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj, info: Dist) -> list:
    """Every rank's value of a picklable object, in rank order, on every rank."""
    if not info.enabled:
        return [obj]
    out: list = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


@contextmanager
def main_first(info: Dist) -> Iterator[None]:
    """Rank 0 runs the block first (training the tokenizer, filling the datasets cache); the
    others run it after, finding the files made and the cache warm instead of making copies."""
    if not info.is_main:
        barrier(info)
    yield
    if info.is_main:
        barrier(info)
