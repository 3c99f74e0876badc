"""Student distillation from cached teacher logits, soft targets with temperature mixed with the gold
targets: loss = alpha * soft + (1 - alpha) * cross-entropy.

- Classification (distill_student): logits on the training + augmented texts, optionally preceded by a
  phase of hidden-state and attention transfer on the original texts with the teacher run online (those
  maps are too big to cache).
- Generation (distill_lm): per position, the teacher's cached top-k logits (losses.lm_losses) mixed with
  next-token cross-entropy; teacher tokens outside the student's vocabulary land on its "other" id.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distill import distributed as D
from distill.batching import encode, param_device, window_batches
from distill.losses import attention_mse, distill_loss, hidden_mse, lm_losses
from distill.models import HFLogits
from distill.train import TrainOptions, fit, fit_texts, tail_mean
from pipeline.config import DistillSection


class WithProjections(nn.Module):
    """Student plus TinyBERT's hidden-size projections W_h (one per mapped layer and the embeddings), so
    one module (and one DistributedDataParallel wrapper) holds every trained parameter.

    forward applies the projections itself: DDP counts a parameter used outside forward as unused, marks it
    ready early, and fails when the backward pass reaches it again."""

    def __init__(self, student: nn.Module, teacher_hidden: int, student_layers: list[int], hidden: bool,
                 attentions: bool):
        super().__init__()
        self.student = student
        self.student_layers = student_layers  # the hidden state each projection maps (0 = the embeddings)
        self.hidden = hidden
        self.attentions = attentions
        # a transformers student (HFLogits) or one with its own features() (distill/npu_student.py)
        ds = (student.config if hasattr(student, "features") else student.hf.config).hidden_size
        self.projs = nn.ModuleList(nn.Linear(ds, teacher_hidden) for _ in student_layers)

    def forward(self, input_ids, attention_mask):
        """(logits, projected hidden states per mapped layer (None without hidden transfer), attentions)."""
        if hasattr(self.student, "features"):
            logits, hidden, attentions = self.student.features(input_ids, attention_mask)
        else:
            out = self.student.hf(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                                  output_attentions=self.attentions)
            logits, hidden, attentions = out.logits, out.hidden_states, out.attentions
        # unused projections would never get a gradient, which DDP waits for: project only what the loss uses
        projected = [p(hidden[s]) for p, s in zip(self.projs, self.student_layers)] if self.hidden else None
        return logits, projected, attentions


def distill_student(student: nn.Module, teacher: HFLogits | None, tok, texts: list[str], labels: list[int],
                    teacher_logits: np.ndarray, d: DistillSection, layer_map: list[int], max_length: int,
                    seed: int, opts: TrainOptions = TrainOptions()) -> dict:
    """labels[i] = -1 marks an augmented text (teacher target only)."""
    ids, truncated = encode(tok, texts, max_length, where="distillation texts")
    y = torch.tensor(labels)
    tl = torch.from_numpy(teacher_logits).float()
    pad_id = tok.pad_token_id or 0
    summary: dict = {"texts": len(texts), "truncated_texts": truncated, "layer_map": layer_map}
    fit_args = dict(lr=d.lr, weight_decay=d.weight_decay, warmup_fraction=d.warmup_fraction, lr_hint="distill.lr",
                    opts=opts)

    labelled = np.asarray(labels) >= 0

    def logit_terms(b: D.Rows, logits):
        yb = y[b].to(logits.device)
        return distill_loss(logits, tl[b].to(logits.device), yb.clamp(min=0), kind="kl", temperature=d.temperature,
                            alpha=d.alpha, has_label=yb >= 0, hard_share=b.share_where(labelled))

    use_inter = teacher is not None and (d.hidden_weight > 0 or d.attention_weight > 0) and d.intermediate_epochs > 0
    if use_inter:
        originals = [i for i, lab in enumerate(labels) if lab >= 0]
        pairs = [(0, 0)] + [(i + 1, t) for i, t in enumerate(layer_map)]  # (student layer, teacher layer)
        both = WithProjections(student, teacher.hf.config.hidden_size, [s for s, _ in pairs], d.hidden_weight > 0,
                               d.attention_weight > 0)
        teacher.eval()
        lengths = [len(ids[i]) for i in originals]

        def inter_loss(m, b: D.Rows, x, mask):
            logits, projected, attn = m(x, mask)
            with torch.no_grad():
                t_out = teacher.to(x.device).hf(input_ids=x, attention_mask=mask, output_hidden_states=True,
                                                output_attentions=d.attention_weight > 0)
            loss = logit_terms(b.take(originals), logits)
            if d.hidden_weight > 0:  # a mean over real tokens, as many per row as the text is long
                h = sum(hidden_mse(projected[k], t_out.hidden_states[t], mask) for k, (_, t) in enumerate(pairs))
                share = b.share(mask.sum().item(), sum(lengths[i] for i in b.batch)) if D.enabled() else 1.0
                loss = loss + d.hidden_weight * share * h / len(pairs)
            if d.attention_weight > 0:  # a mean over token pairs: length squared per row
                a = sum(attention_mse(attn[s - 1], t_out.attentions[t - 1], mask) for s, t in pairs[1:])
                share = b.share(mask.sum(1).pow(2).sum().item(), sum(lengths[i] ** 2 for i in b.batch)) \
                    if D.enabled() else 1.0
                loss = loss + d.attention_weight * share * a / len(layer_map)
            return loss

        summary["intermediate"] = fit_texts(both, inter_loss, [ids[i] for i in originals], pad_id, d.batch_size,
                                            d.intermediate_epochs, seed, desc="student: layer transfer", **fit_args)

    def logit_loss(m, b, x, mask):
        return logit_terms(b, m(x, mask))

    summary["logit"] = fit_texts(student, logit_loss, ids, pad_id, d.batch_size, d.epochs, seed + 1,
                                 desc="student: logit distillation", **fit_args)
    return summary


def lm_distill_step(forward, windows: np.ndarray, topk_ids: np.ndarray | None, topk_logits: np.ndarray | None,
                    alpha: float, temperature: float):
    """The training step of causal-LM distillation, for any model forward(model, ids (B, T)) -> logits (B, T, V)
    maps (the decoder student, the distilled LSTM): on windows (N + M, T+1), alpha * the top-k KL on the first N
    (their cached teacher top-k (N, T, k), in student ids) + (1 - alpha) * next-token cross-entropy; alpha 0 or
    topk_ids None: cross-entropy only. Returns (step, parts): parts collects the batches' soft and hard terms."""
    x_all = torch.from_numpy(windows)
    n_teacher = 0 if topk_ids is None else len(topk_ids)
    has_teacher = np.arange(len(windows)) < n_teacher
    parts = {"soft": [], "hard": []}

    def step(model, rows: D.Rows) -> torch.Tensor:
        b = np.asarray(rows)
        dev = param_device(model)
        x = x_all[b].to(dev)  # (B, T + 1)
        logits = forward(model, x[:, :-1])  # (B, T, V)
        scored = b < n_teacher  # rows with a cached teacher distribution
        if alpha <= 0 or not has_teacher[rows.batch].any():  # the whole batch's rows: the same on every rank
            hard = lm_losses(logits, x)[0]
            parts["hard"].append(rows.batch_value(hard.item()))
            # (1 - alpha), as in a mixed batch: a window without a teacher counts the same wherever it lands
            return (1 - alpha) * hard
        if not scored.any():  # other ranks hold the batch's scored rows: soft is 0
            hard, soft = lm_losses(logits, x)
        else:  # the KL a mean over the scored rows only
            tb = b[scored]
            hard, soft = lm_losses(logits, x, torch.from_numpy(scored), torch.from_numpy(topk_ids[tb]).to(dev),
                                   torch.from_numpy(topk_logits[tb]).to(dev), temperature)
            soft = soft * rows.share_where(has_teacher)
        parts["hard"].append(rows.batch_value(hard.item()))
        parts["soft"].append(rows.batch_value(soft.item()))
        return alpha * soft + (1 - alpha) * hard

    return step, parts


