"""Static-shape NPU files of the NPU student (student.arch = "npu"): one ONNX file per provider variant and
per sequence length (quantize.npu_lengths), int32 inputs, batch 1, each checked against the PyTorch model,
scored on the test split and run through ORT's mobile usability checker (eval/npu.py).

Why two variants and not one file for both providers (the checker's op lists,
onnxruntime/tools/mobile_helpers/*.md, are what decide):
- NNAPI takes QuantizeLinear / DequantizeLinear and Gather with int32 indices, so `nnapi-int8` is the whole
  model in uint8 QDQ (int8 per-channel weights, uint8 activations), token lookup included: input_ids in.
- The CoreML EP takes neither Q/DQ nor Gather (its MLProgram list has GatherND only), and it rejects any
  dimension above 16,384, which a 30,522-row word table has. So `coreml-int8w` starts from the looked-up
  embeddings (the app runs the one-Gather `lookup.onnx` on the CPU first) and stores its weights as int8
  with per-channel scales, written as Cast + Mul: ONNX Runtime folds those into float weights when it loads
  the model, before the graph is partitioned, and Core ML computes in fp16 on the Neural Engine anyway (its
  own int8 is weight compression too). Smaller download, float compute.
- Qualcomm's HTP (the QNN provider) takes the nnapi-int8 file whole; `qnn-w8a16` is the same graph with uint8
  weights and uint16 activations, Qualcomm's recommendation for transformers. Every file carries a compact
  embedding's id table as int32 (export/index_tables.py: the HTP's Gather rejects 16-bit integer data).
The additive attention Add and the Softmax stay in float in the QDQ files: the -1e4 mask fill would
stretch a uint8 range over every real score (export/quantize.py, STATIC_OPS).
"""
from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from distill.batching import cut
from export.padding import pad
from pipeline.errors import PipelineError, lookup


@dataclass(frozen=True)
class NpuVariant:
    provider: str  # the usability checker's section this file is made for (eval/npu.py keys)
    lookup_in_graph: bool  # True: input_ids in; False: embeddings in, lookup.onnx beside it
    quantize: str  # "qdq" (weights and activations) | "weights" (int8 weights, float compute)
    description: str
    activations: str = "uint8"  # qdq only: the activation type ("uint8" | "uint16")
    weights: str = "int8"  # qdq only: the weight type ("int8" | "uint8")
    per_channel: bool = True  # qdq only: one weight scale per output channel (else per tensor)


NPU_VARIANTS = {
    "nnapi-int8": NpuVariant("nnapi", True, "qdq", "uint8 QDQ (int8 per-channel weights), token lookup in the "
                             "graph (Gather on int32 ids); for ONNX Runtime's NNAPI provider"),
    "coreml-int8w": NpuVariant("coreml_mlprogram", False, "weights", "int8 per-channel weights folded to float "
                               "at load, embeddings in (lookup.onnx runs on the CPU); for the CoreML provider"),
    # Qualcomm's recommendation for transformers on the HTP: 16-bit activations keep the residual stream and
    # the layer-norm statistics that uint8 rounds, 8-bit weights keep the size. Per-tensor uint8 weights:
    # the HTP's per-channel (axis) encodings are for signed symmetric weights, and QNN's own w8a16 recipe
    # (get_qnn_qdq_config) quantizes weights per tensor unless asked otherwise.
    "qnn-w8a16": NpuVariant("qnn", True, "qdq", "uint8 weights, uint16 activations (QDQ), token lookup in the "
                            "graph; for ONNX Runtime's QNN provider on Qualcomm's HTP (Snapdragon NPU)",
                            activations="uint16", weights="uint8", per_channel=False),
}
LOOKUP_FILE = "lookup.onnx"


def get_npu_variant(name: str) -> NpuVariant:
    return lookup(NPU_VARIANTS, name, f"NPU variant '{name}' in quantize.npu_variants")


