"""Token-level distillation of a causal LM from cached teacher top-k logits, and plain LM training.

Soft loss (Hinton et al.), per position: KL(p_T || q_T) * T^2, where p_T is the teacher's softmax at
temperature T over its cached top-k logits (the tail beyond k is dropped and the k renormalised) and q_T
the student's softmax at T over its whole vocabulary, read at the top-k tokens' student ids. Teacher tokens
outside the student's vocabulary land on its "other" id. Mixed with next-token cross-entropy:
loss = alpha * soft + (1 - alpha) * CE.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from distill.train import TrainOptions, fit
from pipeline.config import BaselineSection, DistillSection


def window_batches(n: int, batch_size: int, epochs: float, seed: int) -> tuple[Iterator[np.ndarray], int]:
    """Shuffled index batches for a fractional number of epochs; returns (iterator, total steps)."""
    per_epoch = math.ceil(n / batch_size)
    total = max(1, math.ceil(epochs * per_epoch))

    def gen():
        rng, done = np.random.default_rng(seed), 0
        while True:
            order = rng.permutation(n)
            for i in range(0, n, batch_size):
                if done == total:
                    return
                yield order[i: i + batch_size]
                done += 1

    return gen(), total


def soft_kl_topk(logits: torch.Tensor, topk_ids: torch.Tensor, topk_logits: torch.Tensor, t: float) -> torch.Tensor:
    """logits (B, T, V) student; topk_ids (B, T, k) in student ids; topk_logits (B, T, k) -> scalar."""
    logq = F.log_softmax(logits.float() / t, -1).gather(-1, topk_ids)  # (B, T, k)
    logp = F.log_softmax(topk_logits.float() / t, -1)  # (B, T, k)
    return (logp.exp() * (logp - logq)).sum(-1).mean() * (t * t)


def distill_lm(student, windows: np.ndarray, topk_ids: np.ndarray | None, topk_logits: np.ndarray | None,
               d: DistillSection, seed: int, opts: TrainOptions = TrainOptions()) -> dict:
    """Train student (a causal LM over student ids) on windows (N + M, T+1); the first N have the cached
    teacher top-k (N, T, k), already mapped to student ids, the other M only their next tokens (more
    text for the price of the student's steps, not the teacher's). topk_ids None: cross-entropy only."""
    x_all = torch.from_numpy(windows)
    n_teacher = 0 if topk_ids is None else len(topk_ids)
    alpha = d.alpha if topk_ids is not None else 0.0
    batches, total = window_batches(len(windows), d.batch_size, d.epochs, seed)
    parts = {"soft": [], "hard": []}

    def step(model, b) -> torch.Tensor:
        b = np.asarray(b)
        x = x_all[b]  # (B, T + 1)
        logits = model(input_ids=x[:, :-1]).logits  # (B, T, V)
        hard = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))
        parts["hard"].append(hard.item())
        scored = b < n_teacher  # rows with a cached teacher distribution
        if alpha <= 0 or not scored.any():
            return hard
        tb = b[scored]
        soft = soft_kl_topk(logits[torch.from_numpy(scored)], torch.from_numpy(topk_ids[tb]),
                            torch.from_numpy(topk_logits[tb]), d.temperature)
        parts["soft"].append(soft.item())
        return alpha * soft + (1 - alpha) * hard

    losses = fit(student, batches, step, total_steps=total, lr=d.lr, weight_decay=d.weight_decay,
                 warmup_fraction=d.warmup_fraction, desc="distill student", lr_hint="distill.lr", opts=opts)["losses"]
    tail = max(1, total // 10)
    return {"steps": total, "windows": len(windows), "teacher_windows": n_teacher, "alpha": alpha, "temperature": d.temperature,
            "final_loss": float(np.mean(losses[-tail:])),
            "final_train_ce": float(np.mean(parts["hard"][-tail:])),
            "final_soft_kl": float(np.mean(parts["soft"][-tail:])) if parts["soft"] else None}


def train_lstm_lm(model, windows: np.ndarray, b: BaselineSection, seed: int,
                  opts: TrainOptions = TrainOptions()) -> dict:
    """Next-token cross-entropy on windows (N, T+1) of student ids; the state starts at zero per window."""
    x_all = torch.from_numpy(windows)
    batches, total = window_batches(len(windows), b.batch_size, b.epochs, seed)

    def step(m, idx) -> torch.Tensor:
        x = x_all[np.asarray(idx)]  # (B, T + 1)
        h, c = model.zero_state(len(idx))
        logits, _, _ = m(x[:, :-1], h, c)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))

    losses = fit(model, batches, step, total_steps=total, lr=b.lr, weight_decay=0.0, warmup_fraction=0.05,
                 desc="lstm language model", lr_hint="baseline.lr", opts=opts)["losses"]
    tail = max(1, total // 10)
    return {"steps": total, "windows": len(windows), "final_train_ce": float(np.mean(losses[-tail:]))}
