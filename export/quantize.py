"""ONNX -> lossy ONNX variants: int8 dynamic (weights), int8 and w8a16 static QDQ (calibrated), fp16.

Each function writes one file and returns what it did (quantized op counts), so the stage can record it
and a test can see that the ops that matter really changed type.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from export.optimize import op_counts
from pipeline.errors import PipelineError, VariantSkipped

# Gather is listed on purpose: the word-embedding table is most of a small student's (and an LSTM's)
# weights, and left in fp32 it caps the size gain near 1.3x instead of ~4x.
# Attention is listed for the fused graph int8-dynamic starts from by default (quantize.dynamic_source):
# QAttention with int8 Q/K/V weights. The optimized graph keeps its layer norms unfused, and the .ort
# conversion leaves SkipLayerNormalization out (export/ort_format.py). Demo student, 64 tokens, files timed
# in alternation (python -m tools.fusion_probe): 0.54 ms (1 thread, .ort) and 0.78 ms (2 threads, .onnx)
# from the fused graph against 0.58 and 0.90 ms from the unfused one; Optimum's int8 file: 0.79 and 0.92 ms.
DYNAMIC_OPS = ["MatMul", "Gather", "LSTM", "Attention"]
# Static QDQ: the weight ops and the data-movement ops between them. Add and Softmax stay float: BERT's
# additive attention mask (float32 min) stretches the quantized range of scores + mask to ~3.4e38 and
# rounds every real score to zero. On the tiny test teacher quantizing Add or Softmax dropped argmax
# agreement with PyTorch from 100% to 65%. More parts can stay float by quantize.static_float (below).
STATIC_OPS = ["MatMul", "Gemm", "Gather", "GatherElements", "LayerNormalization", "Transpose", "Reshape",
              "Squeeze", "Unsqueeze", "Slice", "Concat", "Split", "Where"]
# Ops after which walking back from the logits stops: what lies between them and the output is the head.
_HEAD_STOP = {"LayerNormalization", "LSTM", "GRU", "ReduceMean", "ReduceMax", "ReduceSum", "Softmax"}


def _attention_matmuls(model) -> set[str]:
    """MatMuls with no weight input: attention scores (Q x K^T) and probabilities x V. Their uint8 inputs
    round small attention probabilities (below half a step, 1/510 of the largest) to zero; over long texts,
    where attention spreads thin, most of them."""
    weights = {t.name for t in model.graph.initializer}
    return {n.name for n in model.graph.node if n.op_type == "MatMul" and not any(i in weights for i in n.input)}


def _head(model) -> set[str]:
    """MatMul / Gemm nodes between the last normalization, recurrent or pooling op and the logits: the pooler
    and the classifier, whose error goes straight into the logits (and they are a tiny share of the work)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    out, seen, todo = set(), set(), [o.name for o in model.graph.output]
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in seen or node.op_type in _HEAD_STOP:
            continue
        seen.add(node.name)
        if node.op_type in ("MatMul", "Gemm"):
            out.add(node.name)
        todo.extend(node.input)
    return out


# quantize.static_float: parts of the graph int8-static leaves in float. name -> (op types kept out of
# STATIC_OPS, function giving node names to exclude). Figures: docs/export.md "int8-static: what stays in float".
STATIC_FLOAT = {
    "attention-matmul": ((), _attention_matmuls),
    "layer-norm": (("LayerNormalization",), lambda model: set()),  # BERT's residual stream has outliers
    "head": ((), _head),
}


