"""The ONNX exporters on teacher types other than BERT (tiny random-weight MobileBERT, DeBERTa, MPNet and the
BERT-layer copies): the [CLS]-only last layer only where the layer really is BERT's, "optimized" skipped with
its reason where ORT has no fusions for the type, and int8-static on a graph ORT's symbolic shape inference
stops on (DeBERTa's relative positions). Every file is run through onnxruntime against the PyTorch model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SPECIAL, WORDS, make_texts, write_tokenizer
from pipeline.config import ExportSection, QuantizeSection
from pipeline.errors import PipelineError

LABELS = ["negative", "neutral", "positive"]
SMALL = dict(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=64, max_position_embeddings=128, pad_token_id=0, num_labels=3)


def _config(model_type: str):
    """A tiny config of the family with its own quirks (MobileBERT's bottlenecks, DeBERTa's relative
    attention), as /work/s6/J/make_teachers.py builds them."""
    import transformers as T

    extra = {
        "mobilebert": dict(embedding_size=16, true_hidden_size=16, intra_bottleneck_size=16,
                           num_feedforward_networks=2),
        "deberta": dict(relative_attention=True, max_relative_positions=-1, position_biased_input=False,
                        pos_att_type=["c2p", "p2c"], type_vocab_size=0),
        "electra": dict(embedding_size=16),
        "bert-relative": dict(position_embedding_type="relative_key"),
    }.get(model_type, {})
    return T.AutoConfig.for_model(model_type.removesuffix("-relative"), **SMALL, **extra)


@pytest.fixture(scope="module")
def folder_of(tmp_path_factory):
    """model type -> a loaded tiny classifier folder of that type (made on first use)."""
    from transformers import AutoModelForSequenceClassification

    from distill.models import HFLogits, load_model, save_model

    root = tmp_path_factory.mktemp("teacher_types")
    tok = write_tokenizer(root / "tok")
    made = {}

    def get(model_type: str):
        if model_type not in made:
            torch.manual_seed(0)
            cfg = _config(model_type)
            cfg.initializer_range = 0.3  # logits far enough apart that argmax means something
            hf = AutoModelForSequenceClassification.from_config(cfg)
            save_model(root / model_type, HFLogits(hf), tok, LABELS, "hf", 32)
            made[model_type] = load_model(root / model_type, "teacher")
        return made[model_type]

    return get


@pytest.fixture(scope="module")
def inputs(folder_of):
    from export.checks import check_inputs

    return check_inputs(folder_of("bert").tokenizer, [t for t, _ in make_texts(40, seed=5)], 32)


def run_exporter(key: str, model, out, sources=None, calibration=(), **q) -> dict:
    from export.registry import ExportJob, get_exporter

    job = ExportJob("teacher", model, out, QuantizeSection(**q), ExportSection(), sources=dict(sources or {}),
                    calibration_texts=list(calibration))
    return get_exporter(key).fn(job)


def compare(path, model, inputs) -> tuple[np.ndarray, np.ndarray]:
    from export.checks import ort_runner, torch_runner
    from export.ort_session import ort_session

    run, ref = ort_runner(ort_session(path)), torch_runner(model.model)
    return (np.concatenate([f(x, m) for x, m in inputs.batches]) for f in (run, ref))


@pytest.mark.parametrize("model_type", ["bert", "roberta", "xlm-roberta", "camembert", "electra"])
def test_cls_only_where_the_layer_is_berts(folder_of, inputs, model_type, tmp_path):
    """Every type on the list really computes BertLayer's function: the [CLS]-only graph keeps the logits."""
    from export.cls_only import BERT_LAYER_TYPES, supports_cls_only

    m = folder_of(model_type)
    assert model_type in BERT_LAYER_TYPES and supports_cls_only(m.model)
    details = run_exporter("onnx", m, tmp_path / "fp32.onnx")
    assert details["cls_only_last_layer"] is True and "cls_only_last_layer_not_applied" not in details
    got, ref = compare(tmp_path / "fp32.onnx", m, inputs)
    assert np.abs(got - ref).max() < 1e-4


