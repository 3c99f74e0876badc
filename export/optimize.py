"""fp32 ONNX -> ORT transformer-optimized ONNX: fused Attention and BiasGelu by default; the layer-norm
fusions (SkipLayerNormalization, EmbedLayerNormalization) are left out by quantize.skip_fusions because
ORT's CPU kernels for them are slower than the unfused ops (numbers in pipeline/config.py).

Only for transformer encoders: the fusions are pattern matches on BERT-shaped subgraphs, and an LSTM
graph has nothing for them to match. Neither do the encoders outside FUSED_TYPES (MPNet's relative position
bias, DeBERTa's disentangled attention, MobileBERT's bottlenecks): ORT has no patterns for them, so for such
a model (a teacher) nothing fused is the expected outcome, and its "optimized" file is skipped with the
reason (NothingFused, a VariantSkipped) while the other variants go on. For a type in FUSED_TYPES, nothing
fused means the graph is not the one the patterns expect, and the stage stops.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.errors import PipelineError, VariantSkipped

# Fused ops the optimizer should produce on a BERT graph; none of them found means the patterns did not
# match (e.g. a dynamo-exported graph) and the "optimized" file would just be a renamed fp32 file.
FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization",
             "Gelu", "FastGelu", "BiasGelu", "LayerNormalization")


# transformers model types whose exported graph ORT's BERT patterns fuse (Attention on every full layer;
# measured on tiny random-weight models of each with onnxruntime 1.32, legacy exporter)
FUSED_TYPES = ("bert", "distilbert", "roberta", "xlm-roberta", "camembert", "electra", "albert")


class NothingFused(VariantSkipped):
    """ORT's optimizer fused nothing in a model type it has no patterns for: no "optimized" file, recorded as
    skipped with this message, not an error."""


def op_counts(path: Path) -> dict[str, int]:
    import onnx

    return dict(Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node))


def fusion_options(model_type: str, skip: list[str] | tuple[str, ...]):
    from onnxruntime.transformers.fusion_options import FusionOptions

    # the fusions quantize.skip_fusions may name: ORT's FusionOptions flags enable_<name>
    known = sorted(k.removeprefix("enable_") for k in vars(FusionOptions("bert")) if k.startswith("enable_"))
    unknown = [s for s in skip if s not in known]
    if unknown:
        raise PipelineError(f"quantize.skip_fusions names {unknown}, which ORT's transformer optimizer does not "
                            f"have. Known fusions: {', '.join(known)}")
    opts = FusionOptions(model_type)
    for name in skip:
        setattr(opts, f"enable_{name}", False)
    return opts


def optimize_transformer(src: Path, out: Path, num_heads: int, hidden_size: int, model_name: str,
                         model_type: str = "bert", skip: list[str] | tuple[str, ...] = (),
                         source_type: str | None = None) -> dict[str, int]:
    """Write the fused graph to out, leaving out the fusions named in skip; returns the counts of fused
    ops. model_type is ORT's pattern set, source_type the transformers model type (default: the same).
    Nothing fused raises, NothingFused for a source type outside FUSED_TYPES, and leaves no file at out."""
    from onnxruntime.transformers.optimizer import optimize_model

    # opt_level 0: only the Python fusions, no ORT graph rewrites baked in for this machine's CPU, so
    # the same file serves the .ort converter and other providers.
    opt = optimize_model(str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size,
                         opt_level=0, use_gpu=False, optimization_options=fusion_options(model_type, skip))
    opt.save_model_to_file(str(out))
    counts = op_counts(out)
    fused = {op: counts[op] for op in FUSED_OPS if counts.get(op)}
    if not any(op in fused for op in ("Attention", "MultiHeadAttention", "SkipLayerNormalization")):
        out.unlink(missing_ok=True)  # the unfused copy is not an "optimized" file a later stage may take
        raise _nothing_fused(f"{model_name} -> onnx-optimized: ORT's transformer optimizer fused no attention or "
                             f"SkipLayerNormalization in {src.name}", source_type or model_type, counts)
    return fused


def optimized_file(src: Path, out: Path, num_heads: int, hidden_size: int, model_name: str,
                   model_type: str = "bert", skip: list[str] | tuple[str, ...] = (),
                   source_type: str | None = None) -> tuple[dict[str, int], dict]:
    """The "optimized" file as the exporter writes it: optimize_transformer's fusions, then the exact mask /
    reshape trim (export/web_graph.trim_bookkeeping; after the fusions, which find the attention mask by its
    pattern: what is left of that bookkeeping serves the [CLS]-only last layer alone). Returns (fused op
    counts, the trim's record); raises as optimize_transformer does, leaving no file at out."""
    import tempfile

    from export.web_graph import trim_bookkeeping

    with tempfile.TemporaryDirectory() as d:
        fused_file = Path(d) / "fused.onnx"
        fused = optimize_transformer(src, fused_file, num_heads, hidden_size, model_name, model_type, skip,
                                     source_type)
        return fused, trim_bookkeeping(fused_file, out)


def _nothing_fused(what: str, source_type: str, counts: dict[str, int]) -> PipelineError:
    if source_type not in FUSED_TYPES:  # expected: a skip, not an error
        return NothingFused(f"{what}: it has no fusion patterns for model type '{source_type}' (it fuses "
                            f"{', '.join(FUSED_TYPES)}); the other variants are made from fp32.onnx")
    return PipelineError(f"{what}, a '{source_type}' graph its patterns should match (ops: {sorted(counts)}); the "
                         f"exported graph is not the shape they expect. To go on without the fused file, leave "
                         f"'optimized' out of both quantize.variants and export.ort_variants")