def quantize_int8_dynamic(src: Path, out: Path, model_name: str, per_channel: bool = True) -> dict[str, int]:
    """int8 weights, activations quantized on the fly. LSTM -> DynamicQuantizeLSTM, MatMul -> MatMulInteger,
    Gather (embedding tables) -> int8 table + DequantizeLinear."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # DefaultTensorType: fused contrib ops (a user's pre-optimized graph) carry no output type info
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=DYNAMIC_OPS,
                     per_channel=per_channel, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    counts = op_counts(out)
    if op_counts(src).get("LSTM") and counts.get("LSTM"):
        raise PipelineError(f"{model_name} -> int8-dynamic: {counts['LSTM']} LSTM op(s) were left in fp32 in "
                            f"{out.name}; export with the legacy exporter (its LSTM weights are initializers)")
    return _quantized(counts)


class TextCalibration:
    """Calibration batches for quantize_static: tokenized training texts, padded per batch (like inference)."""

    def __init__(self, tokenizer, texts: list[str], max_length: int, batch_size: int = 16):
        from distill.batching import bucketed_batches, encode, pad

        ids, _ = encode(tokenizer, texts, max_length)
        pad_id = tokenizer.pad_token_id or 0
        self.batches = []
        for b in bucketed_batches([len(s) for s in ids], batch_size, None):
            x, m = pad([ids[i] for i in b], pad_id)  # (B, T) each
            self.batches.append({"input_ids": x.numpy(), "attention_mask": m.numpy()})


def calibration_reader(feeds: list[dict]):
    """An onnxruntime CalibrationDataReader over the feeds, each once."""
    from onnxruntime.quantization import CalibrationDataReader

    it = iter(feeds)

    class _Reader(CalibrationDataReader):
        def get_next(self):
            return next(it, None)

    return _Reader()


def quantize_int8_static(src: Path, out: Path, calibration: TextCalibration, activation_type: str,
                         per_channel: bool, model_name: str, keep_float: list[str] = (),
                         reduce_range: bool = False) -> dict[str, int]:
    """QDQ graph: per-channel int8 weights, activations of activation_type with MinMax ranges from calibration;
    the parts named in keep_float stay float. (ORT's histogram calibrators, percentile and entropy, need every
    calibration batch in one shape, which padding would fill with tokens the model never attends to.)

    Written so Qualcomm's HTP compiler takes it whole (export/gelu_tanh.py, export/index_tables.py): exact
    GELU as its tanh form (the HTP refuses Erf next to uint8 activations), compact-vocabulary id tables as
    int32, and an LSTM as a plain ONNX LSTM with 8-bit weights behind DequantizeLinear (see _lstm_weights).
    """
    from onnxruntime.quantization import QuantType

    act = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}[activation_type]
    return _static_qdq(src, out, calibration, "int8-static", model_name, act, QuantType.QInt8, per_channel,
                       keep_float, reduce_range, tanh_gelu=True)


def quantize_w8a16_static(src: Path, out: Path, calibration: TextCalibration, model_name: str,
                          keep_float: list[str] = ()) -> dict[str, int]:
    """Qualcomm's recipe for the HTP (get_qnn_qdq_config's defaults with 16-bit activations): uint8 weights,
    one scale per tensor (the HTP's per-channel encodings are for signed symmetric weights), uint16
    activations, which keep the residual stream and small attention values that uint8 rounds. Same ops and
    float parts as int8-static; exact GELU stays Erf (the HTP takes the fused Gelu at 16 bits). The file is
    opset 21 (16-bit Quantize/DequantizeLinear); ONNX Runtime's CPU provider runs it, slower than int8."""
    from onnxruntime.quantization import QuantType

    return _static_qdq(src, out, calibration, "w8a16-static", model_name, QuantType.QUInt16, QuantType.QUInt8,
                       False, keep_float, False, tanh_gelu=False)


def _static_qdq(src: Path, out: Path, calibration: TextCalibration, variant: str, model_name: str, act, weight,
                per_channel: bool, keep_float, reduce_range: bool, tanh_gelu: bool) -> dict[str, int]:
    import onnx
    from onnxruntime.quantization import QuantFormat, quantize_static

    from export.gelu_tanh import erf_gelu_to_tanh
    from export.index_tables import widen_index_tables

    if not calibration.batches:
        raise PipelineError(f"{model_name} -> {variant}: no calibration texts; the training split is empty")
    unknown = [n for n in keep_float if n not in STATIC_FLOAT]
    if unknown:
        raise PipelineError(f"quantize.static_float names {unknown}; known parts: {', '.join(STATIC_FLOAT)}")
    with tempfile.TemporaryDirectory() as tmp:
        model = onnx.load(str(src))
        tables = widen_index_tables(model)
        gelus = erf_gelu_to_tanh(model) if tanh_gelu else 0
        htp_src = Path(tmp) / "htp.onnx"
        onnx.save(model, str(htp_src))
        pre = Path(tmp) / "pre.onnx"
        shapes = _pre_process(htp_src, pre, f"{model_name} -> {variant}: ORT's quantization pre-processing "
                                             f"failed on {src.name}")
        graph = onnx.load(str(pre), load_external_data=False)
        ops = [op for op in STATIC_OPS if not any(op in STATIC_FLOAT[k][0] for k in keep_float)]
        exclude = sorted(set().union(*(STATIC_FLOAT[k][1](graph) for k in keep_float)))
        qdq = Path(tmp) / "qdq.onnx"
        quantize_static(str(pre), str(qdq), calibration_reader(calibration.batches), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=act, weight_type=weight,
                        op_types_to_quantize=ops, nodes_to_exclude=exclude, reduce_range=reduce_range)
        model = onnx.load(str(qdq))
        lstm_weights = _lstm_weights(model)
        onnx.save(model, str(out))
    counts = op_counts(out)
    if not counts.get("QuantizeLinear"):
        raise PipelineError(f"{model_name} -> {variant}: the quantizer inserted no QuantizeLinear in {out.name}; "
                            f"the graph has no op ORT's QDQ quantizer handles")
    extra = {k: v for k, v in (("gelu_tanh", gelus), ("int32_id_tables", tables),
                               ("lstm_8bit_weights", lstm_weights), ("symbolic_shape_inference", shapes)) if v}
    return {**_quantized(counts), "float_nodes": len(exclude), **extra}


def _pre_process(src: Path, pre: Path, what: str) -> str | None:
    """ORT's quant_pre_process (shape inference, graph clean-up) of src into pre. Returns None, or why
    symbolic shape inference was left out.

    Symbolic shape inference stops on some graphs with a bare AssertionError (DeBERTa's relative-position
    If / Gather: "Cannot determine if 128 - Min(128, sequence) < 0"). It only adds shapes for the
    quantizer's bookkeeping, so the file is made with ONNX's own shape inference instead; the stage checks
    it against its source either way, and a wrong file is recorded as failed with its numbers."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        # auto_merge: BERT's mask arithmetic otherwise stops symbolic shape inference ("Incomplete ...")
        quant_pre_process(str(src), str(pre), auto_merge=True)
        return None
    except Exception as e:  # noqa: BLE001 - any failure of the symbolic pass; retried without it below
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    try:
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    except Exception as e:  # noqa: BLE001 - the graph defeats both; the variant is recorded, not made
        raise VariantSkipped(f"{what}, with symbolic shape inference ({why}) and without it "
                             f"({type(e).__name__}: {e}); the other variants are made") from e
    return f"left out: it failed on this graph ({why}); ONNX shape inference only"


def _lstm_weights(model) -> int:
    """In place: each LSTM's input and recurrent weights (W, R) as uint8 (one scale and zero point per
    tensor) behind a DequantizeLinear; the LSTM itself stays a plain ONNX LSTM. ORT's QDQ quantizer has no
    LSTM rule, and the dynamic quantizer's DynamicQuantizeLSTM is an ORT contrib op that no NPU provider
    takes; the QNN provider's LSTM builder takes this form and the HTP compiles it (docs/npu.md). Returns the
    number of weight tensors quantized."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    dq_nodes, done = [], 0
    for node in g.node:
        if node.op_type != "LSTM":
            continue
        for k in (1, 2):
            name = node.input[k] if len(node.input) > k else ""
            if name not in inits:
                continue
            w = numpy_helper.to_array(inits[name]).astype(np.float32)
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            scale = (hi - lo) / 255.0 or 1.0
            zp = int(np.clip(round(-lo / scale), 0, 255))
            q = np.clip(np.round(w / scale) + zp, 0, 255).astype(np.uint8)
            g.initializer.remove(inits.pop(name))
            g.initializer.extend([numpy_helper.from_array(q, f"{name}_quantized"),
                                  numpy_helper.from_array(np.array(scale, np.float32), f"{name}_scale"),
                                  numpy_helper.from_array(np.array(zp, np.uint8), f"{name}_zero_point")])
            dq_nodes.append(helper.make_node("DequantizeLinear", [f"{name}_quantized", f"{name}_scale",
                                                                 f"{name}_zero_point"], [name],
                                             name=f"{name}_DequantizeLinear"))
            done += 1
    for i, n in enumerate(dq_nodes):  # before every node: their inputs are initializers
        g.node.insert(i, n)
    return done


def convert_fp16(src: Path, out: Path, model_name: str) -> dict[str, int]:
    """fp16 weights and compute, fp32 inputs/outputs kept (keep_io_types) so callers feed the same arrays."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    except Exception as e:  # the converter raises bare ValueError/AssertionError on graphs it cannot type
        raise PipelineError(f"{model_name} -> fp16: converting {src.name} failed ({e}); "
                            f"leave 'fp16' out of quantize.variants for this model") from None
    onnx.save(model, str(out))
    counts = op_counts(out)
    init16 = sum(1 for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16)
    return {**_quantized(counts), "fp16_initializers": init16}


def _quantized(counts: dict[str, int]) -> dict[str, int]:
    keep = ("GatherBlockQuantized", "DynamicQuantizeLSTM", "MatMulInteger", "QAttention", "QEmbedLayerNormalization", "QuantizeLinear",
            "DequantizeLinear", "DynamicQuantizeLinear", "LSTM", "MatMul", "Cast")
    return {op: counts[op] for op in keep if counts.get(op)}
