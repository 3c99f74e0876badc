"""The one optimisation loop every trainer here uses: AdamW with linear warm-up and decay, gradient
accumulation, optional bf16/fp16 autocast, DistributedDataParallel under torchrun, resumable checkpoints,
a progress bar, and a clear stop on a non-finite loss."""
from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from distill import distributed as D
from distill.batching import epoch_stream, pad, param_device, steps_for
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainOptions:
    grad_accum: int = 1  # batches per optimizer step
    precision: str = "fp32"  # fp32 | bf16 | fp16 (fp16 needs CUDA)
    checkpoint_every: int = 0  # optimizer steps between resumable checkpoints (0 = none)
    checkpoint_dir: Path | None = None  # where this stage keeps them until it finishes
    key: str = ""  # identifies the stage's settings and inputs: a checkpoint with another key is ignored
    fail_at_step: int = 0  # tests only: raise KeyboardInterrupt after this many batches, like a kill


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def linear_schedule(opt: torch.optim.Optimizer, total: int, warmup_fraction: float):
    warm = max(1, int(total * warmup_fraction))

    def factor(step: int) -> float:
        return (step + 1) / warm if step < warm else max(0.0, (total - step) / max(1, total - warm))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _rng_state() -> dict:
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])]}


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    random.setstate(tuple(s["python"][:1]) + (tuple(s["python"][1]),) + tuple(s["python"][2:]))
    n = s["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))


def _autocast(precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device().type, dtype=dtype)


def _ckpt_path(opts: TrainOptions, desc: str) -> Path | None:
    if opts.checkpoint_dir is None or opts.checkpoint_every <= 0:
        return None
    return opts.checkpoint_dir / (re.sub(r"[^a-z0-9]+", "-", desc.lower()).strip("-") + ".pt")


def fit(model: nn.Module, batches: Iterable, step_fn: Callable[[nn.Module, object], torch.Tensor], *,
        total_steps: int, lr: float, weight_decay: float, warmup_fraction: float, desc: str, lr_hint: str,
        opts: TrainOptions = TrainOptions(), clip: float = 1.0, records: dict[str, list] | None = None) -> dict:
    """Train model with step_fn(model, rows) -> mean loss over rows (a distributed.Rows list of indices).

    batches yields total_steps global batches (lists of row indices); under torchrun each rank keeps its
    share (distributed.rows_of), weighted so the averaged gradient is the whole batch's, and a term that
    averages over other units than rows rescales itself by rows.share. Returns {"losses" (each step's
    loss over its whole batch, on every rank), "optimizer_steps", "resumed_from"}. records: lists step_fn
    appends to (a loss's terms, each on its own): checkpoints keep them, so a resumed run reports what an
    uninterrupted one does.
    """
    D.init()
    dev = device()
    model.to(dev)
    wrapped: nn.Module = model
    if D.enabled():
        wrapped = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    params = [p for p in model.parameters() if p.requires_grad]
    accum = max(1, opts.grad_accum)
    opt_steps = math.ceil(total_steps / accum)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = linear_schedule(opt, opt_steps, warmup_fraction)
    scaler = torch.amp.GradScaler("cuda", enabled=opts.precision == "fp16")  # disabled: each call a pass-through
    losses: list[float] = []
    start = 0
    ckpt = _ckpt_path(opts, desc)
    state = _load_checkpoint(ckpt, desc, opts.key, total_steps) if ckpt is not None and ckpt.is_file() else None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        losses, start = list(state["losses"]), int(state["step"])
        for name, values in (records or {}).items():
            values[:] = state.get("records", {}).get(name, [])
        _set_rng_state(state["rng"][D.rank()] if D.rank() < len(state["rng"]) else state["rng"][0])
    batches = itertools.islice(iter(batches), start, total_steps)  # seeded stream: skip what was done
    model.train()
    bar = tqdm(total=total_steps, initial=start, desc=desc, unit="step", dynamic_ncols=True, mininterval=2.0,
               disable=not D.is_main())
    for step, batch in enumerate(batches, start):
        if opts.fail_at_step and step == opts.fail_at_step:
            raise KeyboardInterrupt(f"simulated kill at step {step}")
        last_micro = (step + 1) % accum == 0 or step + 1 == total_steps
        sync = contextlib.nullcontext() if (last_micro or not D.enabled()) else wrapped.no_sync()
        rows = D.rows_of(batch)
        with sync:
            with _autocast(opts.precision):
                loss = step_fn(wrapped, rows)
            batch_loss = rows.batch_value(loss.item())  # an all-reduce: before any rank can raise below
            if not math.isfinite(batch_loss):
                raise PipelineError(f"{desc}: the loss became {batch_loss} at step {step + 1}/{total_steps}. "
                                    f"Lower the learning rate ({lr_hint} = {lr:g}) or check the data for broken labels")
            scaler.scale((loss * rows.weight if D.enabled() else loss) / accum).backward()
        losses.append(batch_loss)
        if last_micro:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, clip)
            scaler.step(opt)
            scaler.update()
            sched.step()
            opt.zero_grad(set_to_none=True)
            n_opt = (step + 1 + accum - 1) // accum
            if ckpt is not None and n_opt % opts.checkpoint_every == 0 and step + 1 < total_steps:
                _save(ckpt, model, opt, sched, losses, step + 1, total_steps, opts.key, records or {})
        bar.update(1)
        if step % 10 == 0:
            recent = losses[-50:]
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.4f}")
    bar.close()
    model.eval()
    if not losses:
        raise PipelineError(f"{desc}: no training step ran; is the training data empty?")
    return {"losses": losses, "optimizer_steps": opt_steps, "resumed_from": start}


