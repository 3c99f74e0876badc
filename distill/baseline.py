"""RNN baselines on the same tokens. Classification: one trained on gold labels alone, one distilled
from the teacher (Tang et al. 2019: MSE to the teacher's logits over the training and augmented texts).
Generation: an LSTM language model on the student's windows and vocabulary, once on the next tokens alone and
once distilled from the teacher's cached top-k as the decoder student is."""
from __future__ import annotations

import numpy as np
import torch

from distill import distributed as D
from distill.batching import encode, window_batches
from distill.distiller import lm_distill_step
from distill.losses import distill_loss
from distill.lstm import LSTMLM, LSTMLMConfig, RNNClassifier, RNNConfig
from distill.train import TrainOptions, fit, fit_texts, tail_mean
from pipeline.config import BaselineSection


def build_rnn(b: BaselineSection, vocab_size: int, num_labels: int, pad_id: int) -> RNNClassifier:
    return RNNClassifier(RNNConfig(vocab_size=vocab_size, num_labels=num_labels, embed_dim=b.embed_dim,
                                   hidden=b.hidden, layers=b.layers, bidirectional=b.bidirectional, cell=b.cell,
                                   dropout=b.dropout, pad_token_id=pad_id))


def train_rnn(model: RNNClassifier, tok, texts: list[str], labels: list[int], b: BaselineSection, max_length: int,
              seed: int, desc: str, teacher_logits: np.ndarray | None = None, temperature: float = 2.0,
              opts: TrainOptions = TrainOptions()) -> dict:
    """Gold labels only when teacher_logits is None; else distillation (labels[i] = -1: teacher only)."""
    ids, truncated = encode(tok, texts, max_length, where="baseline texts")
    y = torch.tensor(labels)
    tl = None if teacher_logits is None else torch.from_numpy(teacher_logits).float()
    labelled = np.asarray(labels) >= 0

    def loss(m, batch: D.Rows, x, mask):
        logits = m(x, mask)
        yb = y[batch].to(x.device)
        if tl is None:
            return torch.nn.functional.cross_entropy(logits, yb)
        return distill_loss(logits, tl[batch].to(x.device), yb.clamp(min=0), kind=b.distill_loss,
                            temperature=temperature, alpha=b.distill_alpha, has_label=yb >= 0,
                            hard_share=batch.share_where(labelled))

    result = fit_texts(model, loss, ids, tok.pad_token_id or 0, b.batch_size, b.epochs, seed, lr=b.lr,
                       weight_decay=0.0, warmup_fraction=0.05, desc=desc, lr_hint="baseline.lr", opts=opts)
    return {"texts": len(texts), **result, "truncated_texts": truncated}


def build_lstm_lm(b: BaselineSection, vocab_size: int) -> LSTMLM:
    """baseline.cell is "lstm" here: config load refuses any other cell for run.task = "generation"."""
    return LSTMLM(LSTMLMConfig(vocab_size, b.embed_dim, b.hidden, b.layers, b.dropout))


def train_lstm_lm(model: LSTMLM, windows: np.ndarray, b: BaselineSection, seed: int,
                  opts: TrainOptions = TrainOptions(), teacher: tuple[np.ndarray, np.ndarray] | None = None,
                  temperature: float = 1.0, desc: str = "lstm language model") -> dict:
    """Next-token cross-entropy on windows (N + M, T+1) of student ids; the state starts at zero per window.
    teacher: the cached top-k (ids, logits) (N, T, k) of the first N windows in student ids, to distil from as
    the decoder student is (distiller.lm_distill_step, baseline.distill_alpha, the temperature of [distill])."""
    alpha = b.distill_alpha if teacher is not None else 0.0
    batches, total = window_batches(len(windows), b.batch_size, b.epochs, seed, b.steps)
    # model.zero_state, not m's: m may be the DistributedDataParallel wrapper
    step, parts = lm_distill_step(lambda m, x: m(x, *model.zero_state(len(x), x.device))[0], windows,
                                  *(teacher or (None, None)), alpha, temperature)
    fitted = fit(model, batches, step, total_steps=total, lr=b.lr, weight_decay=0.0, warmup_fraction=0.05,
                 desc=desc, lr_hint="baseline.lr", opts=opts, records=parts)
    losses = fitted["losses"]
    out = {"steps": total, "resumed_from_step": fitted["resumed_from"], "windows": len(windows),
           "passes": round(total * b.batch_size / len(windows), 3),
           "final_train_ce": tail_mean(losses, total)}
    if teacher is not None:  # the loss mixes both terms: each on its own, as distill_lm reports them
        out.update(teacher_windows=len(teacher[0]), alpha=alpha, temperature=temperature,
                   final_loss=out["final_train_ce"], final_train_ce=tail_mean(parts["hard"], total),
                   final_soft_kl=tail_mean(parts["soft"], total) if parts["soft"] else None)
    return out