class _Part(nn.Module):
    """The graph one file holds: the token lookup (ids -> embeddings), the encoder from embeddings
    (embeddings, mask -> logits) or both (ids, mask -> logits)."""

    def __init__(self, m: nn.Module, lookup: bool, encode: bool):
        super().__init__()
        self.m, self.lookup, self.encode = m, lookup, encode

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.lookup:
            x = self.m.embed(x)
        return self.m.encode(x, attention_mask)[0] if self.encode else x


def _export(module: nn.Module, args: tuple, out: Path, names: list[str], outputs: list[str], opset: int,
            dynamic: dict | None = None) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trace-time notes; every file is checked against PyTorch after
        torch.onnx.export(module.eval(), args, str(out), dynamo=False, input_names=names, output_names=outputs,
                          opset_version=opset, do_constant_folding=True, dynamic_axes=dynamic)


def export_static(model: nn.Module, out: Path, length: int, variant: NpuVariant, opset: int) -> Path:
    """fp32 ONNX at batch 1 x length, int32 inputs, no dynamic axis. The traced graph still computes its
    reshapes from Shape ops (the module keeps them dynamic for training and Core ML tracing); ONNX Runtime's
    basic optimizations (what every session applies at load, and the usability checker before it counts)
    fold them into constants here, so the file is the graph the providers see."""
    from onnxruntime.tools.onnx_model_utils import optimize_model

    mask = torch.ones(1, length, dtype=torch.int32)
    mask[0, length // 2:] = 0  # a padded example keeps the mask path in the trace
    ids = torch.full((1, length), 5, dtype=torch.int32)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.onnx"
        in_graph = variant.lookup_in_graph  # else the file starts from the looked-up embeddings
        x, name = (ids, "input_ids") if in_graph else (model.embed(ids).detach(), "embeddings")
        _export(_Part(model, in_graph, encode=True), (x, mask), raw, [name, "attention_mask"], ["logits"], opset)
        optimize_model(raw, out)
    _widen_tables(out)
    return out


def _widen_tables(path: Path) -> None:
    """A compact embedding's int16 id -> row table as int32, its Cast gone (export/index_tables.py: the HTP's
    Gather rejects 16-bit integer data)."""
    import onnx

    from export.index_tables import widen_index_tables

    model = onnx.load(str(path))
    if widen_index_tables(model):
        onnx.save(model, str(path))


def export_lookup(model: nn.Module, out: Path, opset: int) -> Path:
    """The token lookup alone (int32 ids (1, n) -> embeddings (1, n, D)), its table int8 (dynamic Gather
    quantization): what the app runs on the CPU before a coreml-int8w file."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "lookup.onnx"
        _export(_Part(model, lookup=True, encode=False), (torch.full((1, 8), 5, dtype=torch.int32),), raw,
                ["input_ids"], ["embeddings"], opset,
                dynamic={"input_ids": {1: "sequence"}, "embeddings": {1: "sequence"}})
        _widen_tables(raw)
        quantize_dynamic(str(raw), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["Gather"])
    return out


def int8_weights(src: Path, out: Path, min_elements: int = 1024) -> int:
    """Every MatMul / Gemm weight initializer with at least min_elements values -> int8 with one symmetric
    scale per output channel, dequantized in the graph by Cast + Mul (ops every provider lists, folded into
    float weights by ONNX Runtime at load). Returns how many weights were converted."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    done: dict[str, str] = {}
    new_nodes = []
    for node in g.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[1] not in inits:
            continue
        name = node.input[1]
        if name not in done:
            w = numpy_helper.to_array(inits[name])
            if w.ndim != 2 or w.size < min_elements or w.dtype != np.float32:
                continue
            trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
            axis = 1 if trans_b else 0  # reduce over the input dimension: one scale per output channel
            scale = np.maximum(np.abs(w).max(axis=axis, keepdims=True), 1e-12) / 127.0
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            g.initializer.remove(inits[name])
            g.initializer.extend([numpy_helper.from_array(q, f"{name}_int8"),
                                  numpy_helper.from_array(scale.astype(np.float32), f"{name}_scale")])
            new_nodes += [helper.make_node("Cast", [f"{name}_int8"], [f"{name}_cast"], to=onnx.TensorProto.FLOAT,
                                           name=f"{name}_cast"),
                          helper.make_node("Mul", [f"{name}_cast", f"{name}_scale"], [f"{name}_deq"],
                                           name=f"{name}_deq")]
            done[name] = f"{name}_deq"
        node.input[1] = done[name]
    for i, n in enumerate(new_nodes):  # dequantizers first: the graph stays topologically sorted
        g.node.insert(i, n)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return len(done)


def quantize_qdq(src: Path, out: Path, calib_ids: list[list[int]], length: int, pad_id: int, model_name: str,
                 variant: NpuVariant) -> None:
    """QDQ of a static file with the variant's types (nnapi-int8: uint8 activations, int8 per-channel weights)
    over the ops of export/quantize.py's STATIC_OPS: weights and data movement; the mask Add and Softmax
    stay float."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from export.quantize import STATIC_OPS, calibration_reader

    qtypes = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8, "uint16": QuantType.QUInt16}

    if not calib_ids:
        raise PipelineError(f"{model_name} -> NPU int8: no calibration texts; the training split is empty")
    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(src), str(pre))
        feeds = [{"input_ids": x, "attention_mask": m} for x, m in (pad(s, [length], pad_id) for s in calib_ids)]
        quantize_static(str(pre), str(out), calibration_reader(feeds),
                        quant_format=QuantFormat.QDQ, per_channel=variant.per_channel,
                        activation_type=qtypes[variant.activations], weight_type=qtypes[variant.weights],
                        op_types_to_quantize=STATIC_OPS)


class NpuRunner:
    """Runs one variant's files the way an app would: each text alone, padded to the shortest enumerated
    length that holds it (texts longer than the longest are cut to it, [SEP] kept by the tokenizer)."""

    def __init__(self, files: dict[int, Path], variant: NpuVariant, lookup: Path | None, threads: int = 1):
        from export.ort_session import ort_session

        self.variant = variant
        self.sessions = {n: ort_session(p, threads) for n, p in sorted(files.items())}
        self.lookup = ort_session(lookup, threads) if lookup is not None else None

    def __call__(self, ids: Sequence[int], pad_id: int) -> np.ndarray:
        return self.at(next(k for k in self.sessions if k >= len(ids)), ids, pad_id)

    def at(self, n: int, ids: Sequence[int], pad_id: int) -> np.ndarray:
        """Logits (C,) of the length-n file on ids padded to n (cut to n first where longer)."""
        x, m = pad(cut(ids, n), [n], pad_id)
        if self.variant.lookup_in_graph:
            feed = {"input_ids": x, "attention_mask": m}
        else:
            feed = {"embeddings": self.lookup.run(["embeddings"], {"input_ids": x})[0], "attention_mask": m}
        return self.sessions[n].run(["logits"], feed)[0][0].astype(np.float32)  # (C,)

    def logits(self, all_ids: list[list[int]], pad_id: int) -> np.ndarray:
        return np.stack([self(s, pad_id) for s in all_ids])  # (N, C)


def torch_logits(model: nn.Module, all_ids: list[list[int]]) -> np.ndarray:
    """The PyTorch model on each text alone, unpadded: the reference every NPU file is held to."""
    with torch.no_grad():
        return np.stack([model(torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long))[0].float().numpy()
                         for s in all_ids])


def write_variant(model: nn.Module, folder: Path, name: str, lengths: list[int], opset: int,
                  calib_ids: list[list[int]], pad_id: int, model_name: str, cls_only: bool = False) -> dict:
    """Write `<folder>/<name>-<n>.onnx` for every length (and lookup.onnx when the variant needs it).
    Returns {"files": {n: Path}, "lookup": Path | None, "details": {...}}."""
    from export.cls_only import cls_only_last_layer

    v = get_npu_variant(name)
    folder.mkdir(parents=True, exist_ok=True)
    files, details = {}, {"quantize": v.quantize, "provider": v.provider, "description": v.description,
                          "cls_only_last_layer": cls_only}
    lookup = None if v.lookup_in_graph else folder / LOOKUP_FILE
    if lookup is not None and not lookup.exists():
        export_lookup(model, lookup, opset)
    with tempfile.TemporaryDirectory() as tmp:
        for n in lengths:
            with cls_only_last_layer(model, cls_only):  # the lookup file is the same either way
                fp32 = export_static(model, Path(tmp) / f"{name}-{n}-fp32.onnx", n, v, opset)
            out = folder / f"{name}-{n}.onnx"
            if v.quantize == "qdq":
                quantize_qdq(fp32, out, [s[:n] for s in calib_ids if len(s) <= n] or [s[:n] for s in calib_ids],
                             n, pad_id, model_name, v)
            else:
                details["int8_weights"] = int8_weights(fp32, out)
            files[n] = out
    return {"files": files, "lookup": lookup, "details": details}


def length_references(model: nn.Module, ids: list[list[int]], lengths: list[int]) -> dict[int, dict]:
    """{n: {"ids", "ref", "cut"}} per NPU length: every check text as the length-n file gets it (cut to n, [SEP]
    kept, where longer; "cut" counts those) and the PyTorch logits (N, C) of exactly those ids. Shared by every
    variant; PyTorch runs once per text and again only on the texts a length cuts."""
    whole = torch_logits(model, ids)  # (N, C)
    out = {}
    for n in sorted(set(lengths)):
        longer = [i for i, s in enumerate(ids) if len(s) > n]
        ref = whole.copy()
        if longer:
            ref[longer] = torch_logits(model, [cut(ids[i], n) for i in longer])
        out[n] = {"ids": [cut(s, n) for s in ids], "ref": ref, "cut": len(longer)}
    return out


def check_variant(runner: NpuRunner, refs: dict[int, dict], pad_id: int, minimum: float, what: str) -> dict:
    """Argmax agreement with the PyTorch logits at every length: each check text runs through every length's
    file (padded to n, or cut to n where longer), so a file no text would reach when padded to the shortest
    length that holds it (every text <= 13 tokens and a 32-token file) is still run and held to the minimum.
    Below the minimum at any length: passed False and the reason (the variant is recorded as failed, the
    stage goes on); value is the lowest agreement, by_length has each length's numbers."""
    from export.checks import agreeing

    by_length = {}
    for n, r in refs.items():
        got = np.stack([runner.at(n, s, pad_id) for s in r["ids"]])  # (N, C)
        by_length[str(n)] = {"value": float(agreeing(got, r["ref"]).mean()),
                             "max_abs_diff": float(np.abs(got - r["ref"]).max()), "texts": len(r["ids"]),
                             "cut": r["cut"]}
    worst = min(by_length, key=lambda n: by_length[n]["value"])
    texts = by_length[worst]["texts"]
    agree = by_length[worst]["value"]
    result = {"kind": "argmax_agreement", "value": agree, "tolerance": minimum, "passed": agree >= minimum,
              "max_abs_diff": float(np.max([b["max_abs_diff"] for b in by_length.values()])), "texts": texts,
              "worst_length": int(worst), "by_length": by_length,
              "inputs": f"{texts} test texts, each alone, through every NPU length's file ({', '.join(by_length)}): "
                        f"padded to the length, or cut to it ([SEP] kept) where longer"}
    if not result["passed"]:
        low = [n for n, b in by_length.items() if b["value"] < minimum]
        result["reason"] = (f"{what}: argmax agrees with the fp32 PyTorch model on only {agree:.1%} of {texts} "
                            f"test texts at {worst} tokens (below the minimum at {', '.join(low)} tokens); the "
                            f"minimum is {minimum:.1%} (quantize.min_argmax_agreement): not compiled, timed or "
                            f"shipped")
    return result
