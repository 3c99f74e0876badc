"""An NPU-friendly BERT-style student (student.arch = "npu"): a plain PyTorch encoder built only from ops
that ONNX Runtime's NNAPI and CoreML execution providers take (ORT's mobile usability checker, eval/npu.py).

What differs from the BERT student, and why (the providers' op lists are onnxruntime/tools/mobile_helpers/*.md):
- LayerNorm is written out as ReduceMean / Sub / Mul / Add / Sqrt / Div: LayerNormalization is on neither
  NNAPI's list nor CoreML NeuralNetwork's.
- ReLU in the feed-forward block: Erf (exact GELU) is not on NNAPI's list; ReLU is on every list and is
  the cheapest activation on a phone CPU too.
- The additive attention mask is built once from the int mask (Cast / Sub / Mul, then Unsqueeze to
  (B, 1, 1, T)) and broadcast by Add: no Where, no Expand, no finfo.min (a finite -1e4 stays finite in fp16
  and exp(-1e4) is exactly 0, so padding is still removed).
- The first token is taken by Slice (a constant range), not by a Gather with a scalar index.
- Position embeddings are a parameter sliced to the sequence length: at a fixed export length the slice
  folds into a constant, so the exported static graph has no Shape ops at all.
- The token lookup sits in `embed()`, apart from the rest (`encode()`): a static NPU graph can start from
  the looked-up embeddings (export/npu.py says why).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from distill.folder_model import FolderModel

# Finite additive fill for padded keys (see the module docstring).
MASK_FILL = -1.0e4


@dataclass
class NpuStudentConfig:
    vocab_size: int
    num_labels: int
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 512
    max_position_embeddings: int = 128
    pad_token_id: int = 0
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    # eval/flops.py reads the encoder formula from these same keys; the model_type names this module
    model_type: str = "npu-bert"


class DecomposedLayerNorm(nn.Module):
    """LayerNorm written out when traced (ONNX export, Core ML), so it exports as ReduceMean / Sub / Mul /
    Add / Sqrt / Div (see module doc); eager calls use PyTorch's fused kernel for the same function."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., D)
        if not torch.jit.is_tracing():  # training and eager inference: the fused kernel, same math, ~2x faster
            return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        mean = x.mean(-1, keepdim=True)
        d = x - mean
        var = (d * d).mean(-1, keepdim=True)
        return d / torch.sqrt(var + self.eps) * self.weight + self.bias


class Block(nn.Module):
    """Post-norm transformer layer (as BERT): attention, add & norm, ReLU feed-forward, add & norm."""

    def __init__(self, c: NpuStudentConfig):
        super().__init__()
        d = c.hidden_size
        self.heads = c.num_attention_heads
        self.head_dim = d // c.num_attention_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm1 = DecomposedLayerNorm(d, c.layer_norm_eps)
        self.ff1 = nn.Linear(d, c.intermediate_size)
        self.ff2 = nn.Linear(c.intermediate_size, d)
        self.norm2 = DecomposedLayerNorm(d, c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)
        self.scale = self.head_dim ** -0.5

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, H, T, dh)
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, add_mask: torch.Tensor, cls_only: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D), add_mask (B, 1, 1, T) -> (B, T, D), attention probabilities (B, H, T, T).
        cls_only: queries, attention output and feed-forward for position 0 only -> (B, 1, D), (B, H, 1, T)
        (export/cls_only.py: the classifier reads nothing else from the last layer)."""
        q_in = x[:, 0:1] if cls_only else x  # a constant Slice, like the [CLS] pick below
        q = self._split(self.q(q_in) * self.scale)  # scale folded into q: one Mul on (B, T, D), not on (B, H, T, T)
        k = self._split(self.k(x))
        v = self._split(self.v(x))
        probs = torch.softmax(q @ k.transpose(-1, -2) + add_mask, dim=-1)  # (B, H, Tq, T)
        ctx = (self.drop(probs) @ v).transpose(1, 2).reshape(q_in.shape)  # (B, Tq, D)
        x = self.norm1(q_in + self.drop(self.o(ctx)))
        x = self.norm2(x + self.drop(self.ff2(torch.relu(self.ff1(x)))))
        return x, probs


class NpuStudent(FolderModel):
    """(input_ids, attention_mask) -> logits, like every classifier here; `features` adds the hidden states
    and attention maps the layer-transfer losses need (distill/distiller.py)."""

    kind = "npu"  # distill/models.py: how the folder is saved and loaded
    config_class = NpuStudentConfig
    # Set only while exporting (export/cls_only.py): the last layer computes position 0 alone. Training and
    # the layer-transfer losses need every position, so it is never on in a saved model.
    cls_only = False

    def __init__(self, c: NpuStudentConfig):
        super().__init__()
        self.config = c
        d = c.hidden_size
        self.word_embeddings = nn.Embedding(c.vocab_size, d, padding_idx=c.pad_token_id)
        self.position_embeddings = nn.Parameter(torch.zeros(c.max_position_embeddings, d))
        self.emb_norm = DecomposedLayerNorm(d, c.layer_norm_eps)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.num_hidden_layers))
        self.pooler = nn.Linear(d, d)
        self.classifier = nn.Linear(d, c.num_labels)
        self.drop = nn.Dropout(c.dropout)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        """BERT's initialisation: normal(0, 0.02) weights, zero biases."""
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        elif isinstance(m, NpuStudent):
            nn.init.normal_(m.position_embeddings, std=0.02)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The token lookup alone: (B, T) ids -> (B, T, D)."""
        return self.word_embeddings(input_ids)

    # Hugging Face's names, so distill/embeddings.py can swap in a restricted / factorized embedding
    # (student.vocab, student.embedding_dim) exactly as it does for the BERT student
    def get_input_embeddings(self) -> nn.Module:
        return self.word_embeddings

    def set_input_embeddings(self, emb: nn.Module) -> None:
        self.word_embeddings = emb

    def encode(self, tokens: torch.Tensor, attention_mask: torch.Tensor, keep: bool = False):
        """tokens (B, T, D) looked-up embeddings, attention_mask (B, T) of 0/1 (any int or float type) ->
        logits (B, C), and with keep=True every hidden state (embeddings first) and attention map."""
        add_mask = ((1.0 - attention_mask.to(tokens.dtype)) * MASK_FILL)[:, None, None, :]  # (B, 1, 1, T), once
        x = self.drop(self.emb_norm(tokens + self.position_embeddings[: tokens.shape[1]]))
        hidden, attn = [x], []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x, probs = layer(x, add_mask, cls_only=self.cls_only and not keep and i == last)
            if keep:
                hidden.append(x)
                attn.append(probs)
        first = x[:, 0:1, :].squeeze(1)  # [CLS] by a constant Slice, (B, D)
        logits = self.classifier(self.drop(torch.tanh(self.pooler(first))))
        return logits, tuple(hidden), tuple(attn)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encode(self.embed(input_ids), attention_mask)[0]

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """(logits, hidden states (L + 1 of (B, T, D)), attention maps (L of (B, H, T, T)))."""
        return self.encode(self.embed(input_ids), attention_mask, keep=True)
