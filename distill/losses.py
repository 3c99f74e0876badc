"""Distillation losses (a registry keyed by name) and the layer-to-layer transfer terms."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hinton et al.: KL(teacher_T || student_T) * T^2, so gradients keep their size as T changes.  (B, C)."""
    t = temperature
    return F.kl_div(F.log_softmax(student_logits / t, -1), F.log_softmax(teacher_logits / t, -1),
                    log_target=True, reduction="batchmean") * (t * t)


def logit_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Tang et al. 2019: MSE between raw logits (temperature unused)."""
    return F.mse_loss(student_logits, teacher_logits)


def lm_losses(logits: torch.Tensor, windows: torch.Tensor, scored: torch.Tensor | None = None,
              topk_ids: torch.Tensor | None = None, topk_logits: torch.Tensor | None = None,
              t: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(next-token cross-entropy, top-k KL * t^2) of a causal LM's batch. logits (B, T, V) for windows (B, T + 1) of
    ids; the cross-entropy is the mean over all B * T positions. scored (B,) bool marks the S windows with a cached
    teacher, topk_ids / topk_logits (S, T, k) in the model's ids: the KL is Hinton's KL(p_T || q_T) per position, p_T
    the teacher's softmax over its k logits (the tail dropped, the k renormalised), q_T the model's softmax over its
    whole vocabulary read at the k ids, the mean over the S * T positions (0 when scored is None or none is)."""
    B, T, V = logits.shape
    sidx = torch.full((B,), -1, dtype=torch.long)
    if scored is not None and topk_ids is not None:
        sidx[scored.cpu()] = torch.arange(int(scored.sum()))
    else:
        topk_ids = topk_logits = None
    return _LMLosses.apply(logits, windows[:, 1:], sidx, topk_ids, topk_logits, float(t))


# Rows of logits turned into float32 at a time. Autograd over F.log_softmax keeps a float32 copy of the logits and
# their log-softmax until the backward pass (145 MB each for 16 x 128 positions over 17,714 ids); here the backward
# pass keeps the logits in their own dtype and a float32 log-sum-exp per position, and works on 128 rows at a time.
ROWS = 128


def _chunks(B: int, T: int):
    for b in range(B):
        for a in range(0, T, ROWS):
            yield b, slice(a, min(a + ROWS, T))


