"""ORT mobile format and Core ML exporters on tiny random-weight models (Core ML numerics are checked
through the traced wrapper here; prediction itself needs macOS)."""
from __future__ import annotations

import json
import platform
from dataclasses import replace

import numpy as np
import pytest
import torch

from pipeline.config import ExportSection, QuantizeSection
from pipeline.errors import PipelineError
from test_export_onnx import inputs, logits, models  # noqa: F401  (module fixtures shared with the ONNX tests)


def job(model, out, variant="", sources=None, **e):
    from export.registry import ExportJob

    name = "student" if model.kind == "hf" else "lstm"
    return ExportJob(name, model, out, QuantizeSection(), ExportSection(**e), variant=variant,
                     sources=dict(sources or {}))


def test_exporter_ort(models, inputs, tmp_path):
    from export.checks import ort_runner
    from export.ort_format import convert_to_ort
    from export.ort_session import ort_session
    from export.registry import get_exporter

    m = models["bert"]
    src, dyn = tmp_path / "fp32.onnx", tmp_path / "int8-dynamic.onnx"
    get_exporter("onnx").fn(job(m, src))
    get_exporter("int8-dynamic").fn(job(m, dyn, sources={"fp32": src}))
    out = tmp_path / "student" / "int8-dynamic.ort"
    details = get_exporter("ort").fn(job(m, out, "int8-dynamic", {"fp32": src, "int8-dynamic": dyn}))
    assert details["source"] == "int8-dynamic"
    assert out.read_bytes()[4:8] == b"ORTM"  # the ORT flatbuffer file identifier
    got = logits(ort_runner(ort_session(out)), inputs)
    want = logits(ort_runner(ort_session(dyn)), inputs)
    assert np.abs(got - want).max() <= 1e-4
    assert not np.allclose(want, logits(ort_runner(ort_session(src)), inputs), atol=1e-6)  # really the int8 file
    with pytest.raises(PipelineError, match="fp16 ONNX file, which was not written"):
        get_exporter("ort").fn(job(m, tmp_path / "x.ort", "fp16", {"fp32": src}))
    convert_to_ort([], "arm", [])  # nothing to do: no converter run, no error


def test_exporter_ort_fastgelu(models, inputs, tmp_path):
    """The browser variant: the int8-dynamic student as .ort with GELU as FastGelu (export/web_model.py), the
    same platform / optimizer settings as the plain .ort; a graph with no GELU (the LSTM) is refused."""
    from export.checks import ort_runner
    from export.optimize import op_counts
    from export.ort_format import optimize_graph
    from export.ort_session import ort_session
    from export.registry import get_exporter

    m = models["bert"]
    src, dyn = tmp_path / "fp32.onnx", tmp_path / "int8-dynamic.onnx"
    get_exporter("onnx").fn(job(m, src))
    get_exporter("int8-dynamic").fn(job(m, dyn, sources={"fp32": src}))
    out = tmp_path / "student" / "int8-dynamic-fastgelu.ort"
    details = get_exporter("ort-fastgelu").fn(job(m, out, "int8-dynamic", {"int8-dynamic": dyn}))
    assert details["source"] == "int8-dynamic" and details["fast_gelu_ops"] == 2  # one per layer
    assert details["session_config"] == {"optimization.enable_gelu_approximation": "1"}
    # export/web_graph.py's trims, checked exact against the source graph
    trim = details["graph_trim"]
    assert trim["mask_expands_dropped"] == 1 and trim["constant_rows_folded"] == 1, trim
    assert trim["layer_norms_as_centered_rms"] == 5 and trim["max_relative_difference"] <= 1e-2
    assert out.read_bytes()[4:8] == b"ORTM" and not list(out.parent.glob(".*"))  # no temporary file left
    plain = tmp_path / "plain.onnx"  # the plain .ort's graph: erf GELU, SkipLayerNormFusion left out as there
    optimize_graph(dyn, plain, "arm", ExportSection().ort_disabled_optimizers, save_format="ONNX")
    assert op_counts(plain).get("BiasGelu", 0) + op_counts(plain).get("Gelu", 0) == 2
    assert "FastGelu" not in op_counts(plain) and "SkipLayerNormalization" not in op_counts(plain)
    got, want = logits(ort_runner(ort_session(out)), inputs), logits(ort_runner(ort_session(dyn)), inputs)
    assert not np.array_equal(got, want)  # the approximation changed the arithmetic ...
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.9  # ... not the labels
    # no GELU to approximate: refused, nothing written
    lstm_src = tmp_path / "lstm.onnx"
    get_exporter("onnx").fn(job(models["lstm"], lstm_src))
    bad = tmp_path / "lstm" / "fp32-fastgelu.ort"
    with pytest.raises(PipelineError, match=r"lstm -> ort-fastgelu: lstm.onnx has no GELU.*export.fast_gelu_variants"):
        get_exporter("ort-fastgelu").fn(job(models["lstm"], bad, "fp32", {"fp32": lstm_src}))
    assert not bad.exists()


