"""ONNX exporters on tiny random-weight models: fp32 export, ORT transformer fusion, int8 dynamic / static
and fp16 variants, each run through onnxruntime and compared with the PyTorch model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_texts, tiny_bert_config, write_tokenizer
from export.optimize import op_counts
from pipeline.config import ExportSection, QuantizeSection
from pipeline.errors import PipelineError

LABELS = ["negative", "neutral", "positive"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny BERT classifier and a tiny BiLSTM classifier saved as model folders, then loaded."""
    from transformers import BertForSequenceClassification

    from distill.lstm import RNNClassifier, RNNConfig
    from distill.models import HFLogits, load_model, save_model

    root = tmp_path_factory.mktemp("export_models")
    tok = write_tokenizer(root / "tok")
    torch.manual_seed(0)
    bert = HFLogits(BertForSequenceClassification(tiny_bert_config(num_labels=3, initializer_range=0.3)))
    save_model(root / "bert", bert, tok, LABELS, "hf", 32)
    rnn = RNNClassifier(RNNConfig(vocab_size=len(tok), num_labels=3, embed_dim=16, hidden=16))
    save_model(root / "lstm", rnn, tok, LABELS, "rnn", 32)
    return {"bert": load_model(root / "bert", "student"), "lstm": load_model(root / "lstm", "lstm")}


@pytest.fixture(scope="module")
def inputs(models):
    from export.checks import check_inputs

    return check_inputs(models["bert"].tokenizer, [t for t, _ in make_texts(40, seed=5)], 32)


def logits(fn, inputs) -> np.ndarray:
    return np.concatenate([fn(x, m) for x, m in inputs.batches])  # (N, C)


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of got against ref, in dB (torchao's measure for lossy steps)."""
    return float(20 * np.log10(np.linalg.norm(ref) / max(np.linalg.norm(ref - got), 1e-12)))


def run_exporter(key: str, model, out, sources=None, variant="", calibration=(), **q):
    from export.registry import ExportJob, get_exporter

    job = ExportJob("student" if model.kind == "hf" else "lstm", model, out, QuantizeSection(**q), ExportSection(),
                    variant=variant, sources=dict(sources or {}), calibration_texts=list(calibration))
    return get_exporter(key).fn(job)


def compare(path, model, inputs):
    from export.checks import ort_runner, torch_runner
    from export.ort_session import ort_session

    return logits(ort_runner(ort_session(path)), inputs), logits(torch_runner(model.model), inputs)


@pytest.fixture(scope="module")
def onnx_files(models, tmp_path_factory):
    """fp32 (both models) and optimized (BERT) files that the derived variants start from."""
    out = tmp_path_factory.mktemp("onnx")
    files = {}
    for k, m in models.items():
        run_exporter("onnx", m, out / f"{k}-fp32.onnx")
        files[k] = {"fp32": out / f"{k}-fp32.onnx"}
    files["optimized-details"] = run_exporter("onnx-optimized", models["bert"], out / "bert-optimized.onnx",
                                              files["bert"])
    files["bert"]["optimized"] = out / "bert-optimized.onnx"
    return files


@pytest.mark.parametrize("kind", ["bert", "lstm"])
def test_exporter_onnx(models, inputs, onnx_files, kind):
    import onnx

    path = onnx_files[kind]["fp32"]
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in graph.output] == ["logits"]
    dims = [d.dim_param for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "sequence"]  # dynamic axes, not the example's 2 x 8
    assert onnx.load(str(path)).opset_import[0].version == 17
    if kind == "lstm":
        assert sum(n.op_type == "LSTM" for n in graph.node) == 2  # one native LSTM op per direction
    got, ref = compare(path, models[kind], inputs)
    assert np.abs(got - ref).max() < 1e-4  # padded batches and batch 1 alike
    assert got.shape == (len(ref), 3)


