"""RNN baselines on the same tokens: one trained on gold labels alone, one distilled from the teacher
(Tang et al. 2019: MSE to the teacher's logits over the training and augmented texts)."""
from __future__ import annotations

import numpy as np
import torch

from distill.batching import encode, epoch_stream, pad, param_device, steps_for
from distill.losses import distill_loss
from distill.lstm import RNNClassifier, RNNConfig
from distill.train import TrainOptions, fit, summarize
from pipeline.config import BaselineSection


def build_rnn(b: BaselineSection, vocab_size: int, num_labels: int, pad_id: int) -> RNNClassifier:
    return RNNClassifier(RNNConfig(vocab_size=vocab_size, num_labels=num_labels, embed_dim=b.embed_dim,
                                   hidden=b.hidden, layers=b.layers, bidirectional=b.bidirectional, cell=b.cell,
                                   dropout=b.dropout, pad_token_id=pad_id))


def train_rnn(model: RNNClassifier, tok, texts: list[str], labels: list[int], b: BaselineSection, max_length: int,
              seed: int, desc: str, teacher_logits: np.ndarray | None = None, temperature: float = 2.0,
              opts: TrainOptions = TrainOptions()) -> dict:
    """Gold labels only when teacher_logits is None; else distillation (labels[i] = -1: teacher only)."""
    ids, truncated = encode(tok, texts, max_length)
    lengths = [len(s) for s in ids]
    y = torch.tensor(labels)
    tl = None if teacher_logits is None else torch.from_numpy(teacher_logits).float()
    pad_id = tok.pad_token_id or 0

    def step(m, batch):
        x, mask = pad([ids[i] for i in batch], pad_id, device=param_device(m))
        logits = m(x, mask)
        yb = y[batch].to(x.device)
        if tl is None:
            return torch.nn.functional.cross_entropy(logits, yb)
        return distill_loss(logits, tl[batch].to(x.device), yb.clamp(min=0), kind=b.distill_loss,
                            temperature=temperature, alpha=b.distill_alpha, has_label=yb >= 0)

    steps = steps_for(len(ids), b.batch_size, b.epochs)
    result = fit(model, epoch_stream(len(ids), lengths, b.batch_size, b.epochs, seed), step, total_steps=steps,
                 lr=b.lr, weight_decay=0.0, warmup_fraction=0.05, desc=desc, lr_hint="baseline.lr", opts=opts)
    return {"texts": len(texts), **summarize(result, steps), "truncated_texts": truncated}