def test_fastgelu_variants_are_browser_targets_only():
    from eval.plan import plan_point
    from eval.targets import BROWSER_VARIANTS, TARGETS
    from export.web_model import FAST_GELU_SOURCES, variant_name

    for v in FAST_GELU_SOURCES:  # every name export.fast_gelu_variants can make, the browser targets time
        assert variant_name(v) in BROWSER_VARIANTS
    row = {"model": "student", "variant": "int8-dynamic-fastgelu", "format": "ort"}
    assert plan_point(TARGETS["browser-wasm"], row, [16, 64], 64, ["int8-dynamic"], 128).lengths == [64]
    for t in ("mobile-cpu", "host-cpu", "edge-npu", "desktop-gpu"):
        assert "browser-only file" in plan_point(TARGETS[t], row, [64], 64, [], 128), t


def test_ort_conversion_failure_names_model_and_file(models, tmp_path):
    from export.ort_format import convert_to_ort

    bad = tmp_path / "int8-static.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(PipelineError, match=r"lstm -> ort: converting int8-static.onnx failed.*export.ort_variants"):
        convert_to_ort([("lstm", bad, tmp_path / "out" / "int8-static.ort")], "arm", [])
    assert not (tmp_path / "out").exists()  # nothing half-written
    with pytest.raises(PipelineError, match="ort_target_platform"):
        convert_to_ort([("lstm", bad, tmp_path / "x.ort")], "riscv", [])


def test_ort_conversion_leaves_out_the_disabled_fusions(models, inputs, tmp_path):
    from export.checks import ort_runner
    from export.optimize import op_counts
    from export.ort_format import convert_to_ort, optimize_graph
    from export.ort_session import ort_session
    from export.registry import get_exporter

    m = models["bert"]
    src, dyn = tmp_path / "fp32.onnx", tmp_path / "int8-dynamic.onnx"
    get_exporter("onnx").fn(job(m, src))
    get_exporter("int8-dynamic").fn(job(m, dyn, sources={"fp32": src}))
    # the graph the .ort file holds, written as ONNX to count its ops: ORT fuses SkipLayerNormalization
    # unless told not to (export.ort_disabled_optimizers, on by default)
    fused, unfused = tmp_path / "fused.onnx", tmp_path / "unfused.onnx"
    optimize_graph(dyn, fused, "arm", [], save_format="ONNX")
    optimize_graph(dyn, unfused, "arm", ["SkipLayerNormFusion"], save_format="ONNX")
    assert op_counts(fused).get("SkipLayerNormalization", 0) > 0
    assert op_counts(unfused).get("SkipLayerNormalization", 0) == 0 and op_counts(unfused).get("LayerNormalization")
    out = tmp_path / "int8-dynamic.ort"
    convert_to_ort([("student", dyn, out)], "arm", ExportSection().ort_disabled_optimizers)  # the default config
    got, want = logits(ort_runner(ort_session(out)), inputs), logits(ort_runner(ort_session(dyn)), inputs)
    assert np.abs(got - want).max() <= 1e-4
    with pytest.raises(PipelineError, match=r"names \['SkipLayerNormFusoin'\].*would silently ignore"):
        convert_to_ort([("student", dyn, tmp_path / "x.ort")], "arm", ["SkipLayerNormFusoin"])
    assert not (tmp_path / "x.ort").exists()


