"""A smaller input embedding for any student or baseline: restricted rows (distill/vocab.py) and an optional
ALBERT-style factorization (V x E table + E x H projection).

`CompactEmbedding` takes the tokenizer's own ids, looks each one up in a constant id -> row table
(an int16 buffer, saved in model.safetensors) and then in its (rows, E) table. The table lookup is a Gather in
the exported ONNX graph, right before the embedding Gather, so every consumer feeds unmodified tokenizer
ids. With E < H a bias-free Linear (E -> H) follows; its MatMul is quantized with the rest.

Why factorize: a restricted demo vocabulary still has ~11k rows; at H = 128 that is 1.4 MB in int8, about
as much as the rest of the student. At E = 32 it is 0.35 MB.

`compact_embeddings(model, ...)` swaps a built model's input embedding for a CompactEmbedding initialised
from the rows it replaces (kept rows copied, "other" = mean of the dropped rows, E < H by truncated SVD:
the best rank-E approximation of the initial table), so it works after any student builder and any
student.init. `EMBEDDING_KEY` in pocketformer.json records the shape, which load_model uses to rebuild it.

`pca_rows` is the student.init = "teacher-pca" start of every student's embedding (encoder and decoder).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distill.vocab import VocabMap, row_table
from pipeline.errors import PipelineError

EMBEDDING_KEY = "embedding"  # pocketformer.json: {"rows", "dim", "out_dim", "teacher_vocab"}


class CompactEmbedding(nn.Module):
    def __init__(self, teacher_vocab: int, rows: int, dim: int, out_dim: int, padding_row: int | None = None):
        super().__init__()
        # filled by compact_embeddings or by load_state_dict; persistent so it travels in model.safetensors.
        # int16 while the rows fit: 61 KB instead of 122 KB for 30,522 ids in every exported file (a Cast to
        # int32 follows, the index type every runtime's Gather takes)
        index = torch.int16 if rows <= torch.iinfo(torch.int16).max else torch.int32
        self.register_buffer("row_of_id", torch.zeros(teacher_vocab, dtype=index))
        self.table = nn.Embedding(rows, dim, padding_idx=padding_row)
        self.proj = nn.Linear(dim, out_dim, bias=False) if dim != out_dim else None

    @property
    def spec(self) -> dict:
        return {"rows": self.table.num_embeddings, "dim": self.table.embedding_dim,
                "out_dim": self.proj.out_features if self.proj is not None else self.table.embedding_dim,
                "teacher_vocab": self.row_of_id.numel()}

    @classmethod
    def from_spec(cls, spec: dict) -> "CompactEmbedding":
        return cls(spec["teacher_vocab"], spec["rows"], spec["dim"], spec["out_dim"])

    def vocab_map(self) -> VocabMap:
        """The kept teacher ids back from the row table (the last row is "other" when rows < vocab)."""
        table = self.row_of_id.numpy().astype(np.int64)
        V, rows = table.size, self.table.num_embeddings
        has_other = rows < V
        kept = np.flatnonzero(table < rows - 1) if has_other else np.argsort(table, kind="stable")
        return VocabMap(kept[np.argsort(table[kept], kind="stable")], V, has_other)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.table(self.row_of_id[input_ids].int())  # (B, T, E)
        return self.proj(x) if self.proj is not None else x  # (B, T, H)


@torch.no_grad()
def compact_from(full: nn.Embedding, vmap: VocabMap | None, dim: int, pad_id: int | None) -> CompactEmbedding:
    """A CompactEmbedding that starts as close as it can to `full` (V, H): vmap=None keeps every row."""
    w = full.weight.detach().float()  # (V, H)
    V, H = w.shape
    vmap = vmap or VocabMap.full(V)
    table = row_table(vmap)
    rows = vmap.rows_of(w)  # (V', H)
    dim = dim or H
    pad_row = int(table[pad_id]) if pad_id is not None else None
    emb = CompactEmbedding(V, rows.shape[0], dim, H, pad_row)
    emb.row_of_id.copy_(torch.from_numpy(table))
    if dim == H:
        emb.table.weight.copy_(rows)
    else:  # rank-dim truncated SVD: rows ~ U[:, :dim] @ (S Vt)[:dim]
        u, s, vt = torch.linalg.svd(rows, full_matrices=False)
        # The singular values go into the projection, so the table's columns start at one common scale
        # (the table's rms): int8 quantizes the looked-up rows with one scale per tensor, and S folded
        # into the table would leave the weak directions a few levels of it.
        scale = rows.pow(2).mean().sqrt() / u[:, :dim].pow(2).mean().sqrt()
        emb.table.weight.copy_(u[:, :dim] * scale)
        emb.proj.weight.copy_((s[:dim, None] * vt[:dim] / scale).T)  # Linear weight is (out, in) = (H, dim)
    if pad_row is not None:
        emb.table.weight[pad_row].zero_()
    return emb


def pca_components(rows: int, k: int) -> int:
    """Principal directions pca_rows can take from a table of `rows` rows for a k-wide student: at most one per
    row (a generation corpus's restricted vocabulary can be smaller than student.hidden)."""
    return min(k, rows)


def pca_rows(weight: torch.Tensor, k: int) -> torch.Tensor:
    """A teacher embedding table (V, D) -> (V, k): its rows projected on their top-k principal directions,
    rescaled to std 0.02 (BERT's and Llama's init std). pca_lowrank draws from torch's RNG.

    With fewer rows than k (V < k) only V directions exist: the table gets those and zero columns after them
    (training fills them; the tied output head reads them as zero until then)."""
    if k > weight.shape[1]:
        raise PipelineError(f"student.init = 'teacher-pca' needs student.hidden <= teacher hidden "
                            f"({weight.shape[1]}); use 'random'")
    w = weight.detach().float()
    q = pca_components(w.shape[0], k)
    mean = w.mean(0)
    _, _, v = torch.pca_lowrank(w - mean, q=q, center=False, niter=4)
    proj = (w - mean) @ v[:, :q]  # (V, q)
    std = proj.std() if proj.numel() > 1 else proj.new_tensor(0.0)
    proj = proj * (0.02 / std) if std > 0 else proj
    return proj if q == k else torch.nn.functional.pad(proj, (0, k - q))  # (V, k)


def compact_embeddings(model: nn.Module, vmap: VocabMap | None, dim: int, pad_id: int | None) -> CompactEmbedding:
    """Replace a Hugging Face model's input embedding (get/set_input_embeddings) with a CompactEmbedding."""
    emb = compact_from(model.get_input_embeddings(), vmap, dim, pad_id)
    model.set_input_embeddings(emb)
    return emb


def find_compact(model: nn.Module) -> CompactEmbedding | None:
    return next((m for m in model.modules() if isinstance(m, CompactEmbedding)), None)


def load_compact_hf(folder, spec: dict):
    """A Hugging Face classifier saved with a CompactEmbedding: built from its config, the embedding
    swapped in, then every weight loaded strictly from model.safetensors."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSequenceClassification

    hf = AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(folder))
    hf.set_input_embeddings(CompactEmbedding.from_spec(spec))
    hf.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    return hf
