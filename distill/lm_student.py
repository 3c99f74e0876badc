"""The generation student: a small Llama-style decoder (transformers LlamaForCausalLM, tied embeddings)
over a vocabulary restricted to the tokens the training corpus uses.

Why restrict: SmolLM2's 49,152 x 576 embedding alone is 28M parameters; a 256-wide student over the full
vocabulary would spend 12.6M of its parameters (and its whole output layer's time) on rows for tokens
Shakespeare never uses. The corpus uses ~17.7k distinct ids. `VocabMap` keeps those, in teacher-id order,
plus one "other" id that stands for every teacher token outside them; perplexity spreads other's
probability evenly over those tokens, so every model is scored on the same full-vocabulary events.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.config import StudentSection
from pipeline.errors import PipelineError

VOCAB_FILE = "vocab_map.json"


@dataclass
class VocabMap:
    teacher_ids: np.ndarray  # (V_kept,) int64, sorted: student id i <-> teacher id teacher_ids[i]
    teacher_vocab: int
    has_other: bool  # True: student id V_kept is "other" (every teacher id not kept)

    @property
    def size(self) -> int:
        return len(self.teacher_ids) + int(self.has_other)

    @property
    def other_id(self) -> int | None:
        return len(self.teacher_ids) if self.has_other else None

    @property
    def n_unkept(self) -> int:
        return self.teacher_vocab - len(self.teacher_ids)

    def lookup(self) -> np.ndarray:
        """(teacher_vocab,) teacher id -> student id."""
        table = np.full(self.teacher_vocab, self.other_id if self.has_other else 0, dtype=np.int64)
        table[self.teacher_ids] = np.arange(len(self.teacher_ids))
        return table

    def to_student(self, ids):
        table = self.lookup()
        if isinstance(ids, torch.Tensor):
            return torch.from_numpy(table)[ids]
        return table[np.asarray(ids)]

    def to_teacher(self, ids) -> np.ndarray:
        """Student ids -> teacher ids; "other" has no single teacher token and maps to -1."""
        ids = np.asarray(ids)
        out = np.full(ids.shape, -1, dtype=np.int64)
        kept = ids < len(self.teacher_ids)
        out[kept] = self.teacher_ids[ids[kept]]
        return out

    def save(self, folder: Path) -> None:
        (folder / VOCAB_FILE).write_text(json.dumps({"teacher_vocab": self.teacher_vocab, "has_other": self.has_other,
                                                     "teacher_ids": self.teacher_ids.tolist()}))

    @classmethod
    def load(cls, folder: Path) -> "VocabMap":
        path = folder / VOCAB_FILE
        if not path.is_file():
            raise PipelineError(f"{folder} has no {VOCAB_FILE}: re-run the stage that wrote it")
        d = json.loads(path.read_text())
        return cls(np.asarray(d["teacher_ids"], dtype=np.int64), d["teacher_vocab"], d["has_other"])

    @classmethod
    def build(cls, train_stream: np.ndarray, teacher_vocab: int, restrict: bool, always: tuple[int, ...] = ()) -> "VocabMap":
        if not restrict:
            return cls(np.arange(teacher_vocab, dtype=np.int64), teacher_vocab, False)
        kept = np.union1d(np.unique(train_stream), np.asarray(always, dtype=np.int64))
        return cls(kept.astype(np.int64), teacher_vocab, len(kept) < teacher_vocab)


def _pca(weight: torch.Tensor, k: int) -> torch.Tensor:
    """weight (V, D) -> (V, k): its rows projected on their top-k principal directions."""
    mean = weight.mean(0)
    _, _, v = torch.pca_lowrank(weight - mean, q=k, center=False, niter=4)
    return (weight - mean) @ v[:, :k]


def build_lm_student(s: StudentSection, teacher, vmap: VocabMap, max_positions: int):
    """A LlamaForCausalLM with the [student] sizes over vmap's vocabulary, initialised per student.init."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if s.arch != "llama":
        raise PipelineError(f"student.arch = '{s.arch}' is not a decoder; run.task = 'generation' builds "
                            f"student.arch = \"llama\" (the only generation student)")
    tc = teacher.config
    cfg = LlamaConfig(vocab_size=vmap.size, hidden_size=s.hidden, intermediate_size=s.ffn, num_hidden_layers=s.layers,
                      num_attention_heads=s.heads, num_key_value_heads=s.heads, max_position_embeddings=max_positions,
                      rope_theta=getattr(tc, "rope_theta", 10000.0), rms_norm_eps=1e-5, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, initializer_range=0.02)
    student = LlamaForCausalLM(cfg)
    t_emb = teacher.get_input_embeddings().weight.detach().float()  # (V_t, D_t)
    if s.init == "random":
        return student.eval()
    rows = torch.from_numpy(vmap.teacher_ids)
    other = t_emb[torch.from_numpy(np.setdiff1d(np.arange(vmap.teacher_vocab), vmap.teacher_ids))].mean(0, keepdim=True) \
        if vmap.has_other else t_emb[:0]
    emb = torch.cat([t_emb[rows], other])  # (V_s, D_t)
    with torch.no_grad():
        if s.init == "teacher-pca":
            if s.hidden > emb.shape[1]:
                raise PipelineError(f"student.init = 'teacher-pca' needs student.hidden <= teacher hidden "
                                    f"({emb.shape[1]}); use 'random'")
            proj = _pca(emb, s.hidden)
            student.model.embed_tokens.weight.copy_(proj * (0.02 / proj.std()))  # Llama's init std
        elif s.init == "teacher-layers":
            _copy_layers(student, teacher, emb)
    student.tie_weights()
    return student.eval()


def _copy_layers(student, teacher, emb: torch.Tensor) -> None:
    """Embeddings of the kept tokens and every k-th teacher layer (needs equal width and head layout)."""
    tc, sc = teacher.config, student.config
    if tc.model_type != "llama" or (tc.hidden_size, tc.intermediate_size, tc.num_attention_heads) != \
            (sc.hidden_size, sc.intermediate_size, sc.num_attention_heads):
        raise PipelineError(f"student.init = 'teacher-layers' needs a Llama teacher of the student's width "
                            f"(hidden {tc.hidden_size}, ffn {tc.intermediate_size}, heads {tc.num_attention_heads}); "
                            f"use 'teacher-pca' or 'random'")
    student.config.num_key_value_heads = tc.num_key_value_heads
    from transformers import LlamaForCausalLM

    fresh = LlamaForCausalLM(student.config)
    student.model = fresh.model
    student.lm_head = fresh.lm_head
    n_t, n_s = tc.num_hidden_layers, sc.num_hidden_layers
    picks = [round(i * (n_t - 1) / max(1, n_s - 1)) for i in range(n_s)]  # first and last always kept
    for i, t in enumerate(picks):
        student.model.layers[i].load_state_dict(teacher.model.layers[t].state_dict())
    student.model.norm.load_state_dict(teacher.model.norm.state_dict())
    student.model.embed_tokens.weight.copy_(emb)


def count_lm_params(model: torch.nn.Module) -> dict[str, int]:
    """Parameters, counting a tied embedding/head matrix once."""
    seen, total, emb = set(), 0, 0
    for mod in model.modules():
        for p in mod.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            total += p.numel()
            if isinstance(mod, torch.nn.Embedding):
                emb += p.numel()
    return {"params": total, "embedding_params": emb, "non_embedding_params": total - emb}