class _LMLosses(torch.autograd.Function):
    """lm_losses, forward and backward by hand. Both terms' gradient with respect to the logits is a softmax minus a
    target distribution: d CE / dz = (softmax(z) - onehot) / (B T), d KL / dz = t (softmax(z / t) - p_T) / (S T), so
    the backward pass recomputes one softmax per chunk of rows (two at t != 1) from the saved log-sum-exps and writes
    the logits' gradient in their own dtype, in one pass where autograd made several over float32 copies. The values
    and gradients agree with autograd's to float rounding (tests/test_gpt_units.py); the time saved per training
    step: docs/results/2026-11-28-fused-lm-loss.md."""

    @staticmethod
    def forward(ctx, z, target, sidx, ids, tl, t):
        B, T, V = z.shape
        dev = z.device
        with torch.autocast(dev.type, enabled=False):
            lse = torch.empty((B, T), dtype=torch.float32, device=dev)
            hard = torch.zeros((), dtype=torch.float64, device=dev)
            soft = torch.zeros((), dtype=torch.float64, device=dev)
            p = lse_t = None
            if ids is not None:
                logp = F.log_softmax(tl.float() / t, -1)  # (S, T, k)
                p = logp.exp()
                lse_t = None if t == 1.0 else torch.empty(ids.shape[:2], dtype=torch.float32, device=dev)
            for b, rows in _chunks(B, T):
                zf = z[b, rows].float()
                lse[b, rows] = torch.logsumexp(zf, -1)
                hard += (lse[b, rows] - zf.gather(-1, target[b, rows, None])[:, 0]).sum(dtype=torch.float64)
                if (s := int(sidx[b])) < 0 or p is None:
                    continue
                if t == 1.0:
                    norm = lse[b, rows]
                else:
                    zf = zf / t
                    norm = lse_t[s, rows] = torch.logsumexp(zf, -1)
                logq = zf.gather(-1, ids[s, rows]) - norm[:, None]
                soft += (p[s, rows] * (logp[s, rows] - logq)).sum(dtype=torch.float64)
        n_scored = 0 if p is None else p.shape[0] * T
        ctx.save_for_backward(z, target, sidx, lse, ids, p, lse_t)
        ctx.t, ctx.n_scored = t, n_scored
        return (hard / (B * T)).float(), (soft / max(n_scored, 1) * t * t).float()

    @staticmethod
    def backward(ctx, grad_hard, grad_soft):
        z, target, sidx, lse, ids, p, lse_t = ctx.saved_tensors
        t = ctx.t
        B, T, V = z.shape
        ch = grad_hard.float() / (B * T)
        cs = grad_soft.float() * t / max(ctx.n_scored, 1)
        g = torch.empty_like(z)
        with torch.autocast(z.device.type, enabled=False):
            for b, rows in _chunks(B, T):
                zf = z[b, rows].float()
                q = torch.exp(zf - lse[b, rows, None])  # softmax(z)
                gb = q * ch
                gb.scatter_add_(-1, target[b, rows, None], (-ch).expand(gb.shape[0], 1))
                if (s := int(sidx[b])) >= 0 and p is not None:
                    gb += (q if t == 1.0 else torch.exp(zf / t - lse_t[s, rows, None])) * cs
                    gb.scatter_add_(-1, ids[s, rows], p[s, rows] * -cs)  # scatter_add: two top-k ids may map to one
                g[b, rows] = gb
        return g, None, None, None, None, None


LOGIT_LOSSES = {"kl": soft_kl, "mse": logit_mse}


def distill_loss(student_logits, teacher_logits, labels, *, kind: str = "kl", temperature: float = 2.0,
                 alpha: float = 0.9, has_label: torch.Tensor | None = None, hard_share: float = 1.0) -> torch.Tensor:
    """alpha * soft loss + (1 - alpha) * cross-entropy on the gold labels.

    has_label (B,) bool marks rows with a gold label (augmented texts have none: teacher only). hard_share
    scales the cross-entropy, a mean over the labelled rows only (distributed.Rows.share_where).
    """
    soft = LOGIT_LOSSES[kind](student_logits, teacher_logits, temperature)
    if alpha >= 1.0:
        return soft
    if has_label is None:
        has_label = torch.ones(labels.shape[0], dtype=torch.bool)
    if has_label.any():
        hard = F.cross_entropy(student_logits[has_label], labels[has_label])
    else:
        hard = student_logits.sum() * 0.0
    if hard_share != 1.0:
        hard = hard * hard_share
    return alpha * soft + (1 - alpha) * hard


def hidden_mse(projected: torch.Tensor, teacher_hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TinyBERT hidden-state transfer: MSE(W s, t) over real tokens, given the projected student states W s.
    (B, T, Dt), (B, T, Dt), mask (B, T)."""
    m = mask.unsqueeze(-1).to(projected.dtype)
    diff = (projected - teacher_hidden) ** 2 * m
    return diff.sum() / (m.sum() * teacher_hidden.shape[-1]).clamp(min=1.0)


def attention_mse(student_attn: torch.Tensor, teacher_attn: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Attention transfer between maps averaged over heads (head counts differ).  (B, H, T, T) each."""
    s = student_attn.mean(1)  # (B, T, T)
    t = teacher_attn.mean(1)
    m = (mask.unsqueeze(1) * mask.unsqueeze(2)).to(s.dtype)  # (B, T, T)
    return (((s - t) ** 2) * m).sum() / m.sum().clamp(min=1.0)