def test_exporter_onnx_optimized(models, inputs, onnx_files):
    from export.optimize import op_counts

    counts = op_counts(onnx_files["bert"]["optimized"])
    # 2 layers: the first fused; the last computes [CLS] only (quantize.cls_only_last_layer) in plain ops
    assert counts.get("Attention") == 1
    assert counts.get("Softmax") == 1  # attention really fused, only the [CLS] layer's softmax left
    # the default quantize.skip_fusions: layer norms stay LayerNormalization (faster on ORT's CPU kernels)
    assert "SkipLayerNormalization" not in counts and "EmbedLayerNormalization" not in counts
    assert counts.get("LayerNormalization") == 5  # embeddings + 2 per layer
    got, ref = compare(onnx_files["bert"]["optimized"], models["bert"], inputs)
    assert np.abs(got - ref).max() < 1e-4
    # after the fusions, the mask and shape bookkeeping only the [CLS]-only layer read is trimmed (exact)
    trim = onnx_files["optimized-details"]["graph_trim"]
    assert trim["mask_expands_dropped"] == 1 and trim["reshape_shapes_constant"] == 4, trim  # K, V, Q, context
    assert trim["nodes_after"] < trim["nodes_before"] and trim["max_relative_difference"] <= 1e-5
    assert "Expand" not in counts and "Concat" not in counts
    # the token-type row stays a Gather of its table, which int8-dynamic then rounds as it always did
    assert "constant_rows_folded" not in trim and counts.get("ConstantOfShape") == 1
    every = onnx_files["bert"]["fp32"].with_name("every-fusion.onnx")
    details = run_exporter("onnx-optimized", models["bert"], every, onnx_files["bert"], skip_fusions=[])
    assert details["fused_ops"]["SkipLayerNormalization"] == 4 and details["fused_ops"]["EmbedLayerNormalization"] == 1
    # EmbedLayerNormalization reads the ids (cast to int32) itself: the trim's check still draws ids in its vocabulary
    assert details["graph_trim"]["mask_expands_dropped"] == 1, details["graph_trim"]
    with pytest.raises(PipelineError, match=r"quantize.skip_fusions names \['skip_layernorm'\].*Known fusions:.*skip_layer_norm"):
        run_exporter("onnx-optimized", models["bert"], every, onnx_files["bert"], skip_fusions=["skip_layernorm"])
    with pytest.raises(PipelineError, match="transformer models only"):
        run_exporter("onnx-optimized", models["lstm"], onnx_files["lstm"]["fp32"].with_name("x.onnx"),
                     onnx_files["lstm"])


def test_every_layer_fused_leaves_the_optimized_file_nothing_to_trim(models, inputs, tmp_path):
    """quantize.cls_only_last_layer = false: every layer's attention is fused and reads attention_mask itself, so
    no mask or reshape bookkeeping is left; the record says so and the file still gives the model's logits."""
    m = models["bert"]
    run_exporter("onnx", m, tmp_path / "fp32.onnx", cls_only_last_layer=False)
    details = run_exporter("onnx-optimized", m, tmp_path / "opt.onnx", {"fp32": tmp_path / "fp32.onnx"},
                           cls_only_last_layer=False)
    assert details["graph_trim"] == {"skipped": "nothing to trim (no expanded attention mask, no reshape by a "
                                                "computed shape)"}
    assert details["fused_ops"]["Attention"] == 2
    got, ref = compare(tmp_path / "opt.onnx", m, inputs)
    assert np.abs(got - ref).max() < 1e-4


def test_trim_bookkeeping_copies_a_graph_with_nothing_to_trim(onnx_files, tmp_path):
    """The LSTM's graph has no attention mask or computed reshape: the file is copied byte for byte, and
    the record says why."""
    from export.web_graph import trim_bookkeeping

    src, out = onnx_files["lstm"]["fp32"], tmp_path / "out.onnx"
    assert trim_bookkeeping(src, out) == {"skipped": "nothing to trim (no expanded attention mask, no reshape by "
                                          "a computed shape)"}
    assert out.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("kind", ["bert", "lstm"])
