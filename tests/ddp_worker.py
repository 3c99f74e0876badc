"""Every training loop of the project on tiny dropout-free models, run in-process (1 process) or under
`torchrun` (tests/test_distributed.py): teacher fine-tune, distillation with the layer-transfer losses,
the distilled LSTM, the generation student with top-k KL, the LSTM language model. The data mixes
unlabelled rows (augmented texts) and windows without a teacher distribution into the batches, so the
losses that average over part of a batch are exercised too.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/ddp_worker.py TOKENIZER OUT BATCH

It trains in float64: the weighting of uneven shards is then checked to ~1e-8, where float32 summation
order alone, amplified by Adam over a few steps at lr 1e-2, already moves weights by ~1e-4.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

N_TEXTS, N_WINDOWS, N_SCORED, T, V, K = 24, 24, 15, 8, 40, 4


def _bert(num_labels: int, **kw):
    from transformers import BertForSequenceClassification

    from conftest import tiny_bert_config

    cfg = tiny_bert_config(num_labels=num_labels, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           attn_implementation="eager", **kw)
    return BertForSequenceClassification(cfg)


def train_everything(tokenizer_dir: Path, batch: int) -> tuple[dict, dict]:
    """(weights per model, training summaries): identical inputs and initial weights on every rank."""
    from transformers import BertTokenizerFast, GPT2Config, GPT2LMHeadModel

    from conftest import make_texts
    from distill.baseline import build_lstm_lm, build_rnn, train_lstm_lm, train_rnn
    from distill.distiller import distill_lm, distill_student
    from distill.models import HFLogits
    from distill.teacher import fine_tune
    from distill.train import seed_everything
    from pipeline.config import BaselineSection, DistillSection, TeacherSection

    seed_everything(0)
    tok = BertTokenizerFast.from_pretrained(tokenizer_dir)
    rows = make_texts(N_TEXTS, seed=1)
    texts = [t for t, _ in rows]
    names = sorted({lab for _, lab in rows})
    labels = [names.index(lab) for _, lab in rows]
    some_unlabelled = [lab if i % 3 else -1 for i, lab in enumerate(labels)]  # augmented texts: teacher only
    teacher_logits = np.random.default_rng(0).normal(size=(N_TEXTS, 3)).astype(np.float32)
    models, summaries = {}, {}

    teacher = HFLogits(_bert(3))
    summaries["teacher"] = fine_tune(teacher, tok, texts, labels, TeacherSection(
        max_length=16, epochs=2.0, batch_size=batch, lr=1e-2), seed=1)
    student = HFLogits(_bert(3, hidden_size=16, intermediate_size=32))
    d = DistillSection(epochs=2.0, batch_size=batch, lr=1e-2, hidden_weight=1.0, attention_weight=1.0,
                       intermediate_epochs=1.0)
    summaries["student"] = distill_student(student, teacher, tok, texts, some_unlabelled, teacher_logits, d,
                                           [1, 2], 16, seed=2)
    b = BaselineSection(embed_dim=8, hidden=8, dropout=0.0, epochs=2.0, batch_size=batch, lr=1e-2,
                        distill_loss="kl", distill_alpha=0.5)
    lstm = build_rnn(b, len(tok), 3, 0)
    summaries["lstm"] = train_rnn(lstm, tok, texts, some_unlabelled, b, 16, seed=3, desc="lstm",
                                  teacher_logits=teacher_logits)

    g = np.random.default_rng(1)
    windows = g.integers(0, V, size=(N_WINDOWS, T + 1))
    topk_ids = np.stack([g.permutation(V)[:K] for _ in range(N_SCORED * T)]).reshape(N_SCORED, T, K)
    topk_logits = g.normal(size=(N_SCORED, T, K)).astype(np.float32)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=T, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.0,
                                    embd_pdrop=0.0, attn_pdrop=0.0))
    summaries["lm"] = distill_lm(lm, windows, topk_ids, topk_logits, DistillSection(
        epochs=2.0, batch_size=batch, lr=1e-2, alpha=0.5), seed=4)
    lstm_lm = build_lstm_lm(b, V)
    summaries["lstm_lm"] = train_lstm_lm(lstm_lm, windows, b, seed=5)
    lstm_kd = build_lstm_lm(b, V)  # distilled from the top-k as the decoder is: the scored rows split across ranks
    summaries["lstm_kd"] = train_lstm_lm(lstm_kd, windows, b, seed=6, teacher=(topk_ids, topk_logits), temperature=2.0)
    for name, m in (("teacher", teacher), ("student", student), ("lstm", lstm), ("lm", lm), ("lstm_lm", lstm_lm),
                    ("lstm_kd", lstm_kd)):
        models[name] = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return models, summaries


if __name__ == "__main__":
    from distill import distributed as D

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    tokenizer, out, batch_size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    weights, summary = train_everything(tokenizer, batch_size)
    if D.is_main():
        out.mkdir(parents=True, exist_ok=True)
        torch.save(weights, out / "weights.pt")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    D.finish()
