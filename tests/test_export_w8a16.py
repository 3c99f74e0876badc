"""The w8a16-static variant (uint8 weights, uint16 activations: Qualcomm's recipe for the HTP) and the static
QDQ files written for the HTP: int8-static's LSTM as a plain ONNX LSTM with 8-bit weights (not the contrib
DynamicQuantizeLSTM), its exact GELU in tanh form. Tiny random-weight BERT and BiLSTM; the HTP compile tests
(eval/qnn.compile_htp) are skipped where onnxruntime-qnn is not installed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import make_texts
from test_export_onnx import compare, inputs, models, onnx_files, run_exporter, sqnr_db  # noqa: F401  (fixtures)

CALIB = [t for t, _ in make_texts(48, seed=1)]


def _types(path) -> tuple[set[int], set[int], bool, int]:
    """(zero-point types of QuantizeLinear, of weight DequantizeLinear, any per-channel axis, opset)."""
    import onnx

    m = onnx.load(str(path))
    inits = {t.name: t for t in m.graph.initializer}
    q = {inits[n.input[2]].data_type for n in m.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}
    w = {inits[n.input[2]].data_type for n in m.graph.node if n.op_type == "DequantizeLinear"
         and n.input[0] in inits and len(n.input) > 2 and n.input[2] in inits}
    axis = any(a.name == "axis" for n in m.graph.node if n.op_type == "DequantizeLinear" for a in n.attribute)
    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    return q, w, axis, opset


@pytest.mark.parametrize("kind", ["bert", "lstm"])
def test_exporter_w8a16_static(models, inputs, onnx_files, kind, tmp_path):
    import onnx

    out = tmp_path / "w8a16.onnx"
    d = run_exporter("w8a16-static", models[kind], out, onnx_files[kind], calibration=CALIB)
    assert d["activation_type"] == "uint16" and d["weight_type"] == "uint8" and d["calibration_texts"] == 48
    q, w, axis, opset = _types(out)
    assert q == {onnx.TensorProto.UINT16}  # every activation 16-bit
    assert onnx.TensorProto.UINT8 in w and not axis  # uint8 weights, one scale per tensor
    assert opset >= 21  # 16-bit Quantize/DequantizeLinear
    ops = d["quantized_ops"]
    if kind == "lstm":
        assert "DynamicQuantizeLSTM" not in ops and ops["LSTM"] == 2 and ops["lstm_8bit_weights"] == 4
    else:
        assert "Erf" in {n.op_type for n in onnx.load(str(out)).graph.node}  # exact GELU kept at 16 bits
    got, ref = compare(out, models[kind], inputs)
    assert sqnr_db(ref, got) > 20.0
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.95


def test_w8a16_is_more_exact_than_int8(models, inputs, onnx_files, tmp_path):
    """16-bit activations: the point of the variant; on the tiny BERT its logits sit closer to PyTorch's."""
    run_exporter("w8a16-static", models["bert"], tmp_path / "a16.onnx", onnx_files["bert"], calibration=CALIB)
    run_exporter("int8-static", models["bert"], tmp_path / "a8.onnx", onnx_files["bert"], calibration=CALIB)
    a16 = sqnr_db(*compare(tmp_path / "a16.onnx", models["bert"], inputs)[::-1])
    a8 = sqnr_db(*compare(tmp_path / "a8.onnx", models["bert"], inputs)[::-1])
    assert a16 > a8


def test_int8_static_writes_gelu_as_tanh(models, inputs, onnx_files, tmp_path):
    """The HTP refuses Erf beside uint8 activations: int8-static computes GELU's tanh form, one per layer."""
    import onnx

    from export.gelu_tanh import erf_gelu_to_tanh

    src = onnx.load(str(onnx_files["bert"]["fp32"]))
    n_erf = sum(n.op_type == "Erf" for n in src.graph.node)
    assert n_erf == 2  # the tiny BERT's two layers
    d = run_exporter("int8-static", models["bert"], tmp_path / "s.onnx", onnx_files["bert"], calibration=CALIB)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "s.onnx")).graph.node}
    assert d["quantized_ops"]["gelu_tanh"] == 2 and "Erf" not in ops and "Tanh" in ops
    # the rewrite alone (fp32): the same logits within the approximation's error
    assert erf_gelu_to_tanh(src) == 2
    onnx.save(src, str(tmp_path / "tanh.onnx"))
    got, ref = compare(tmp_path / "tanh.onnx", models["bert"], inputs)
    assert np.abs(got - ref).max() < 1e-2 and (got.argmax(-1) == ref.argmax(-1)).all()
    assert erf_gelu_to_tanh(onnx.load(str(tmp_path / "tanh.onnx"))) == 0  # nothing left to rewrite


def _htp():
    from eval.qnn import unavailable_reason

    why = unavailable_reason()
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("variant", ["int8-static", "w8a16-static"])
@pytest.mark.parametrize("kind", ["lstm", "bert"])
def test_static_files_compile_whole_for_the_htp(models, onnx_files, kind, variant, tmp_path):
    """Before: the LSTM's int8-static file kept 2 DynamicQuantizeLSTM (an ORT contrib op) and the BERT's 2
    float Erf for the CPU, and with CPU fallback disabled the compile failed. Now each file, fixed to
    [1, 16], compiles whole for the 8 Gen 3's HTP and agrees with the CPU provider on the emulator."""
    _htp()
    from eval.npu import fix_shapes
    from eval.qnn import compile_htp, emulate

    out = tmp_path / f"{variant}.onnx"
    run_exporter(variant, models[kind], out, onnx_files[kind], calibration=CALIB)
    fixed = fix_shapes(out, tmp_path / "fixed.onnx", 1, 16)
    rec = compile_htp(fixed, "8gen3", tmp_path / "ctx", variant)
    assert rec["compiled"], rec["message"]
    assert rec["unsupported"] == [] and rec["nodes_on_htp"] == rec["nodes_total"]
    tok = models[kind].tokenizer
    feeds = []
    for text in CALIB[:4]:
        ids = tok(text, truncation=True, max_length=16, padding="max_length", return_tensors="np")
        feeds.append({"input_ids": ids["input_ids"].astype(np.int64),
                      "attention_mask": ids["attention_mask"].astype(np.int64)})
    num = emulate(Path(rec["context"]), fixed, "8gen3", feeds)
    assert "error" not in num and num["argmax_agreement"] >= 0.75