def _load_checkpoint(path: Path, desc: str, key: str, total_steps: int) -> dict | None:
    """The resume checkpoint, or None for one that must not be resumed: it is deleted with a warning saying why,
    and training starts over, as it would without one. Either it cannot be read (cut short by a power cut or a
    full disk, before the save below fsynced), and every re-run would fail on it; or a killed run with other
    settings or inputs made it (its stage key or step count differs): resuming it would carry that run's
    weights into this one, and this run's first save would replace it anyway."""
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # torch raises EOFError, RuntimeError (zip), UnpicklingError, ... for a damaged file
        state, why = None, f"cannot be read ({type(e).__name__}: {str(e)[:120]})"
    else:
        why = ""
        if not isinstance(state, dict):
            why = "cannot be read (not a checkpoint)"
        elif state.get("key") != key:  # the stage key: its settings, inputs' contents, sources, step revision
            why = (f"was made with other settings or inputs (stage key {str(state.get('key'))[:12]}, this "
                   f"run's {key[:12]})")
        elif state.get("total_steps") != total_steps:
            why = f"was made for {state.get('total_steps')} steps, this run takes {total_steps}"
    if why:
        log.warning("WARNING: %s: the resume checkpoint %s %s; it is deleted and training starts from step 0",
                    desc, path, why)
        D.barrier()  # every rank has read it before the main one removes it
        if D.is_main():
            path.unlink(missing_ok=True)
        return None
    return state


def _save(path: Path, model, opt, sched, losses, step, total_steps, key, records: dict) -> None:
    rng = D.gather(_rng_state())  # every rank's RNG, so each resumes its own dropout stream
    if not D.is_main():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "losses": losses, "step": step, "total_steps": total_steps, "key": key, "rng": rng,
                    "records": records}, f)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename: a power cut leaves the old checkpoint or the new one
    tmp.replace(path)  # a kill during the save leaves the previous checkpoint intact


def fit_texts(model: nn.Module, loss_fn, ids: list[list[int]], pad_id: int, batch_size: int, epochs: float,
              seed: int, **fit_args) -> dict:
    """fit for `epochs` over token id lists in length-bucketed batches (epoch_stream), each right-padded:
    loss_fn(model, batch, input_ids, attention_mask) -> the loss. Returns the run's summary."""
    steps = steps_for(len(ids), batch_size, epochs)

    def step(m: nn.Module, b: list[int]) -> torch.Tensor:
        return loss_fn(m, b, *pad([ids[i] for i in b], pad_id, device=param_device(m)))

    result = fit(model, epoch_stream(len(ids), [len(s) for s in ids], batch_size, epochs, seed), step,
                 total_steps=steps, **fit_args)
    return {"steps": steps, "optimizer_steps": result["optimizer_steps"],
            "final_loss": float(np.mean(result["losses"][-20:])), "resumed_from_step": result["resumed_from"]}


def tail_mean(values: list[float], steps: int) -> float:
    """The mean of the last tenth of a per-step record (the generation trainers' final losses)."""
    return float(np.mean(values[-max(1, steps // 10):]))
