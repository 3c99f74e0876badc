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


def soft_kl_topk(logits: torch.Tensor, topk_ids: torch.Tensor, topk_logits: torch.Tensor, t: float) -> torch.Tensor:
    """soft_kl per position against a teacher cached as its top-k logits (generation): p_T is the teacher's
    softmax over its k logits (the tail dropped, the k renormalised), q_T the student's softmax over its whole
    vocabulary read at the k tokens' student ids.  logits (B, T, V), topk_ids / topk_logits (B, T, k)."""
    return _topk_kl(F.log_softmax(logits.float() / t, -1).gather(-1, topk_ids), topk_logits, t)


def _topk_kl(logq: torch.Tensor, topk_logits: torch.Tensor, t: float) -> torch.Tensor:
    """soft_kl_topk from the student's log-probabilities at the teacher's k ids.  logq / topk_logits (B, T, k)."""
    logp = F.log_softmax(topk_logits.float() / t, -1)  # (B, T, k)
    return (logp.exp() * (logp - logq)).sum(-1).mean() * (t * t)


def lm_distill_terms(logits: torch.Tensor, windows: torch.Tensor, scored: torch.Tensor, topk_ids: torch.Tensor,
                     topk_logits: torch.Tensor, t: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(next_token_ce over every row, soft_kl_topk over the rows where scored) of one batch: logits (B, T, V),
    windows (B, T + 1), scored (B,) bool, topk_ids / topk_logits (S, T, k) of the S scored rows.

    At t = 1 both terms read one log-softmax of the logits. Apart, the KL's own log-softmax over the vocabulary, its
    copy of the scored rows and their backward passes made a distillation step 1.6x a cross-entropy step (an LSTM
    over 17,714 ids on 2 CPU cores); shared, 1.1x (docs/results/2026-11-28-distilled-lstm-lm.md). Same values; the
    gradients differ in float rounding only."""
    if t != 1.0:  # the KL's softmax is another one
        return next_token_ce(logits, windows), soft_kl_topk(logits[scored], topk_ids, topk_logits, t)
    logq_all = F.log_softmax(logits.float(), -1)  # (B, T, V)
    hard = F.nll_loss(logq_all.reshape(-1, logq_all.shape[-1]), windows[:, 1:].reshape(-1))
    ids = topk_ids.new_zeros((len(scored), *topk_ids.shape[1:]))  # (B, T, k): gather first, then keep the S rows
    ids[scored] = topk_ids
    return hard, _topk_kl(logq_all.gather(-1, ids)[scored], topk_logits, t)


def next_token_ce(logits: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
    """Causal LM cross-entropy: logits (B, T, V) for windows (B, T + 1) of ids, scored on windows[:, 1:]."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))


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