def distill_lm(student, windows: np.ndarray, topk_ids: np.ndarray | None, topk_logits: np.ndarray | None,
               d: DistillSection, seed: int, opts: TrainOptions = TrainOptions()) -> dict:
    """Train student (a causal LM over student ids) on windows (N + M, T+1); the first N have the cached
    teacher top-k (N, T, k), already mapped to student ids, the other M only their next tokens (more
    text for the price of the student's steps, not the teacher's). topk_ids None: cross-entropy only."""
    alpha = d.alpha if topk_ids is not None else 0.0
    batches, total = window_batches(len(windows), d.batch_size, d.epochs, seed, d.steps)
    step, parts = lm_distill_step(lambda m, x: m(input_ids=x).logits, windows, topk_ids, topk_logits, alpha,
                                  d.temperature)
    fitted = fit(student, batches, step, total_steps=total, lr=d.lr, weight_decay=d.weight_decay,
                 warmup_fraction=d.warmup_fraction, desc="distill student", lr_hint="distill.lr", opts=opts,
                 records=parts)
    losses = fitted["losses"]
    return {"steps": total, "resumed_from_step": fitted["resumed_from"], "windows": len(windows),
            "teacher_windows": 0 if topk_ids is None else len(topk_ids),
            "passes": round(total * d.batch_size / len(windows), 3), "alpha": alpha,
            "temperature": d.temperature, "final_loss": tail_mean(losses, total),
            "final_train_ce": tail_mean(parts["hard"], total),
            "final_soft_kl": tail_mean(parts["soft"], total) if parts["soft"] else None}
