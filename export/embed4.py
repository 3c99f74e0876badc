"""4-bit word-embedding table for the int8-dynamic variant (quantize.embedding_bits = 4).

After vocabulary restriction and factorization the embedding table is still the biggest single tensor of a
small student; int8 halves nothing more. ONNX Runtime's contrib op GatherBlockQuantized (com.microsoft)
looks rows up in a 4-bit table with one scale and zero point per block of `block` values along a row, and
its kernel reads uint8 bytes holding two 4-bit values each, low nibble first, row by row.
Only the word table is converted (the Gather the token ids reach): position and token-type tables are
small, and the integer id -> row table must stay exact.
The quantization is written here (asymmetric, round to nearest, as ORT's own weight-only quantizer does),
since that quantizer's module needs the onnx-ir package this project does not install.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError


def _token_gather(model):
    """The Gather that reads the word table: a constant float (V, E) table indexed by the token ids, either
    the graph's first input itself or its rows from an integer id -> row table (distill/embeddings.py)."""
    import onnx

    inits = {t.name: t for t in model.graph.initializer}
    ids = {model.graph.input[0].name}
    for node in model.graph.node:  # follow the id -> row lookup and casts of the ids
        if node.op_type in ("Gather", "Cast") and node.input[-1 if node.op_type == "Gather" else 0] in ids:
            t = inits.get(node.input[0]) if node.op_type == "Gather" else None
            if node.op_type == "Cast" or (t is not None and t.data_type != onnx.TensorProto.FLOAT):
                ids.add(node.output[0])
    for node in model.graph.node:
        t = inits.get(node.input[0]) if node.op_type == "Gather" else None
        if t is not None and t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2 and node.input[1] in ids:
            return node, inits
    return None, inits


def embedding_to_4bit(src: Path, out: Path, model_name: str) -> dict:
    """Write src with its word-embedding Gather as a 4-bit GatherBlockQuantized; returns what changed."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    node, inits = _token_gather(model)
    if node is None:
        raise PipelineError(f"{model_name} -> int8-dynamic: quantize.embedding_bits = 4 found no embedding Gather "
                            f"over a constant table in {src.name}; set quantize.embedding_bits = 8")
    rows, dim = inits[node.input[0]].dims
    # 32 values per scale where the row allows (ORT's kernel takes powers of two from 16)
    block = next((b for b in (32, 16) if dim % b == 0), None)
    if block is None:
        raise PipelineError(f"{model_name} -> int8-dynamic: quantize.embedding_bits = 4 quantizes blocks of 16 or 32 "
                            f"values, but the embedding rows are {dim} wide; use a multiple of 16 for "
                            f"student.embedding_dim (or hidden), or quantize.embedding_bits = 8")
    table = node.input[0]
    q, scales, zero_points = quantize_rows_4bit(numpy_helper.to_array(inits[table]), block)
    # uint8 holding two 4-bit values (bits=4): ORT's .ort format has no UINT4 tensor type, this layout loads
    # in both file formats
    data_t = numpy_helper.from_array(pack_uint4(q), f"{table}_Q4")  # (rows, dim / 2)
    scale_t = numpy_helper.from_array(scales, f"{table}_scales")  # (rows, n_blocks) float32
    zp_t = numpy_helper.from_array(pack_uint4(zero_points), f"{table}_zero_points")  # (rows, ceil(n_blocks / 2))
    gather_axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    new = onnx.helper.make_node("GatherBlockQuantized", [data_t.name, node.input[1], scale_t.name, zp_t.name],
                                list(node.output), name=(node.name or "word_embedding") + "_Q4", domain="com.microsoft",
                                gather_axis=gather_axis, quantize_axis=1, block_size=block, bits=4)
    model.graph.initializer.extend([data_t, scale_t, zp_t])
    model.graph.node.insert(list(model.graph.node).index(node), new)
    model.graph.node.remove(node)
    if not any(table in n.input for n in model.graph.node):  # nothing else reads the float table: drop it
        model.graph.initializer.remove(inits[table])
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(out))
    return {"table": table, "rows": int(rows), "dim": int(dim), "bits": 4, "block": block}


def quantize_rows_4bit(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, dim) float -> (uint4 values (rows, dim), scales (rows, dim/block), zero points (rows, dim/block)).
    Each block's range includes 0, so zero (the padding row) stays exact: value = (q - zp) * scale."""
    rows, dim = w.shape
    b = w.reshape(rows, dim // block, block).astype(np.float32)
    lo = np.minimum(b.min(-1), 0.0)
    hi = np.maximum(b.max(-1), 0.0)
    scale = (hi - lo) / 15.0
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    zp = np.clip(np.round(-lo / scale), 0, 15)
    q = np.clip(np.round(b / scale[..., None]) + zp[..., None], 0, 15)
    return q.reshape(rows, dim).astype(np.uint8), scale, zp.astype(np.uint8)


def pack_uint4(values: np.ndarray) -> np.ndarray:
    """(rows, n) values 0..15 -> (rows, ceil(n / 2)) uint8, two per byte, the first in the low nibble (each
    row padded on its own, as GatherBlockQuantized reads rows)."""
    v = values.astype(np.uint8)
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros((*v.shape[:-1], 1), np.uint8)], axis=-1)
    return (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)
