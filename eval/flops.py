"""Forward FLOPs per sequence from a model folder's config (2 FLOPs per multiply-add), by formula.

Encoder (per token): L * (8 d^2 + 4 d d_ff + 4 n d): Q/K/V/O projections, the feed-forward pair, and
attention scores + weighted sum, which grow with the length n - so a sequence costs n times that.
LSTM cell (per token, per direction): 8 h (d_in + h), four gates; GRU: three gates, 6 h (d_in + h).
Embedding lookups, layer norms, softmax and the classifier head are ignored (well under 1%); a factorized
embedding's E x H projection (distill/embeddings.py) is counted: 2 E H per token.
cls_only: exported BERT-family files whose last layer computes the [CLS] position only (export/cls_only.py):
that layer costs 4 d^2 n (K, V) + 4 d^2 (Q, O) + 2 m d d_ff (one token's feed-forward) + 4 n d.
"""
from __future__ import annotations

import json
import math
from pathlib import Path


def encoder_flops(layers: int, d: int, d_ff: int, n: int, ffn_mats: int = 2, cls_only: bool = False) -> int:
    full = layers - 1 if cls_only else layers
    total = n * full * (8 * d * d + 2 * ffn_mats * d * d_ff + 4 * n * d)
    if cls_only:
        total += 4 * d * d * n + 4 * d * d + 2 * ffn_mats * d * d_ff + 4 * n * d
    return total


def rnn_flops(layers: int, d_embed: int, h: int, bidirectional: bool, n: int, cell: str = "lstm") -> int:
    gates = {"lstm": 4, "gru": 3}[cell]
    dirs = 2 if bidirectional else 1
    return sum(dirs * n * 2 * gates * h * ((d_embed if i == 0 else h * dirs) + h) for i in range(layers))


def folder_flops(folder: Path, n: int, cls_only: bool = False) -> int | None:
    """FLOPs of one forward pass over a sequence of n tokens, or None for an architecture not covered."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    base = _arch_flops(json.loads(path.read_text()), n, cls_only)
    return None if base is None else base + n * _projection_flops(Path(folder))


def row_flops(folders: dict, row: dict, n: int) -> int | None:
    """Formula FLOPs of the work one bench row's file does at n tokens (`_cls_only` set by eval/bench.py)."""
    folder = folders.get(row["model"])
    return folder_flops(folder, n, row.get("_cls_only", False)) if folder else None


def _projection_flops(folder: Path) -> int:
    meta = folder / "pocketformer.json"
    spec = json.loads(meta.read_text()).get("embedding") if meta.is_file() else None
    return 2 * spec["dim"] * spec["out_dim"] if spec and spec["dim"] != spec["out_dim"] else 0


def _arch_flops(c: dict, n: int, cls_only: bool = False) -> int | None:
    if c.get("model_type") == "rnn-classifier":
        return rnn_flops(c["layers"], c["embed_dim"], c["hidden"], c["bidirectional"], n, c.get("cell", "lstm"))
    if {"num_hidden_layers", "hidden_size", "intermediate_size"} <= c.keys():
        # gated feed-forward (Llama family) has three d x d_ff matrices, BERT's has two
        mats = 3 if c.get("model_type") in ("llama", "mistral", "qwen2") else 2
        return encoder_flops(c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"], n, mats,
                             cls_only and mats == 2)
    return None


def graph_flops(onnx_path: Path, seq_len: int, batch: int = 1) -> int:
    """FLOPs of the MatMul / Gemm / LSTM nodes of an ONNX graph at a fixed (batch, seq_len), from shape
    inference: a cross-check of the formulas above on the very file that is benchmarked."""
    import tempfile

    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    from eval.npu import fix_shapes

    with tempfile.TemporaryDirectory() as tmp:
        fixed = fix_shapes(Path(onnx_path), Path(tmp) / "fixed.onnx", batch, seq_len)
        # ORT's symbolic inference follows Shape -> Gather -> Reshape chains that onnx's own leaves unknown
        model = SymbolicShapeInference.infer_shapes(onnx.load(str(fixed)), auto_merge=True)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    total = 0
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            a, b = shapes.get(node.input[0]), shapes.get(node.input[1])
            out = shapes.get(node.output[0])
            if not a or not b or not out or None in out or None in a:
                continue
            trans_a = any(at.name == "transA" and at.i for at in node.attribute)
            total += 2 * math.prod(out) * (a[-2] if trans_a else a[-1])
        elif node.op_type == "LSTM":
            w = shapes.get(node.input[1])  # (dirs, 4h, d_in)
            r = shapes.get(node.input[2])  # (dirs, 4h, h)
            x = shapes.get(node.input[0])  # (T, B, d_in) in ONNX's default layout
            if w and r and x and None not in x:
                total += 2 * x[0] * x[1] * w[0] * w[1] * (w[2] + r[2])
    return total


def decoder_flops(model, n: int) -> int:
    """A causal decoder's forward FLOPs for n tokens, counted on the model itself, so every family's layout is
    right (gated or plain feed-forward, GPT-2's Conv1D, OPT's projections, untied or tied output layer): 2 per
    weight multiply-add of its matrices (the output layer included; the embedding lookup is none), plus causal
    attention scores and values, 2 * 2 * L * (heads * head_dim) * n^2 / 2 (local or sliding-window attention
    costs less once n passes the window)."""
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    c = model.config
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, (nn.Linear, Conv1D)))
    width = c.num_attention_heads * (getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
    return int(2 * n * matrices + 2 * c.num_hidden_layers * width * n * n)


def lstm_lm_flops(config, n: int) -> int:
    """The LSTM language model's (distill/lstm.py) FLOPs for n tokens: LSTM cell 8 h (d_in + h) per layer
    per token, projection 2 h E, tied output layer 2 V E."""
    E, H, V = config.embed_dim, config.hidden, config.vocab_size
    return int(rnn_flops(config.layers, E, H, False, n) + n * (2 * H * E + 2 * V * E))