@pytest.mark.parametrize("model_type, why", [
    ("mobilebert", "model type 'mobilebert' is not one whose layer is BERT's"),  # same names, bottleneck layer
    ("mpnet", "model type 'mpnet'"),
    ("deberta", "model type 'deberta'"),
    ("bert-relative", "position_embedding_type 'relative_key'"),  # BertLayer with a distance term
])
def test_cls_only_left_out_with_the_reason(folder_of, inputs, model_type, why, tmp_path):
    """MobileBERT has BERT's attention.self.query/... names but bottleneck projections: rewriting its last
    layer as BERT's was a shape error at export (2x32 and 16x16). It is exported whole, with the reason."""
    from export.cls_only import ClsOnlyLayer, supports_cls_only

    m = folder_of(model_type)
    assert not supports_cls_only(m.model)
    details = run_exporter("onnx", m, tmp_path / "fp32.onnx")  # quantize.cls_only_last_layer = true (default)
    assert details["cls_only_last_layer"] is False
    assert details["cls_only_last_layer_not_applied"].startswith(why)
    assert not any(isinstance(x, ClsOnlyLayer) for x in m.model.modules())
    got, ref = compare(tmp_path / "fp32.onnx", m, inputs)
    assert np.abs(got - ref).max() < 1e-4


@pytest.mark.parametrize("model_type", ["mobilebert", "mpnet", "deberta"])
def test_optimized_is_skipped_where_ort_has_no_fusions(folder_of, model_type, tmp_path):
    """No fusion for the type: a VariantSkipped naming the type (the stage records it and goes on), no
    file left behind, and no advice to use an exporter the project already uses."""
    from pipeline.errors import VariantSkipped

    m = folder_of(model_type)
    fp32 = tmp_path / "fp32.onnx"
    run_exporter("onnx", m, fp32)
    out = tmp_path / "optimized.onnx"
    with pytest.raises(VariantSkipped, match=rf"teacher -> onnx-optimized: ORT's transformer optimizer fused no "
                                             rf"attention .* no fusion patterns for model type '{model_type}'") as e:
        run_exporter("onnx-optimized", m, out, {"fp32": fp32})
    assert "dynamo" not in str(e.value)
    assert not out.exists()


def test_nothing_fused_in_a_bert_type_stops_with_advice_that_loads(folder_of, tmp_path, tiny_cfg_dict):
    """For a type ORT does fuse, an unfused graph is a real problem: a PipelineError (not a skip) whose advice
    is a config that loads (dropping 'optimized' from quantize.variants alone is refused at load)."""
    from export.optimize import optimize_transformer
    from pipeline.errors import VariantSkipped
    from pipeline.config import config_from_dict

    m = folder_of("deberta")
    run_exporter("onnx", m, tmp_path / "fp32.onnx")
    with pytest.raises(PipelineError, match="should match") as e:
        optimize_transformer(tmp_path / "fp32.onnx", tmp_path / "opt.onnx", 2, 32, "student", "bert", (), "bert")
    assert not isinstance(e.value, VariantSkipped) and not (tmp_path / "opt.onnx").exists()
    assert "dynamo" not in str(e.value)
    assert "quantize.variants and export.ort_variants" in str(e.value)
    tiny_cfg_dict.update(quantize={"variants": ["fp32", "int8-dynamic"]},
                         export={"ort_variants": ["fp32", "int8-dynamic"]})
    cfg = config_from_dict(tiny_cfg_dict, "advice")
    assert "optimized" not in cfg.quantize.variants


def test_int8_static_on_deberta(folder_of, inputs, tmp_path):
    """DeBERTa's relative-position If / Gather stop ORT's symbolic shape inference with a bare AssertionError;
    the file is made with ONNX shape inference instead, says so, and agrees with the PyTorch model."""
    m = folder_of("deberta")
    fp32 = tmp_path / "fp32.onnx"
    run_exporter("onnx", m, fp32)
    out = tmp_path / "int8-static.onnx"
    calibration = [t for t, _ in make_texts(48, seed=9)]
    details = run_exporter("int8-static", m, out, {"fp32": fp32}, calibration, calibration_samples=48)
    ops = details["quantized_ops"]
    assert ops["QuantizeLinear"] > 0 and ops["MatMul"] > 0
    assert ops["symbolic_shape_inference"].startswith("left out: it failed on this graph (AssertionError")
    got, ref = compare(out, m, inputs)
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_int8_static_not_made_when_pre_processing_fails_both_ways(folder_of, tmp_path, monkeypatch):
    """A graph ORT's pre-processing fails on with and without symbolic shapes: a VariantSkipped naming both
    failures, and no file."""
    from onnxruntime.quantization import shape_inference

    from pipeline.errors import VariantSkipped

    m = folder_of("deberta")
    fp32 = tmp_path / "fp32.onnx"
    run_exporter("onnx", m, fp32)
    real = shape_inference.quant_pre_process

    def onnx_shapes_fail_too(src, dst, skip_symbolic_shape=False, **kw):
        if skip_symbolic_shape:
            raise ValueError("no shapes here either")
        return real(src, dst, skip_symbolic_shape=skip_symbolic_shape, **kw)

    monkeypatch.setattr(shape_inference, "quant_pre_process", onnx_shapes_fail_too)
    out = tmp_path / "int8-static.onnx"
    with pytest.raises(VariantSkipped, match=r"teacher -> int8-static: ORT's quantization pre-processing failed on "
                                             r"fp32.onnx, with symbolic shape inference \(AssertionError\) and "
                                             r"without it \(ValueError: no shapes here either\)"):
        run_exporter("int8-static", m, out, {"fp32": fp32}, [t for t, _ in make_texts(16, seed=9)])
    assert not out.exists()


