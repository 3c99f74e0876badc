"""The one optimisation loop every trainer here uses: AdamW, linear warm-up and decay, a progress bar,
and a clear stop on a non-finite loss."""
from __future__ import annotations

import math
import random
from typing import Callable, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from pipeline.errors import PipelineError


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def linear_schedule(opt: torch.optim.Optimizer, total: int, warmup_fraction: float):
    warm = max(1, int(total * warmup_fraction))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def fit(params: Iterable[torch.nn.Parameter], batches: Iterable, step_fn: Callable[[object], torch.Tensor], *,
        total_steps: int, lr: float, weight_decay: float, warmup_fraction: float, desc: str,
        lr_hint: str, clip: float = 1.0) -> list[float]:
    """Run step_fn(batch) -> loss over batches with AdamW. Returns the loss per step."""
    params = [p for p in params if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = linear_schedule(opt, total_steps, warmup_fraction)
    losses: list[float] = []
    bar = tqdm(batches, total=total_steps, desc=desc, unit="step", dynamic_ncols=True, mininterval=2.0)
    for step, batch in enumerate(bar):
        loss = step_fn(batch)
        if not torch.isfinite(loss):
            raise PipelineError(f"{desc}: the loss became {loss.item()} at step {step + 1}/{total_steps}. "
                                f"Lower the learning rate ({lr_hint} = {lr:g}) or check the data for broken labels")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 10 == 0:
            recent = losses[-50:]
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.4f}")
    bar.close()
    if not losses or math.isnan(losses[-1]):
        raise PipelineError(f"{desc}: no training step ran; is the training data empty?")
    return losses
