"""int8-static keeps the parts named in quantize.static_float in float (attention MatMuls, LayerNorm, the
head), quantizes them when asked, and honours reduce_range; on the tiny models of the ONNX tests."""
from __future__ import annotations

import pytest

from conftest import make_texts
from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from test_export_onnx import compare, inputs, models, onnx_files, run_exporter, sqnr_db  # noqa: F401  (fixtures)


def _float_ops(path) -> dict[str, int]:
    """Per op type, how many MatMul / Gemm / LayerNormalization nodes read no DequantizeLinear output (float)."""
    import onnx

    g = onnx.load(str(path)).graph
    dq = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    out: dict[str, int] = {}
    for n in g.node:
        if n.op_type in ("MatMul", "Gemm", "LayerNormalization") and not any(i in dq for i in n.input):
            out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def test_static_float_parts_stay_float(models, inputs, onnx_files, tmp_path):
    calib = [t for t, _ in make_texts(48, seed=1)]
    everything = tmp_path / "all.onnx"
    d_all = run_exporter("int8-static", models["bert"], everything, onnx_files["bert"], calibration=calib,
                         static_float=[])
    assert _float_ops(everything) == {} and d_all["quantized_ops"]["float_nodes"] == 0
    kept = tmp_path / "kept.onnx"
    d = run_exporter("int8-static", models["bert"], kept, onnx_files["bert"], calibration=calib)
    assert d["float"] == ["attention-matmul", "layer-norm", "head"]
    fl = _float_ops(kept)
    # 2 layers x (scores, probabilities x V) MatMuls; every LayerNormalization (embeddings + 2 per layer);
    # the head: pooler and classifier (MatMul or Gemm, as the exporter wrote them)
    assert fl.get("LayerNormalization") == 1 + 2 * 2
    assert fl.get("MatMul", 0) + fl.get("Gemm", 0) == 2 * 2 + 2
    assert d["quantized_ops"]["float_nodes"] == 2 * 2 + 2
    # every weight MatMul of the encoder is still int8
    import onnx

    g = onnx.load(str(kept)).graph
    dq_weights = [n for n in g.node if n.op_type == "DequantizeLinear" and any(a.name == "axis" for a in n.attribute)]
    assert len(dq_weights) >= 2 * 6  # Q, K, V, output, FFN in, FFN out per layer
    for path in (everything, kept):
        got, ref = compare(path, models["bert"], inputs)
        assert sqnr_db(ref, got) > 15.0
    attn_only = tmp_path / "attn.onnx"
    run_exporter("int8-static", models["bert"], attn_only, onnx_files["bert"], calibration=calib,
                 static_float=["attention-matmul"])
    assert _float_ops(attn_only) == {"MatMul": 2 * 2}


def test_static_float_on_lstm_and_reduce_range(models, inputs, onnx_files, tmp_path):
    import onnx
    from onnx import numpy_helper

    calib = [t for t, _ in make_texts(48, seed=1)]
    out = tmp_path / "lstm.onnx"
    d = run_exporter("int8-static", models["lstm"], out, onnx_files["lstm"], calibration=calib)
    assert d["quantized_ops"]["LSTM"] == 2 and d["quantized_ops"]["lstm_8bit_weights"] == 4
    assert d["quantized_ops"]["float_nodes"] >= 2  # the MLP head after the pooling stays float
    got, ref = compare(out, models["lstm"], inputs)
    assert sqnr_db(ref, got) > 15.0
    # reduce_range: 7-bit weights, every int8 weight of the BERT's QDQ MatMuls lies in [-64, 64]
    out = tmp_path / "bert-7bit.onnx"
    d = run_exporter("int8-static", models["bert"], out, onnx_files["bert"], calibration=calib, reduce_range=True)
    g = onnx.load(str(out)).graph
    inits = {t.name: t for t in g.initializer}
    q_weights = [numpy_helper.to_array(inits[n.input[0]]) for n in g.node if n.op_type == "DequantizeLinear"
                 and n.input[0] in inits and inits[n.input[0]].data_type == onnx.TensorProto.INT8]
    assert d["reduce_range"] and len(q_weights) >= 2 * 6
    assert max(int(abs(w.astype(int)).max()) for w in q_weights) <= 64


def test_static_settings_are_checked_at_load():
    with pytest.raises(PipelineError, match=r"unknown int8-static float part 'softmax' in 'quantize.static_float'. Known: "
                                            r"attention-matmul, layer-norm, head"):
        config_from_dict({"quantize": {"static_float": ["softmax"]}})
    with pytest.raises(PipelineError, match="'quantize.calibration_samples' = 0 must be > 0"):
        config_from_dict({"quantize": {"calibration_samples": 0}})


def test_static_probe_compares_settings_on_a_run(models, tiny_cfg, tmp_path):
    import shutil

    from tools.static_probe import probe
    from pipeline.stage import run

    run(tiny_cfg, ["data"])
    shutil.copytree(models["bert"].folder, tiny_cfg.run_dir / "teacher" / "model")  # a finished teacher stage
    (tmp_path / "w").mkdir()
    rows = probe(tiny_cfg, "teacher", 30, [{"static_float": []}, {}], tmp_path / "w", log=lambda s: None)
    assert [r["setting"] for r in rows] == ["fp32 ONNX", '{"static_float": []}', "the config's own"]
    assert rows[0]["agreement"] == 1.0
    assert all(0 <= r["agreement"] <= 1 and 0 <= r["accuracy"] <= 1 for r in rows)
    assert not any((tiny_cfg.run_dir / "teacher").glob("*.onnx"))  # nothing written into the run


def test_static_probe_on_an_unfinished_run_names_the_stage(tmp_path):
    from pathlib import Path

    from tools import static_probe

    demo = ["--config", str(Path(__file__).parents[1] / "configs" / "demo.toml"), "--set", f'run.runs_dir="{tmp_path}"']
    with pytest.raises(PipelineError, match=r"teacher/model is missing: run `python -m pipeline teacher"):
        static_probe.main(demo)
    with pytest.raises(PipelineError, match=r"unknown key 'quantize.floats'"):
        static_probe.main(demo + ["--setting", '{"floats": []}'])
    # a setting's values go through the config's checks (they were tracebacks inside the quantizer)
    with pytest.raises(PipelineError, match=r"'quantize.calibration_samples' = 0 must be > 0"):
        static_probe.main(demo + ["--setting", '{"calibration_samples": 0}'])
    with pytest.raises(PipelineError, match=r"'quantize.activation_type' = 'int16'; choose one of uint8, int8"):
        static_probe.main(demo + ["--setting", '{"activation_type": "int16"}'])
