"""LSTM language model baseline: embedding -> stacked unidirectional LSTM -> projection -> tied output layer.

The state (h, c) is an explicit input and output, so one graph serves both the prompt (T tokens) and each
decode step (T = 1) in ONNX and Core ML, the way the KV cache does for the transformer.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from pipeline.config import BaselineSection
from pipeline.errors import PipelineError


@dataclass
class LSTMLMConfig:
    vocab_size: int
    embed_dim: int = 128
    hidden: int = 256
    layers: int = 1
    dropout: float = 0.2
    model_type: str = "lstm-lm"


class LSTMLM(nn.Module):
    def __init__(self, cfg: LSTMLMConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.lstm = nn.LSTM(cfg.embed_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True,
                            dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(cfg.hidden, cfg.embed_dim)  # back to embedding width: the output layer is tied

    def zero_state(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.config.layers, batch, self.config.hidden)
        return torch.zeros(shape), torch.zeros(shape)

    def forward(self, input_ids: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor):
        """input_ids (B, T), h0/c0 (L, B, H) -> logits (B, T, V), h (L, B, H), c (L, B, H)."""
        x = self.drop(self.embed(input_ids))  # (B, T, E)
        out, (h, c) = self.lstm(x, (h0, c0))  # (B, T, H)
        logits = self.proj(self.drop(out)) @ self.embed.weight.T  # (B, T, V)
        return logits, h, c

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(asdict(self.config), indent=2))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors"))

    @classmethod
    def load(cls, folder: Path) -> "LSTMLM":
        from safetensors.torch import load_file

        try:
            cfg = LSTMLMConfig(**json.loads((folder / "config.json").read_text()))
            model = cls(cfg)
            model.load_state_dict(load_file(str(folder / "model.safetensors")))
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
            raise PipelineError(f"the LSTM LM in {folder} is missing or corrupt ({e}); re-run the baseline stage") from None
        return model.eval()


def build_lstm_lm(b: BaselineSection, vocab_size: int) -> LSTMLM:
    if b.cell != "lstm":
        raise PipelineError(f"baseline.cell = '{b.cell}': the generation baseline is an LSTM language model; "
                            f"set baseline.cell = \"lstm\"")
    return LSTMLM(LSTMLMConfig(vocab_size, b.embed_dim, b.hidden, b.layers, b.dropout))
