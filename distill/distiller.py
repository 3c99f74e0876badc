"""Student distillation: cached teacher logits on the training + augmented texts (soft targets with
temperature, mixed with the gold labels), optionally preceded by a phase of hidden-state and attention
transfer on the original texts with the teacher run online (those maps are too big to cache)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distill.batching import encode, epoch_stream, pad, steps_for
from distill.losses import attention_mse, distill_loss, hidden_mse
from distill.models import HFLogits
from distill.train import fit
from pipeline.config import DistillSection


def distill_student(student: HFLogits, teacher: HFLogits | None, tok, texts: list[str], labels: list[int],
                    teacher_logits: np.ndarray, d: DistillSection, layer_map: list[int], max_length: int,
                    seed: int) -> dict:
    """labels[i] = -1 marks an augmented text (teacher target only)."""
    ids, truncated = encode(tok, texts, max_length)
    lengths = [len(s) for s in ids]
    y = torch.tensor(labels)
    tl = torch.from_numpy(teacher_logits).float()
    pad_id = tok.pad_token_id or 0
    summary: dict = {"texts": len(texts), "truncated_texts": truncated, "layer_map": layer_map}

    def logit_terms(b, logits):
        return distill_loss(logits, tl[b], y[b].clamp(min=0), kind="kl", temperature=d.temperature,
                            alpha=d.alpha, has_label=y[b] >= 0)

    use_inter = teacher is not None and (d.hidden_weight > 0 or d.attention_weight > 0) and d.intermediate_epochs > 0
    if use_inter:
        originals = [i for i, lab in enumerate(labels) if lab >= 0]
        ds, dt = student.hf.config.hidden_size, teacher.hf.config.hidden_size
        # one projection per mapped layer plus the embeddings (TinyBERT's W_h)
        projs = nn.ModuleList(nn.Linear(ds, dt) for _ in range(len(layer_map) + 1))
        pairs = [(0, 0)] + [(i + 1, t) for i, t in enumerate(layer_map)]
        teacher.eval()
        student.train()

        def inter_step(b):
            b = [originals[i] for i in b]
            x, m = pad([ids[i] for i in b], pad_id)
            out = student.hf(input_ids=x, attention_mask=m, output_hidden_states=True,
                             output_attentions=d.attention_weight > 0)
            with torch.no_grad():
                t_out = teacher.hf(input_ids=x, attention_mask=m, output_hidden_states=True,
                                   output_attentions=d.attention_weight > 0)
            loss = logit_terms(b, out.logits)
            if d.hidden_weight > 0:
                h = sum(hidden_mse(out.hidden_states[s], t_out.hidden_states[t], projs[k], m)
                        for k, (s, t) in enumerate(pairs))
                loss = loss + d.hidden_weight * h / len(pairs)
            if d.attention_weight > 0:
                a = sum(attention_mse(out.attentions[s - 1], t_out.attentions[t - 1], m) for s, t in pairs[1:])
                loss = loss + d.attention_weight * a / len(layer_map)
            return loss

        n = len(originals)
        steps = steps_for(n, d.batch_size, d.intermediate_epochs)
        losses = fit(list(student.parameters()) + list(projs.parameters()),
                     epoch_stream(n, [lengths[i] for i in originals], d.batch_size, d.intermediate_epochs, seed),
                     inter_step, total_steps=steps, lr=d.lr, weight_decay=d.weight_decay,
                     warmup_fraction=d.warmup_fraction, desc="student: layer transfer", lr_hint="distill.lr")
        summary["intermediate"] = {"steps": steps, "final_loss": float(np.mean(losses[-20:]))}

    student.train()

    def step(b):
        x, m = pad([ids[i] for i in b], pad_id)
        return logit_terms(b, student(x, m))

    steps = steps_for(len(ids), d.batch_size, d.epochs)
    losses = fit(student.parameters(), epoch_stream(len(ids), lengths, d.batch_size, d.epochs, seed + 1), step,
                 total_steps=steps, lr=d.lr, weight_decay=d.weight_decay, warmup_fraction=d.warmup_fraction,
                 desc="student: logit distillation", lr_hint="distill.lr")
    student.eval()
    summary["logit"] = {"steps": steps, "final_loss": float(np.mean(losses[-20:]))}
    return summary