def test_known_optimizer_names_are_in_the_installed_onnxruntime():
    """ORT ignores names it does not know, so the list export.ort_disabled_optimizers is checked against
    must hold real transformer names: each is a string in ORT's compiled library."""
    from pathlib import Path

    import onnxruntime.capi as capi

    from export.ort_format import KNOWN_OPTIMIZERS

    lib = next(Path(capi.__file__).parent.glob("onnxruntime_pybind11_state*")).read_bytes()
    assert [n for n in KNOWN_OPTIMIZERS if n.encode() not in lib] == []
    assert b"NoSuchFusionXyz" not in lib


@pytest.mark.parametrize("kind", ["bert", "lstm"])
def test_exporter_coreml(models, inputs, kind, tmp_path):
    from export.checks import torch_runner
    from export.coreml import predict_check, spec_summary, traceable, verify_package
    from export.registry import get_exporter

    m = models[kind]
    # the traced module (finite mask fill; permutation instead of gather for the RNN) = the PyTorch model
    wrapped = logits(torch_runner(traceable(m)), inputs)
    assert np.abs(wrapped - logits(torch_runner(m.model), inputs)).max() < 1e-5
    j = job(m, tmp_path, coreml_min_weight_elements=64)
    compressed = {}
    for variant in ("fp16", "int8", "palettized-4bit"):
        j.out, j.variant = tmp_path / f"{variant}.mlpackage", variant
        details = get_exporter("coreml").fn(j)
        assert (j.out / "Manifest.json").is_file()
        assert "range 1..32" in details["sequence_shapes"]  # iOS17 (the default) cannot enumerate 2 inputs
        spec = verify_package(j.out, m, variant, j.model_name)
        assert spec["inputs"] == ["input_ids", "attention_mask"] and spec["outputs"] == ["logits"]
        assert {"labels", "max_length", "tokenizer"} <= set(spec["metadata_keys"])
        compressed[variant] = spec["compressed_weight_ops"]
    md = spec_summary(j.out)["metadata"]
    assert json.loads(md["labels"]) == ["negative", "neutral", "positive"] and md["max_length"] == "32"
    assert md["tokenizer"].startswith("BertTokenizerFast")
    assert compressed["fp16"] == 0 and compressed["int8"] > 0 and compressed["palettized-4bit"] > 0
    check = predict_check(j.out, torch_runner(m.model), m.tokenizer, ["good day"], 32, [16, 32], 0.9, "x")
    if platform.system() != "Darwin":
        assert check == {"kind": "argmax_agreement", "skipped": True,
                         "reason": f"Core ML prediction needs macOS (this is {platform.system()})"}
    else:
        assert check["passed"]


def test_coreml_compression_that_would_compress_nothing_is_refused_with_the_value_to_set(models, tmp_path):
    """A tiny model at the default threshold: refused before the package is written, naming the setting."""
    from export.coreml import largest_weight
    from export.registry import get_exporter

    j = job(models["lstm"], tmp_path / "int8.mlpackage", "int8")
    with pytest.raises(PipelineError) as e:
        get_exporter("coreml").fn(j)
    largest = largest_weight(j.cache["base"][0])
    assert 0 < largest <= 2048 and str(e.value) == (
        f"Core ML int8: the model's largest weight has {largest} elements, not more than "
        f"export.coreml_min_weight_elements = 2048, so no weight would be compressed; --set "
        f"export.coreml_min_weight_elements={largest - 1} or leave 'int8' out of export.coreml_variants")
    assert not j.out.exists()


def test_coreml_conversion_prints_no_progress_bars(models, tmp_path, capfd):
    """coremltools draws a bar per conversion and compression pass (about a dozen lines per file); the stage
    prints one line per file instead. Bars of the project's own long work still draw afterwards."""
    from tqdm import tqdm

    from export.registry import get_exporter

    j = job(models["lstm"], tmp_path / "int8.mlpackage", "int8", coreml_min_weight_elements=64)
    get_exporter("coreml").fn(j)
    err = capfd.readouterr().err
    assert j.out.is_dir() and "Running MIL" not in err and "Running compression pass" not in err
    for _ in tqdm(range(2), desc="own bar", disable=False):
        pass
    assert "own bar" in capfd.readouterr().err


