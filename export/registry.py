"""Exporters keyed by name: each turns one model (or one of its ONNX files) into one file of one format.

An exporter gets an ExportJob and writes job.out; it returns details worth recording (fused or quantized
op counts, the source file). Every key here must have a test named test_exporter_<key, - as _> in
tests/test_export_*.py (tests/test_export_registry.py fails otherwise).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pipeline.errors import PipelineError, lookup


@dataclass
class ExportJob:
    model_name: str
    loaded: object  # distill.models.LoadedModel: the PyTorch source
    out: Path  # the file (or .mlpackage folder) to write
    quantize: object  # pipeline.config.QuantizeSection
    export: object  # pipeline.config.ExportSection
    variant: str = ""  # which variant of a multi-variant exporter (ort: the ONNX variant; coreml: fp16 ...)
    sources: dict[str, Path] = field(default_factory=dict)  # ONNX variant -> file already written
    calibration_texts: Sequence[str] = ()
    cache: dict = field(default_factory=dict)  # per-model scratch shared across variants (Core ML base)


@dataclass(frozen=True)
class Exporter:
    fn: Callable[[ExportJob], dict]
    format: str  # onnx | ort | coreml
    lossless: bool  # checked by max abs diff (True) or argmax agreement (False)
    transformer_only: bool = False


EXPORTERS: dict[str, Exporter] = {}
# quantize.variants names -> exporter keys (the ONNX variants the quantize stage writes)
ONNX_VARIANTS = {"fp32": "onnx", "optimized": "onnx-optimized", "int8-dynamic": "int8-dynamic",
                 "int8-static": "int8-static", "w8a16-static": "w8a16-static", "fp16": "fp16"}


def exporter(name: str, fmt: str, lossless: bool, transformer_only: bool = False):
    def wrap(fn):
        EXPORTERS[name] = Exporter(fn, fmt, lossless, transformer_only)
        return fn
    return wrap


def get_exporter(name: str) -> Exporter:
    return lookup(EXPORTERS, name, f"exporter '{name}'", "Known exporters")


def for_variant(variant: str) -> Exporter:
    return EXPORTERS[lookup(ONNX_VARIANTS, variant, f"ONNX variant '{variant}' in quantize.variants")]


def load_source(folder: Path, model_name: str, fmt: str):
    """The PyTorch model to export; a missing or corrupt checkpoint is one error naming model and format."""
    from distill.models import load_model

    try:
        return load_model(folder, model_name)  # a bad file is already one PipelineError there
    except PipelineError as e:
        raise PipelineError(f"{model_name} -> {fmt}: {str(e).removeprefix(model_name + ': ')}") from None


def _source(job: ExportJob, *prefer: str) -> tuple[str, Path]:
    for v in prefer:
        if v in job.sources:
            return v, job.sources[v]
    raise PipelineError(f"{job.model_name}: {job.out.name} is made from the {' or '.join(prefer)} ONNX file, "
                        f"which was not written; keep 'fp32' first in quantize.variants")


@exporter("onnx", "onnx", lossless=True)
def _onnx(job: ExportJob) -> dict:
    from export.cls_only import cls_only_refusal, supports_cls_only
    from export.onnx_export import export_onnx

    cls_only = job.quantize.cls_only_last_layer and supports_cls_only(job.loaded.model)
    export_onnx(job.loaded.model, job.out, job.quantize.opset, job.model_name, job.loaded.pad_id, cls_only)
    details = {"source": "pytorch", "cls_only_last_layer": cls_only}
    # asked for, and a transformer it cannot apply to: say why (an RNN has no last layer to cut)
    if job.quantize.cls_only_last_layer and not cls_only and job.loaded.kind == "hf":
        details["cls_only_last_layer_not_applied"] = cls_only_refusal(job.loaded.model)
    return details


@exporter("onnx-optimized", "onnx", lossless=True, transformer_only=True)
def _onnx_optimized(job: ExportJob) -> dict:
    from export.optimize import optimized_file

    if job.loaded.kind != "hf":
        raise PipelineError(f"{job.model_name} -> onnx-optimized: ORT's transformer optimizer applies to "
                            f"transformer models only; leave 'optimized' out for this model")
    from onnxruntime.transformers.optimizer import MODEL_TYPES

    src_name, src = _source(job, "fp32")
    hf_cfg = job.loaded.model.hf.config
    # ORT's own name where it has one, the encoder patterns otherwise; the model's type decides whether
    # nothing fused is an error or a skip (export/optimize.py)
    ort_type = hf_cfg.model_type if hf_cfg.model_type in MODEL_TYPES else "bert"
    fused, trim = optimized_file(src, job.out, hf_cfg.num_attention_heads, hf_cfg.hidden_size, job.model_name,
                                 ort_type, job.quantize.skip_fusions, hf_cfg.model_type)
    return {"source": src_name, "fused_ops": fused, "graph_trim": trim}


@exporter("int8-dynamic", "onnx", lossless=False)
def _int8_dynamic(job: ExportJob) -> dict:
    from export.quantize import op_counts, quantize_int8_dynamic

    # the fused graph by default (QAttention; faster, export/quantize.py); the fp32 one for an LSTM, which
    # has no optimized file, or when quantize.dynamic_source says so
    src_name, src = _source(job, *dict.fromkeys([job.quantize.dynamic_source, "fp32"]))
    details: dict = {"source": src_name, "per_channel": job.quantize.per_channel}
    with tempfile.TemporaryDirectory() as tmp:
        recurrent = {"LSTM", "GRU"} & set(op_counts(src))
        if job.quantize.embedding_bits == 4 and recurrent:
            # the rewritten graph no longer lets quantize_dynamic take the LSTM (DynamicQuantizeLSTM), which
            # costs more than the table saves: RNNs keep the int8 word table
            details["embedding_4bit"] = f"not applied: {', '.join(sorted(recurrent))} model keeps an int8 table"
        elif job.quantize.embedding_bits == 4:  # the word table first, so quantize_dynamic leaves it alone
            from export.embed4 import embedding_to_4bit

            details["embedding_4bit"] = embedding_to_4bit(src, Path(tmp) / "embed4.onnx", job.model_name)
            src = Path(tmp) / "embed4.onnx"
        details["quantized_ops"] = quantize_int8_dynamic(src, job.out, job.model_name, job.quantize.per_channel)
    return details


@exporter("int8-static", "onnx", lossless=False)
def _int8_static(job: ExportJob) -> dict:
    from export.quantize import TextCalibration, quantize_int8_static

    q = job.quantize
    src_name, src = _source(job, "fp32")  # QDQ on the unfused graph: every MatMul gets its own Q/DQ pair
    texts = list(job.calibration_texts)[: q.calibration_samples]
    calib = TextCalibration(job.loaded.tokenizer, texts, job.loaded.max_length)
    ops = quantize_int8_static(src, job.out, calib, q.activation_type, q.per_channel, job.model_name,
                               q.static_float, q.reduce_range)
    return {"source": src_name, "quantized_ops": ops, "calibration_texts": len(texts),
            "activation_type": q.activation_type, "per_channel": q.per_channel, "float": list(q.static_float),
            "reduce_range": q.reduce_range}


@exporter("w8a16-static", "onnx", lossless=False)
def _w8a16_static(job: ExportJob) -> dict:
    """Static QDQ for Qualcomm's HTP: uint8 weights, uint16 activations (export/quantize.py)."""
    from export.quantize import TextCalibration, quantize_w8a16_static

    q = job.quantize
    src_name, src = _source(job, "fp32")
    texts = list(job.calibration_texts)[: q.calibration_samples]
    calib = TextCalibration(job.loaded.tokenizer, texts, job.loaded.max_length)
    ops = quantize_w8a16_static(src, job.out, calib, job.model_name, q.static_float)
    return {"source": src_name, "quantized_ops": ops, "calibration_texts": len(texts), "activation_type": "uint16",
            "weight_type": "uint8", "per_channel": False, "float": list(q.static_float)}