def test_exporter_int8_dynamic(models, inputs, onnx_files, kind, tmp_path):
    import onnx

    out = tmp_path / "int8.onnx"
    details = run_exporter("int8-dynamic", models[kind], out, onnx_files[kind])
    ops = details["quantized_ops"]
    if kind == "lstm":
        assert details["source"] == "fp32"  # an RNN has no optimized file
        assert ops.get("DynamicQuantizeLSTM") == 2 and "LSTM" not in ops  # the LSTM itself is int8
    else:
        assert details["source"] == "optimized"  # quantize.dynamic_source: the fused graph
        counts = op_counts(out)
        # every fused attention became QAttention (int8 Q/K/V weights), every weight MatMul MatMulInteger;
        # the [CLS]-only last layer keeps its 2 activation x activation products (scores, context) float
        assert ops.get("QAttention") == 1 and "Attention" not in counts
        fused = op_counts(onnx_files[kind]["optimized"])
        assert ops.get("MatMulInteger") == fused["MatMul"] - 2 + fused.get("Gemm", 0) >= 4  # + pooler, classifier
        assert "Gemm" not in counts and counts.get("MatMul") == 2
        plain = tmp_path / "int8-from-fp32.onnx"
        details = run_exporter("int8-dynamic", models[kind], plain, onnx_files[kind], dynamic_source="fp32")
        ops = details["quantized_ops"]
        assert details["source"] == "fp32" and "QAttention" not in ops
        # only the 2 activation x activation products per layer (scores, context) stay float
        assert ops.get("MatMul") == 2 * 2
        # every weight MatMul became int8 (the quantizer also takes the pooler and classifier Gemms)
        assert ops.get("MatMulInteger") >= op_counts(onnx_files[kind]["fp32"])["MatMul"] - 4 >= 12
    # the embedding tables (Gather data, or QEmbedLayerNormalization's uint8 tables) are 8-bit, not fp32
    model = onnx.load(str(out))
    biggest = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    assert biggest.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8), biggest.name
    got, ref = compare(out, models[kind], inputs)
    # 12 dB: x86 CPUs without VNNI / AMX sum u8 x s8 products in 16-bit pairs (saturating), which cost this
    # tiny random BERT's QAttention graph ~1 dB (14.4 dB on an AVX2 EPYC, above 15 with VNNI)
    assert sqnr_db(ref, got) > 12.0
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


@pytest.mark.parametrize("kind", ["bert", "lstm"])
def test_exporter_int8_static(models, inputs, onnx_files, kind, tmp_path):
    import onnx

    out = tmp_path / "qdq.onnx"
    calib = [t for t, _ in make_texts(48, seed=1)]
    details = run_exporter("int8-static", models[kind], out, onnx_files[kind], calibration=calib)
    assert details["calibration_texts"] == 48 and details["activation_type"] == "uint8"
    model = onnx.load(str(out))
    q_nodes = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert q_nodes
    zero_points = {t.name: t for t in model.graph.initializer}
    act_types = {zero_points[n.input[2]].data_type for n in q_nodes if len(n.input) > 2 and n.input[2] in zero_points}
    assert act_types == {onnx.TensorProto.UINT8}  # activations uint8, as configured
    per_channel = [n for n in model.graph.node if n.op_type == "DequantizeLinear"
                   and any(a.name == "axis" for a in n.attribute)]
    # weight DequantizeLinear nodes carry an axis: per-channel scales (the LSTM's only weight MatMuls are its
    # head, which quantize.static_float keeps in float; tests/test_static_quant.py covers that)
    assert per_channel or kind == "lstm"
    if kind == "lstm":
        # a plain ONNX LSTM (the HTP takes it) with 8-bit W and R behind DequantizeLinear, not the contrib
        # DynamicQuantizeLSTM that no NPU provider takes
        ops = details["quantized_ops"]
        assert "DynamicQuantizeLSTM" not in ops and ops.get("LSTM") == 2 and ops.get("lstm_8bit_weights") == 4
    got, ref = compare(out, models[kind], inputs)
    assert sqnr_db(ref, got) > 15.0
    # the other activation type is honoured too
    run_exporter("int8-static", models[kind], tmp_path / "s8.onnx", onnx_files[kind], calibration=calib,
                 activation_type="int8")
    s8 = onnx.load(str(tmp_path / "s8.onnx"))
    inits = {t.name: t.data_type for t in s8.graph.initializer}
    assert onnx.TensorProto.INT8 in {inits.get(n.input[2]) for n in s8.graph.node
                                     if n.op_type == "QuantizeLinear" and len(n.input) > 2}


