"""Export-time rewrite of a BERT-family classifier: the last layer computes the [CLS] position only.

A sequence classifier reads one vector, the last layer's [CLS] output (the pooler takes position 0). In the
last layer every other position's query, attention output, output projection and feed-forward block is
computed and thrown away; only its keys and values need every position. `ClsOnlyLayer` wraps that layer
and computes exactly what the [CLS] output needs: K and V for all T positions, the rest for one. Same
weights, same function (the logits match the full model to float rounding, checked after every export);
at 64 tokens the last layer does about 1/5 of its work, so a 4-layer student about 20% less in all.

Why at export and not in the model: training needs every position of every layer (the hidden-state and
attention losses of distill/distiller.py), and the PyTorch folder stays a normal Hugging Face checkpoint.
Exported files are a serving graph; their input/output names and shapes do not change, so every client
(ONNX Runtime, onnxruntime-web, transformers.js, Optimum) loads them the same way.

Applies to the model types in BERT_LAYER_TYPES, whose encoder layer computes exactly BertLayer's function
(BERT and MiniLM, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA: transformers' copies of BertLayer), with absolute
positions: the first layers keep their usual graph, so ORT's transformer optimizer still fuses their
attention. Other types keep every layer whole, with the reason recorded (`cls_only_refusal`): MobileBERT's
layer has the same submodule names but a different function (bottleneck projections around attention,
stacked feed-forward blocks), so matching on names would rebuild the wrong computation. The npu student
(distill/npu_student.py) has its own switch, `cls_only`, which this turns on the same way; its
static NPU files (export/npu.py) get it too.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
from torch import nn


# transformers model types whose layer class is BertLayer or a "Copied from ... BertLayer" of it
# (checked in transformers 4.57's modeling files). Not here, though some have the same attribute names:
# MobileBERT (bottleneck), MPNet (relative position bias), DeBERTa(-v2) (disentangled attention), DistilBERT
# and ALBERT (other layer classes).
BERT_LAYER_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra")


def cls_only_refusal(model: nn.Module) -> str | None:
    """Why the last layer cannot be swapped for ClsOnlyLayer (None: it can)."""
    hf = getattr(model, "hf", model)  # distill.models.HFLogits or a transformers model
    cfg = getattr(hf, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type is None:
        return "not a transformers encoder"
    if model_type not in BERT_LAYER_TYPES:
        return (f"model type '{model_type}' is not one whose layer is BERT's ({', '.join(BERT_LAYER_TYPES)}); "
                f"every layer is exported whole")
    if getattr(cfg, "is_decoder", False):
        return "a decoder: every position's output is read"
    if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        return (f"position_embedding_type '{cfg.position_embedding_type}': its attention adds a distance term "
                f"ClsOnlyLayer does not compute")
    layers = getattr(getattr(getattr(hf, "base_model", None), "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) < 2:  # one layer: nothing left to fuse
        return "fewer than 2 encoder layers (the one layer would be the whole model)"
    need = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output",
            "intermediate", "output")
    if missing := [path for path in need if not _has(layers[-1], path)]:
        return f"the last encoder layer has no {', '.join(missing)}"
    return None


def _bert_layers(model: nn.Module) -> nn.ModuleList | None:
    """The encoder's layer list when its last layer computes BertLayer's function."""
    if cls_only_refusal(model) is not None:
        return None
    return getattr(model, "hf", model).base_model.encoder.layer


def _has(m: nn.Module, path: str) -> bool:
    for part in path.split("."):
        m = getattr(m, part, None)
        if m is None:
            return False
    return True


def supports_cls_only(model: nn.Module) -> bool:
    """A BERT-family transformers classifier, or a model with its own `cls_only` switch (the npu student)."""
    return _bert_layers(model) is not None or isinstance(getattr(model, "cls_only", None), bool)


class ClsOnlyLayer(nn.Module):
    """A BertLayer's function at position 0 only: (B, T, H) -> ((B, 1, H),). The encoder passes the
    additive attention mask it built for the full layer ((B, 1, 1, T) or (B, 1, T, T)); row 0 is the
    [CLS] query's."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args, **kwargs):
        sa = self.layer.attention.self
        b, t, _ = hidden_states.shape
        heads, dh = sa.num_attention_heads, sa.attention_head_size
        cls = hidden_states[:, :1]  # (B, 1, H)
        q = sa.query(cls).view(b, 1, heads, dh).transpose(1, 2)  # (B, h, 1, dh)
        k = sa.key(hidden_states).view(b, t, heads, dh).transpose(1, 2)  # (B, h, T, dh)
        v = sa.value(hidden_states).view(b, t, heads, dh).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)  # (B, h, 1, T)
        if attention_mask is not None:
            scores = scores + attention_mask[:, :, :1, :].to(scores.dtype)
        ctx = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, 1, heads * dh)  # (B, 1, H)
        attn = self.layer.attention.output(ctx, cls)  # dense, dropout, LayerNorm(. + cls)
        return (self.layer.output(self.layer.intermediate(attn), attn),)  # (B, 1, H)


@contextlib.contextmanager
def cls_only_last_layer(model: nn.Module, enabled: bool = True) -> Iterator[bool]:
    """Swap the last encoder layer for its ClsOnlyLayer while the block runs (an export); yields whether
    it did (enabled and the model has BERT's layers). The model is left as it was, also when the block raises."""
    if enabled and isinstance(getattr(model, "cls_only", None), bool):  # its own switch (distill/npu_student.py)
        model.cls_only = True
        try:
            yield True
        finally:
            model.cls_only = False
        return
    layers = _bert_layers(model) if enabled else None
    if layers is None:
        yield False
        return
    last = layers[-1]
    layers[-1] = ClsOnlyLayer(last)
    try:
        yield True
    finally:
        layers[-1] = last
