"""fp32 ONNX -> ORT transformer-optimized ONNX: fused Attention and BiasGelu by default; the layer-norm
fusions (SkipLayerNormalization, EmbedLayerNormalization) are left out by quantize.skip_fusions because
ORT's CPU kernels for them are slower than the unfused ops (numbers in pipeline/config.py).

Only for transformer encoders: the fusions are pattern matches on BERT-shaped subgraphs, and an LSTM
graph has nothing for them to match.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.errors import PipelineError

# Fused ops the optimizer should produce on a BERT graph; none of them found means the patterns did not
# match (e.g. a dynamo-exported graph) and the "optimized" file would just be a renamed fp32 file.
FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization",
             "Gelu", "FastGelu", "BiasGelu", "LayerNormalization")


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
                         model_type: str = "bert", skip: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """Write the fused graph to out, leaving out the fusions named in skip; returns the counts of fused
    ops (raises if nothing fused)."""
    from onnxruntime.transformers.optimizer import optimize_model

    # opt_level 0: only the Python fusions, no ORT graph rewrites baked in for this machine's CPU, so
    # the same file serves the .ort converter and other providers.
    opt = optimize_model(str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size,
                         opt_level=0, use_gpu=False, optimization_options=fusion_options(model_type, skip))
    opt.save_model_to_file(str(out))
    counts = op_counts(out)
    fused = {op: counts[op] for op in FUSED_OPS if counts.get(op)}
    if not any(op in fused for op in ("Attention", "MultiHeadAttention", "SkipLayerNormalization")):
        raise PipelineError(f"{model_name} -> onnx-optimized: ORT's optimizer fused no attention or "
                            f"SkipLayerNormalization in {src.name} (ops: {sorted(counts)}); export with the "
                            f"legacy exporter (dynamo=False) or leave 'optimized' out of quantize.variants")
    return fused
