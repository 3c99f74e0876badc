"""RNN baselines, one per task, saved and loaded alike (distill/folder_model.py).

RNNClassifier: an embedding + (Bi)LSTM/GRU + linear classifier (Tang et al. 2019). The backward direction
is run as a forward RNN over each sequence's valid tokens reversed (a gather with per-row lengths), so
right padding never leaks into any state. That keeps padded batches exactly equal to unpadded single
texts, and it exports to ONNX as plain LSTM + Gather ops that quantize.

LSTMLM: embedding -> stacked unidirectional LSTM -> projection -> tied output layer. The state (h, c) is
an explicit input and output, so one graph serves both the prompt (T tokens) and each decode step (T = 1)
in ONNX and Core ML, the way the KV cache does for the transformer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from distill.embeddings import CompactEmbedding, compact_from
from distill.folder_model import FolderModel


@dataclass
class RNNConfig:
    vocab_size: int
    num_labels: int
    embed_dim: int = 128
    hidden: int = 256
    layers: int = 1
    bidirectional: bool = True
    cell: str = "lstm"
    dropout: float = 0.2
    pad_token_id: int = 0
    # > 0: the embedding is a CompactEmbedding with this many rows (restricted vocabulary, distill/vocab.py);
    # input ids stay the tokenizer's (vocab_size of them)
    vocab_rows: int = 0
    model_type: str = "rnn-classifier"


def reverse_valid(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first lengths[b] steps, leaving the padding where it is.  x: (B, T, C)."""
    T = x.shape[1]
    t = torch.arange(T, device=x.device).unsqueeze(0)  # (1, T)
    L = lengths.unsqueeze(1)  # (B, 1)
    idx = torch.where(t < L, L - 1 - t, t)  # (B, T)
    return torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[2]))


class RNNClassifier(FolderModel):
    config_class = RNNConfig

    def __init__(self, cfg: RNNConfig):
        super().__init__()
        self.config = cfg
        rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cfg.cell]
        self.embed: nn.Module = nn.Embedding(cfg.vocab_size, cfg.embed_dim, padding_idx=cfg.pad_token_id)
        if cfg.vocab_rows:
            self.embed = CompactEmbedding(cfg.vocab_size, cfg.vocab_rows, cfg.embed_dim, cfg.embed_dim)
        dirs = 2 if cfg.bidirectional else 1
        self.fwd = nn.ModuleList()
        self.bwd = nn.ModuleList()
        for i in range(cfg.layers):
            d_in = cfg.embed_dim if i == 0 else cfg.hidden * dirs
            self.fwd.append(rnn(d_in, cfg.hidden, batch_first=True))
            if cfg.bidirectional:
                self.bwd.append(rnn(d_in, cfg.hidden, batch_first=True))
        self.drop = nn.Dropout(cfg.dropout)
        # masked mean and max pooling of the top layer's states, concatenated
        self.head = nn.Sequential(nn.Linear(2 * cfg.hidden * dirs, cfg.hidden), nn.ReLU(), nn.Dropout(cfg.dropout),
                                  nn.Linear(cfg.hidden, cfg.num_labels))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.to(torch.float32).unsqueeze(-1)  # (B, T, 1)
        lengths = attention_mask.to(torch.int64).sum(1).clamp(min=1)  # (B,)
        return self.pooled(input_ids, mask, lambda t: reverse_valid(t, lengths))

    def pooled(self, input_ids: torch.Tensor, mask: torch.Tensor, reverse) -> torch.Tensor:
        """Logits from ids and the float mask (B, T, 1); reverse(t) reverses each row's valid steps of t
        (B, T, C) (export/coreml.py passes a Core ML-friendly one)."""
        x = self.drop(self.embed(input_ids))  # (B, T, E)
        for i in range(self.config.layers):
            out_f, _ = self.fwd[i](x)  # (B, T, H): causal, so right padding cannot reach valid steps
            if self.config.bidirectional:
                out_b, _ = self.bwd[i](reverse(x))
                out_f = torch.cat([out_f, reverse(out_b)], dim=-1)  # (B, T, 2H)
            x = self.drop(out_f) if i + 1 < self.config.layers else out_f
        mean = (x * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (B, D)
        # finite large negative rather than -inf: stays finite in fp16 exports
        mx = (x * mask + (mask - 1.0) * 1e4).max(1).values  # (B, D)
        return self.head(self.drop(torch.cat([mean, mx], dim=-1)))

    def restrict_vocab(self, vmap) -> None:
        """Keep only vmap's rows of the embedding (the tokenizer's ids still go in)."""
        self.embed = compact_from(self.embed, vmap, 0, self.config.pad_token_id)
        self.config.vocab_rows = vmap.size


@dataclass
class LSTMLMConfig:
    vocab_size: int
    embed_dim: int = 128
    hidden: int = 256
    layers: int = 1
    dropout: float = 0.2
    model_type: str = "lstm-lm"


class LSTMLM(FolderModel):
    config_class = LSTMLMConfig

    def __init__(self, cfg: LSTMLMConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.lstm = nn.LSTM(cfg.embed_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True,
                            dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(cfg.hidden, cfg.embed_dim)  # back to embedding width: the output layer is tied

    def zero_state(self, batch: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.config.layers, batch, self.config.hidden)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def forward(self, input_ids: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor):
        """input_ids (B, T), h0/c0 (L, B, H) -> logits (B, T, V), h (L, B, H), c (L, B, H)."""
        x = self.drop(self.embed(input_ids))  # (B, T, E)
        out, (h, c) = self.lstm(x, (h0, c0))  # (B, T, H)
        logits = self.proj(self.drop(out)) @ self.embed.weight.T  # (B, T, V)
        return logits, h, c
