"""Data-parallel helpers for torchrun / `accelerate launch`: both set RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, so reading the environment covers either launcher, one node or many.

Every rank runs the same stage code. Batches are the single-process batches, each split across the ranks
(rank r takes rows r, r + W, ...), and DistributedDataParallel averages the gradients: so a run on W
processes follows the single-process run up to floating-point summation order.
"""
from __future__ import annotations

import datetime
import os
from typing import Any, Sequence

import torch
import torch.distributed as dist


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def enabled() -> bool:
    return world_size() > 1


def init() -> None:
    """Join the process group once: NCCL when every rank has a GPU, gloo on CPU."""
    if not enabled() or dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    # Rank 0 alone runs the non-training stages (eval, export...) while the others wait here: be patient.
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(hours=3))


def barrier() -> None:
    if enabled() and dist.is_initialized():
        dist.barrier()


def shard(batch: Sequence[int]) -> list[int]:
    """This rank's rows of a global batch."""
    return list(batch[rank()::world_size()]) if enabled() else list(batch)


def gather(obj: Any) -> list[Any]:
    """Every rank's obj, in rank order (on every rank)."""
    if not enabled():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
