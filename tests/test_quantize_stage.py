"""The quantize and export stages on the tiny config: every file written, checked, scored and sized;
a file outside its tolerance, a corrupt checkpoint and an unknown variant each fail with one clear error."""
from __future__ import annotations

import json
import platform
import re

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.manifest import read_manifest
from pipeline.stage import run, run_stage

pytestmark = pytest.mark.e2e

ONNX = {"teacher": ["fp32", "optimized", "int8-dynamic", "int8-static", "fp16"],
        "student": ["fp32", "optimized", "int8-dynamic", "int8-static", "fp16"],
        "lstm": ["fp32", "int8-dynamic", "int8-static", "fp16"],
        "lstm_distilled": ["fp32", "int8-dynamic", "int8-static", "fp16"]}


def cfg_with(d: dict, **sections):
    d = json.loads(json.dumps(d))
    for name, values in sections.items():
        d.setdefault(name, {}).update(values)
    return config_from_dict(d, "tiny-test-config")


def test_quantize_and_export_stages(tiny_cfg_dict):
    # weights of the tiny models are below coremltools' 2048-element default: compress them anyway
    cfg = cfg_with(tiny_cfg_dict, export={"coreml_min_weight_elements": 64}, quantize={"check_samples": 32})
    ran = run(cfg, ["export"])
    assert ran[-2:] == ["quantize", "export"]
    run_dir = cfg.run_dir
    rows = json.loads((run_dir / "quantize" / "variants.json").read_text())
    assert {(r["model"], r["variant"]) for r in rows} == {(m, v) for m, vs in ONNX.items() for v in vs}
    eval_rows = {r["model"]: r for r in json.loads((run_dir / "eval" / "accuracy.json").read_text())}
    for r in rows:
        path = run_dir / r["file"]
        assert r["file"] == f"quantize/{r['model']}/{r['variant']}.onnx" and r["format"] == "onnx"
        assert path.stat().st_size == r["size_bytes"] > 0 and r["opset"] == 17
        c = r["check"]
        assert c["passed"] and "test texts" in c["inputs"] and "batch 1" in c["inputs"]
        if r["variant"] in ("fp32", "optimized"):
            assert c["kind"] == "max_abs_diff" and c["value"] <= c["tolerance"] == 1e-4
            # lossless: the same predictions as PyTorch on the whole test split
            assert r["accuracy"] == pytest.approx(eval_rows[r["model"]]["accuracy"], abs=1e-9)
        else:
            assert c["kind"] == "argmax_agreement" and c["value"] >= c["tolerance"] == 0.9
        assert 0 <= r["accuracy"] <= 1 and 0 <= r["macro_f1"] <= 1 and r["params"] == eval_rows[r["model"]]["params"]
        assert r["non_embedding_params"] == eval_rows[r["model"]]["non_embedding_params"]
    by = {(r["model"], r["variant"]): r for r in rows}
    # weights, not file size: in a model this tiny the graph itself outweighs the weights
    weight_bytes = {v: _initializer_bytes(run_dir / by[("student", v)]["file"]) for v in ("fp32", "int8-dynamic")}
    assert weight_bytes["int8-dynamic"] < weight_bytes["fp32"] / 2
    assert by[("lstm", "int8-dynamic")]["details"]["quantized_ops"]["DynamicQuantizeLSTM"] == 2
    for m in ONNX:  # tokenizer, labels and max length travel with the ONNX files
        tok = run_dir / "quantize" / m / "tokenizer"
        assert (tok / "tokenizer.json").is_file() and json.loads((tok / "labels.json").read_text())
    acc = json.loads((run_dir / "quantize" / "accuracy.json").read_text())
    assert len(acc) == 4 + len(rows) and acc[:4] == list(eval_rows.values())
    assert all(set(a) == set(acc[0]) for a in acc)  # one row shape: eval's keys, variant and format included
    assert {a["format"] for a in acc} == {"pytorch", "onnx"}
    summary = read_manifest(run_dir / "quantize")["summary"]
    assert len(summary["rows"]) == len(rows) and summary["rows"][0]["check"]["passed"]

    out = json.loads((run_dir / "export" / "variants.json").read_text())
    ort = [r for r in out if r["format"] == "ort" and not r["variant"].endswith("-fastgelu")]
    # the student's browser file with GELU as FastGelu (export.fast_gelu_variants), checked on the test split
    fg = [r for r in out if r["variant"].endswith("-fastgelu")]
    assert [(r["model"], r["variant"], r["format"]) for r in fg] == [("student", "int8-dynamic-fastgelu", "ort")]
    assert fg[0]["check"]["kind"] == "argmax_agreement" and "gelu" in fg[0]["check"]
    # optimized: the transformers only (ORT's transformer optimizer has nothing to fuse in an LSTM)
    assert {(r["model"], r["variant"]) for r in ort} == {(m, v) for m, vs in ONNX.items() for v in vs
                                                         if v in ("fp32", "optimized", "int8-dynamic", "int8-static")}
    assert all(r["details"]["disabled_optimizers"] == ["SkipLayerNormFusion"] for r in ort)
    for r in ort:
        assert (run_dir / r["file"]).read_bytes()[4:8] == b"ORTM" and r["size_bytes"] > 0
        assert r["check"]["passed"]
        if r["variant"] in ("fp32", "optimized"):  # lossless: same logits as the .onnx, so its scores
            assert r["check"]["kind"] == "max_abs_diff" and r["check"]["value"] <= 1e-4
            assert r["accuracy"] == by[(r["model"], r["variant"])]["accuracy"] and r["accuracy_from"] == "onnx"
        else:  # int8: held to the argmax rule against its .onnx and scored on the test split itself
            assert r["check"]["kind"] == "argmax_agreement" and r["check"]["value"] >= 0.9
            assert 0 <= r["accuracy"] <= 1 and r["accuracy_from"] == "ort"
            assert abs(r["accuracy"] - by[(r["model"], r["variant"])]["accuracy"]) <= 0.1
    cm = [r for r in out if r["format"] == "coreml"]
    assert {(r["model"], r["variant"]) for r in cm} == {(m, v) for m in ("student", "lstm", "lstm_distilled")
                                                        for v in ("fp16", "int8", "palettized-4bit")}
    for r in cm:
        pkg = run_dir / r["file"]
        assert pkg.suffix == ".mlpackage" and r["size_bytes"] == sum(p.stat().st_size for p in pkg.rglob("*")
                                                                     if p.is_file())
        assert r["check"]["traced_wrapper"]["passed"] and r["deployment_target"] == "iOS17"
        assert "range 1..32" in r["sequence_shapes"]
        if platform.system() != "Darwin":
            assert r["check"]["skipped"] and "needs macOS" in r["check"]["reason"]
    assert run(cfg, ["export"]) == []  # nothing changed: nothing re-runs

    # a lossy file outside its tolerance is recorded as failed, naming the file and the numbers; the stage goes on
    strict = cfg_with(tiny_cfg_dict, quantize={"min_argmax_agreement": 1.01, "variants": ["fp32", "int8-dynamic"],
                                               "models": ["teacher"]}, bundle={"model": "teacher"},
                      export={"ort_variants": ["fp32", "int8-dynamic"]})
    run_stage(strict, "quantize")
    got = {r["variant"]: r for r in json.loads((run_dir / "quantize" / "variants.json").read_text())}
    assert got["fp32"]["status"] == "passed" and got["int8-dynamic"]["status"] == "failed"
    c = got["int8-dynamic"]["check"]
    assert c["passed"] is False and c["tolerance"] == 1.01 and 0 <= c["value"] <= 1
    assert re.match(r"teacher int8-dynamic \(quantize/teacher/int8-dynamic.onnx\): argmax agrees .* on only "
                    r"\d+\.\d% .*minimum is 101.0%", c["reason"])
    assert read_manifest(run_dir / "quantize")["summary"]["failed"] == [
        {"model": "teacher", "variant": "int8-dynamic", "reason": c["reason"]}]
    assert "FAILED (argmax_agreement" in (run_dir / "quantize" / "accuracy.md").read_text()
    assert not (run_dir / ".quantize.partial").exists()
    with pytest.raises(PipelineError, match="lacks 'fp32'"):
        run_stage(cfg_with(tiny_cfg_dict, quantize={"variants": ["int8-dynamic"]}), "quantize")
    with pytest.raises(PipelineError, match="unknown ONNX variant 'int4'"):
        run_stage(cfg_with(tiny_cfg_dict, quantize={"variants": ["fp32", "int4"]}), "quantize")
    with pytest.raises(PipelineError, match=r"'export.ort_variants' names \['fp16'\], which 'quantize.variants'"):
        run_stage(cfg_with(tiny_cfg_dict, export={"ort_variants": ["fp16"]},
                           quantize={"variants": ["fp32"]}), "export")
    with pytest.raises(PipelineError, match="Core ML export is for student, lstm, lstm_distilled"):
        run_stage(cfg_with(tiny_cfg_dict, export={"coreml_models": ["teacher"]}), "export")
    # misspelt fusion / optimizer names fail at the start of their stage, before any file is written
    with pytest.raises(PipelineError, match=r"quantize.skip_fusions names \['skiplayernorm'\]"):
        run_stage(cfg_with(tiny_cfg_dict, quantize={"skip_fusions": ["skiplayernorm"]}), "quantize")
    with pytest.raises(PipelineError, match=r"export.ort_disabled_optimizers names \['SkipLN'\].*silently ignore"):
        run_stage(cfg_with(tiny_cfg_dict, export={"ort_disabled_optimizers": ["SkipLN"]}), "export")
    assert not (run_dir / ".quantize.partial").exists() and not (run_dir / ".export.partial").exists()
    # a corrupt checkpoint: one error naming the model and the format
    (run_dir / "baseline" / "lstm" / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(PipelineError, match=r"lstm -> onnx: the checkpoint in .* is missing or corrupt"):
        run_stage(cfg_with(tiny_cfg_dict, quantize={"models": ["lstm"], "variants": ["fp32"]}, bundle={"model": "lstm"},
                           export={"ort_variants": ["fp32"]}), "quantize")


def _initializer_bytes(path) -> int:
    import onnx
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(path)).graph.initializer)
