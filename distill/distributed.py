"""Data-parallel helpers for torchrun / `accelerate launch`: both set RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, so reading the environment covers either launcher, one node or many.

Every rank runs the same stage code. Batches are the single-process batches, each split across the ranks
(rank r takes rows r, r + W, ...), DistributedDataParallel averages the gradients, and each rank's loss is
weighted by its share of the batch (Rows): so a run on W processes follows the single-process run up to
floating-point summation order, whether or not the batch splits evenly.
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


def finish() -> None:
    """Leave the process group once every rank is done. A rank that exits with the group still up can abort
    in its teardown ("terminate called without an active exception", SIGABRT) while another rank is still
    writing, which fails the whole torchrun."""
    if enabled() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def shard(batch: Sequence[int]) -> list[int]:
    """This rank's rows of a global batch."""
    return list(batch[rank()::world_size()]) if enabled() else list(batch)


class Rows(list):
    """This rank's rows of one global batch (what fit hands a step_fn), with the weight that makes its loss
    count as its rows do in the batch.

    DDP averages the W ranks' gradients equally, so a rank whose loss is the mean over its n of the batch's
    N rows is weighted n * W / N: the averaged gradient is then the gradient of the mean over all N rows even
    when they do not split evenly (15 rows on 2 ranks: 8 and 7). A rank left without rows (a batch smaller
    than W, e.g. an epoch's last) still runs its step on the batch's first row, weighted 0, because every
    rank must join DDP's gradient all-reduce.
    """

    def __init__(self, rows: Sequence[int], batch: Sequence[int], weight: float):
        super().__init__(rows)
        self.batch = list(batch)
        self.weight = weight

    def take(self, index: Sequence[int]) -> "Rows":
        """The same rows read through index (rows of a subset -> rows of the whole data)."""
        return Rows([index[i] for i in self], [index[i] for i in self.batch], self.weight)

    def share(self, units: float, batch_units: float) -> float:
        """The factor for a loss term that averages over other units than rows (the labelled rows, the real
        tokens): its mean over this rank's `units` becomes its share of the batch's mean over `batch_units`.
        Exactly 1 with one process."""
        if not enabled() or units == 0:  # no units here: the term is 0 on this rank whatever the factor
            return 1.0
        return (units / len(self)) / (batch_units / len(self.batch))

    def share_where(self, selected) -> float:
        """share for a term averaged over the rows i where selected[i] (a bool array over the data's rows)."""
        if not enabled():
            return 1.0
        return self.share(int(selected[list(self)].sum()), int(selected[self.batch].sum()))

    def batch_value(self, value: float) -> float:
        """The batch's value of a per-rank mean (rescaled by share where it has one), the same on every rank:
        every rank must call it, as it is an all-reduce."""
        if not enabled():
            return value
        return all_sum(value * self.weight) / world_size()


def rows_of(batch: Sequence[int]) -> Rows:
    """This rank's Rows of a global batch."""
    if not enabled():
        return Rows(batch, batch, 1.0)
    mine = shard(batch)
    if not mine:
        return Rows(list(batch[:1]), batch, 0.0)
    return Rows(mine, batch, len(mine) * world_size() / len(batch))


def all_sum(value: float) -> float:
    """The sum of a number over the ranks (on every rank)."""
    if not enabled():
        return value
    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    dist.all_reduce(t)
    return float(t.item())


def gather(obj: Any) -> list[Any]:
    """Every rank's obj, in rank order (on every rank)."""
    if not enabled():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