@pytest.fixture(scope="module")
def deberta_run(tmp_path_factory):
    """A tiny run, data to report, whose teacher is a random-weight DeBERTa: ORT fuses none of its graph, and
    its relative positions stop symbolic shape inference in int8-static."""
    from transformers import AutoModel

    from conftest import tiny_run_config, write_tiny_csv
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    root = tmp_path_factory.mktemp("deberta_run")
    torch.manual_seed(0)
    cfg = _config("deberta")
    AutoModel.from_config(cfg).save_pretrained(root / "deberta", safe_serialization=True)
    write_tokenizer(root / "deberta")
    d = tiny_run_config(root / "deberta", write_tiny_csv(root / "reviews.csv"), root / "runs")
    d.update(quantize={"models": ["teacher", "student"], "check_samples": 16,
                       "variants": ["fp32", "optimized", "int8-dynamic", "int8-static", "fp16"]},
             export={"ort_variants": ["fp32", "optimized", "int8-dynamic"], "coreml_models": [],
                     "fast_gelu_variants": []},
             npu={"chips": []}, bundle={"web": False},
             bench={"targets": ["host-cpu", "mobile-cpu"], "sweep_variants": ["optimized"], "seq_lengths": [16],
                    "headline_length": 16, "iterations": 2, "warmup": 1, "min_iterations": 1, "optimum_peer": False})
    config = config_from_dict(d, "tiny-deberta-config")
    assert run(config, ["report"])[-1] == "report"  # before this fix: the quantize stage stopped at optimized
    return config


@pytest.mark.e2e
def test_stages_go_on_without_the_teachers_optimized_file(deberta_run):
    """The teacher's optimized variant is recorded as skipped with the reason; its other variants are made
    from fp32.onnx and pass; the student still gets its fused file; export, bench and report go on without it."""
    import json

    run_dir = deberta_run.run_dir
    rows = {(r["model"], r["variant"]): r for r in json.loads((run_dir / "quantize" / "variants.json").read_text())}
    assert ("teacher", "optimized") not in rows and not (run_dir / "quantize" / "teacher" / "optimized.onnx").exists()
    assert rows[("student", "optimized")]["details"]["fused_ops"]["Attention"] == 1
    for v in ("int8-dynamic", "int8-static", "fp16"):
        assert rows[("teacher", v)]["status"] == "passed" and rows[("teacher", v)]["details"]["source"] == "fp32"
    assert "AssertionError" in rows[("teacher", "int8-static")]["details"]["quantized_ops"]["symbolic_shape_inference"]
    summary = json.loads((run_dir / "quantize" / "manifest.json").read_text())["summary"]
    skip = [s for s in summary["skipped"] if s["model"] == "teacher"]
    assert [s["variant"] for s in skip] == ["optimized"] and "model type 'deberta'" in skip[0]["reason"]
    assert summary["failed"] == []
    ort = {(r["model"], r["variant"]) for r in json.loads((run_dir / "export" / "variants.json").read_text())}
    assert ("student", "optimized") in ort and ("teacher", "fp32") in ort and ("teacher", "optimized") not in ort
    # bench and report run on what exists: the teacher's files without an optimized row, the student's fused one timed
    bench = json.loads((run_dir / "bench" / "latency.json").read_text())["rows"]
    assert not any((r["model"], r["variant"]) == ("teacher", "optimized") for r in bench)
    assert any(r["model"] == "teacher" and r["variant"] == "fp32" and r["format"] == "onnx"
               and r["latency"]["host-cpu"]["16"]["p50_ms"] > 0
               for r in bench)
    timed = next(r for r in bench if (r["model"], r["variant"], r["format"]) == ("student", "optimized", "onnx"))
    assert timed["latency"]["host-cpu"]["16"]["p50_ms"] > 0
    report = (run_dir / "report" / "report.md").read_text()
    assert "| student | optimized | onnx |" in report
    # the report says why the teacher has no optimized row; the LSTMs' transformer-only rule is not listed
    results = json.loads((run_dir / "report" / "results.json").read_text())
    assert [(s["model"], s["variant"]) for s in results["not_made"]] == [("teacher", "optimized")]
    assert "all targets: not made: teacher -> onnx-optimized" in report and "transformer-only" not in report