@pytest.mark.parametrize("kind", ["bert", "lstm"])
def test_exporter_fp16(models, inputs, onnx_files, kind, tmp_path):
    import onnx

    out = tmp_path / "fp16.onnx"
    details = run_exporter("fp16", models[kind], out, onnx_files[kind])
    model = onnx.load(str(out))
    floats = [t for t in model.graph.initializer if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)]
    assert details["converted_ops"]["fp16_initializers"] >= 0.9 * len(floats)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64  # io types kept
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    got, ref = compare(out, models[kind], inputs)
    assert sqnr_db(ref, got) > 40.0
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_onnx_errors_name_model_format_and_op(models, tmp_path):
    class FFTHead(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return torch.fft.fft(input_ids.float()).real[:, :3]  # (B, 3)

    from export.onnx_export import export_onnx

    with pytest.raises(PipelineError, match=r"custom -> onnx \(opset 17\): operator aten::fft_fft"):
        export_onnx(FFTHead(), tmp_path / "fft.onnx", 17, "custom")
    from pipeline.config import load_config

    with pytest.raises(PipelineError, match=r"quantize.opset = 9 .*set quantize.opset = 17"):
        load_config(None, ["quantize.opset=9"])  # refused when the config loads, before any export
    for bad in (13, 18):  # 13: no scaled_dot_product_attention; 18: the LSTM's int8-static pre-processing fails
        with pytest.raises(PipelineError, match=rf"quantize.opset = {bad} is outside 14\.\.17"):
            load_config(None, [f"quantize.opset={bad}"])
    assert not (tmp_path / "low.onnx").exists()
    with pytest.raises(PipelineError, match="fp32 ONNX file, which was not written"):
        run_exporter("int8-static", models["lstm"], tmp_path / "q.onnx", {})


def test_corrupt_checkpoint_is_one_clear_error(models, tmp_path):
    import shutil

    from export.registry import load_source

    for kind, name in (("lstm", "lstm"), ("bert", "student")):
        folder = tmp_path / kind
        shutil.copytree(models[kind].folder, folder)
        (folder / "model.safetensors").write_bytes(b"not a safetensors file")
        with pytest.raises(PipelineError, match=f"{name} -> onnx: the checkpoint .* is missing or corrupt"):
            load_source(folder, name, "onnx")
    with pytest.raises(PipelineError, match=r"lstm -> coreml: .* not a trained model folder"):
        load_source(tmp_path / "nothing", "lstm", "coreml")


def test_lstm_int8_dynamic_keeps_its_int8_lstm_under_4bit_embeddings(models, onnx_files, tmp_path):
    """quantize.embedding_bits = 4 applies to transformer tables; an RNN keeps DynamicQuantizeLSTM (the 4-bit
    rewrite would leave its LSTM in fp32) and says why in its details."""
    out = tmp_path / "lstm-int8.onnx"
    details = run_exporter("int8-dynamic", models["lstm"], out, onnx_files["lstm"], embedding_bits=4)
    assert details["embedding_4bit"].startswith("not applied: LSTM")
    assert details["quantized_ops"].get("DynamicQuantizeLSTM") == 2 and "LSTM" not in details["quantized_ops"]


def test_cls_only_last_layer_keeps_the_logits_and_drops_the_work(models, inputs, tmp_path):
    """quantize.cls_only_last_layer: the exported graph gives the full model's logits on padded batches,
    the model itself is left untouched, and the last layer's feed-forward runs on one position, not T."""
    from export.cls_only import ClsOnlyLayer, supports_cls_only

    m = models["bert"]
    assert supports_cls_only(m.model) and not supports_cls_only(models["lstm"].model)
    on, off = tmp_path / "cls.onnx", tmp_path / "full.onnx"
    assert run_exporter("onnx", m, on)["cls_only_last_layer"] is True
    assert run_exporter("onnx", m, off, cls_only_last_layer=False)["cls_only_last_layer"] is False
    assert not any(isinstance(x, ClsOnlyLayer) for x in m.model.modules())  # the swap was undone
    a, ref = compare(on, m, inputs)
    b, _ = compare(off, m, inputs)
    assert np.abs(a - ref).max() < 1e-4 and np.abs(b - ref).max() < 1e-4
    # the saving is real and the FLOP formula knows it: MatMul / Gemm FLOPs counted in each graph at 64
    # tokens (shape inference on the file) against eval/flops.py with and without cls_only
    from eval.flops import folder_flops, graph_flops

    g_on, g_off = graph_flops(on, 64), graph_flops(off, 64)
    assert g_on < 0.8 * g_off  # 2 layers: the second does ~1/5 of its work
    f_on, f_off = folder_flops(m.folder, 64, cls_only=True), folder_flops(m.folder, 64)
    assert abs((g_off - g_on) - (f_off - f_on)) < 0.02 * f_off  # the formula drops what the graph drops


def test_extensions_library_is_the_packages_own_without_importing_it():
    """The custom-op library is found beside the package without running its __init__ (which imports
    transformers and torch): the same file the package names, in a process that then has no transformers."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from export.ort_session import extensions_library as f; p = f(); "
            "print(p); print('transformers' in sys.modules, 'onnxruntime_extensions' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split("\n")
    from onnxruntime_extensions import get_library_path

    assert out[0] == get_library_path() and out[1] == "False False"