def test_coreml_labels_with_commas_read_back_whole(models, tmp_path):
    """Topic labels often hold commas ("arts, culture"): the package stores the labels as a JSON list, so its
    read-back check and an app split them exactly as trained."""
    from export.coreml import spec_summary, verify_package
    from export.registry import get_exporter

    m = replace(models["lstm"], labels=["arts, culture", "sports", 'say "hi"'])
    j = job(m, tmp_path / "fp16.mlpackage", "fp16")
    get_exporter("coreml").fn(j)
    verify_package(j.out, m, "fp16", j.model_name)  # raises when the labels do not read back
    assert json.loads(spec_summary(j.out)["metadata"]["labels"]) == ["arts, culture", "sports", 'say "hi"']


def test_coreml_enumerated_shapes_on_ios18(models, tmp_path):
    import coremltools as ct

    from export.registry import get_exporter

    j = job(models["lstm"], tmp_path / "fp16.mlpackage", "fp16", coreml_target="iOS18", coreml_lengths=[8, 16])
    details = get_exporter("coreml").fn(j)
    assert details["sequence_shapes"].startswith("enumerated lengths [8, 16, 32]")
    spec = ct.utils.load_spec(str(j.out))
    shapes = spec.description.input[0].type.multiArrayType.enumeratedShapes.shapes
    assert sorted(list(s.shape) for s in shapes) == [[1, 8], [1, 16], [1, 32]]


def test_coreml_unexpressible_op(models, tmp_path):
    from export.registry import get_exporter

    exp = get_exporter("coreml")

    class Bucketize(torch.nn.Module):  # traces and exports to ONNX, but Core ML has no bucketize
        def forward(self, input_ids, attention_mask):
            edges = torch.tensor([5.0, 20.0])
            return torch.bucketize(input_ids.float(), edges).float()[:, :3]  # (B, 3)

    custom = replace(models["lstm"], model=Bucketize(), kind="custom")
    j = job(custom, tmp_path / "c.mlpackage", "fp16")
    j.model_name = "bucket"
    with pytest.raises(PipelineError, match=r"bucket -> coreml: operator bucketize cannot be expressed in Core ML"):
        exp.fn(j)
    assert not (tmp_path / "c.mlpackage").exists()


def test_kmeans_lut_is_a_4bit_palette_with_low_error():
    from export.coreml import kmeans_lut

    w = np.random.default_rng(0).normal(size=(64, 48)).astype(np.float16)
    lut, idx = kmeans_lut(w)
    assert lut.shape == (16,) and lut.dtype == np.float16 and idx.shape == (w.size,) and idx.max() < 16
    err = lut[idx].astype(np.float32) - w.ravel().astype(np.float32)
    sqnr = 10 * np.log10(np.mean(w.astype(np.float32) ** 2) / np.mean(err ** 2))
    assert sqnr > 18.5  # measured 19.3 dB here; 16 uniform levels over the same range give 17.6 dB
    flat = np.zeros((8, 8), np.float32)  # a constant tensor: one centre, every index valid
    lut, idx = kmeans_lut(flat)
    assert np.all(lut[idx] == 0)


def test_the_config_checks_coreml_targets_as_coremltools_knows_them():
    """export.coreml_target is checked at config load without importing coremltools: the named table must be
    coremltools' own mlprogram targets (iOS15 / macOS12 on) and their spec versions."""
    import coremltools as ct

    from export.coreml import COREML_TARGETS

    known = {name: int(t.value) for name, t in ct.target.__members__.items()
             if name.startswith(("iOS", "macOS")) and t >= ct.target.iOS15}
    assert COREML_TARGETS == known


def test_an_rnn_gets_no_cls_only_note(models, tmp_path):
    """The [CLS]-only last layer is about transformer layers: an RNN's fp32 row says nothing of it (a note that it
    is "not one whose layer is BERT's" would read as a defect)."""
    from export.registry import get_exporter

    details = get_exporter("onnx").fn(job(models["lstm"], tmp_path / "fp32.onnx", "fp32"))
    assert details == {"source": "pytorch", "cls_only_last_layer": False}