@exporter("fp16", "onnx", lossless=False)
def _fp16(job: ExportJob) -> dict:
    from export.quantize import convert_fp16

    src_name, src = _source(job, "optimized", "fp32")
    return {"source": src_name, "converted_ops": convert_fp16(src, job.out, job.model_name)}


@exporter("ort", "ort", lossless=True)
def _ort(job: ExportJob) -> dict:
    from export.ort_format import convert_to_ort

    src_name, src = _source(job, job.variant)
    convert_to_ort([(job.model_name, src, job.out)], job.export.ort_target_platform,
                   job.export.ort_disabled_optimizers)
    return {"source": src_name}


@exporter("ort-fastgelu", "ort", lossless=False)
def _ort_fastgelu(job: ExportJob) -> dict:
    """The browser variant <variant>-fastgelu.ort (export/web_model.py): the .ort conversion with GELU
    approximated by FastGelu. Written through a temporary file; a graph with no GELU to approximate (the
    result would be the plain .ort again) is refused."""
    from export.optimize import op_counts
    from export.web_model import FORM, GELU_APPROXIMATION, fast_gelu_file

    src_name, src = _source(job, job.variant)
    tmp = job.out.with_name(f".{job.out.name}.partial")
    with tempfile.TemporaryDirectory() as d:
        probe = Path(d) / "graph.onnx"  # the same graph as ONNX, to count what the approximation changed
        fast_gelu_file(src, probe, "onnx", job.export.ort_target_platform, job.export.ort_disabled_optimizers)
        ops = op_counts(probe)
    if not ops.get("FastGelu"):
        raise PipelineError(f"{job.model_name} -> ort-fastgelu: {src.name} has no GELU for ONNX Runtime to "
                            f"approximate (ops: {', '.join(sorted(ops))}); leave '{src_name}' out of "
                            f"export.fast_gelu_variants")
    try:
        job.out.parent.mkdir(parents=True, exist_ok=True)
        trim = fast_gelu_file(src, tmp, "ort", job.export.ort_target_platform, job.export.ort_disabled_optimizers)
        tmp.replace(job.out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"source": src_name, "gelu": FORM, "fast_gelu_ops": ops["FastGelu"],
            "session_config": dict(GELU_APPROXIMATION),
            "graph_trim": trim}  # export/web_graph.py: mask / token-type bookkeeping dropped, or why not


@exporter("coreml", "coreml", lossless=False)
def _coreml(job: ExportJob) -> dict:
    from export.coreml import compress, convert, spec_summary

    e = job.export
    if "base" not in job.cache:  # one conversion per model; the variants compress its weights
        job.cache["base"] = convert(job.loaded, job.model_name, e.coreml_target, e.coreml_shapes,
                                    list(e.coreml_lengths), tokenizer_name(job.loaded.tokenizer))
    base, note = job.cache["base"]
    ml = compress(base, job.variant, e.coreml_min_weight_elements)
    ml.save(str(job.out))
    return {"source": "pytorch (torch.jit.trace)", "sequence_shapes": note, "spec": spec_summary(job.out)}


def tokenizer_name(tok) -> str:
    """What an app needs to pick the matching tokenizer: class, vocabulary size, lower-casing."""
    lower = getattr(tok, "do_lower_case", None)
    if lower is None:
        lower = getattr(tok, "init_kwargs", {}).get("do_lower_case")
    return f"{type(tok).__name__} (vocab {len(tok)}, lower_case={lower})"
