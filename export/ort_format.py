"""ONNX -> ORT mobile format (.ort): ONNX Runtime optimizes the graph for the target CPU and saves it.

This is what onnxruntime.tools.convert_onnx_models_to_ort does for its "Fixed" optimization style (a
session at ORT_ENABLE_ALL that saves in ORT format, NCHWc blocking left out for ARM, int8 QDQ kept for
ARM), done here in-process so that graph fusions can be switched off: the converter has no option for it.

Why switch one off: ORT's CPU SkipLayerNormalization kernel (the fusion of bias Add + residual Add +
LayerNormalization) is slower than the three ops it replaces. Measured on the development machine,
1 thread, [1, 64, 128] fp32: 41.6 us fused against 11.7 us unfused (hidden 384: 111.7 against 20.5); on
the demo student's int8 .ort at 64 tokens, 1 thread, it took p50 from 0.73 ms to 0.58 ms (figures from
python -m tools.fusion_probe). The .ort
file keeps the graph as converted (loading it does not re-fuse), so the choice travels with the file.

Each file is written to a temporary folder and moved into place, so a failed conversion leaves nothing.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from pipeline.errors import PipelineError

PLATFORMS = ("arm", "amd64")
# ORT graph-transformer names export.ort_disabled_optimizers may name. ORT ignores a name it does not
# know, so a misspelt one would silently change nothing: names are checked against this list.
KNOWN_OPTIMIZERS = ("SkipLayerNormFusion", "EmbedLayerNormFusion", "AttentionFusion", "LayerNormFusion",
                    "SimplifiedLayerNormFusion", "GeluFusion", "BiasGeluFusion", "FastGeluFusion",
                    "GeluApproximation", "QuickGeluFusion", "MatMulAddFusion", "MatMulScaleFusion",
                    "GemmActivationFusion", "MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion",
                    "BiasSoftmaxFusion", "ReshapeFusion", "ConstantFolding", "NchwcTransformer")


def check_optimizers(names: list[str] | tuple[str, ...], where: str = "export.ort_disabled_optimizers") -> None:
    unknown = [n for n in names if n not in KNOWN_OPTIMIZERS]
    if unknown:
        raise PipelineError(f"{where} names {unknown}, which pocketformer does not know as ONNX Runtime graph "
                            f"optimizers (ORT would silently ignore them). Known: {', '.join(KNOWN_OPTIMIZERS)}")


def optimize_graph(src: Path, out: Path, target_platform: str, disabled: list[str] | tuple[str, ...],
                   save_format: str = "ORT", extra_config: dict[str, str] | None = None) -> None:
    """Load src in ONNX Runtime with the converter's Fixed-style settings, leaving out the `disabled`
    optimizers, and save the optimized graph to out (save_format "ONNX" writes the same graph as ONNX,
    for inspection and tests); extra_config: more session config entries (export/web_model.py)."""
    from export.ort_session import ort_session

    # NCHWc blocking is x86-only and would tie an ARM file to the converting machine's CPU
    off = list(dict.fromkeys([*disabled, *(["NchwcTransformer"] if target_platform != "amd64" else [])]))
    # ORT_ENABLE_ALL (the default level); ARM CPUs have int8 x int8 kernels for QDQ nodes, x86 keeps the u8 path
    ort_session(src, quiet=False, disabled_optimizers=off, fix=None, save_to=out,
                config={"session.save_model_format": save_format,
                        "session.qdqisint8allowed": "1" if target_platform == "arm" else "0", **(extra_config or {})})


def convert_to_ort(jobs: list[tuple[str, Path, Path]], target_platform: str,
                   disabled: list[str] | tuple[str, ...]) -> None:
    """Convert each (model name, src .onnx, out .ort); target_platform "arm" for phones, "amd64" for x86;
    disabled: export.ort_disabled_optimizers."""
    if not jobs:
        return
    if target_platform not in PLATFORMS:
        raise PipelineError(f"{jobs[0][0]} -> ort: export.ort_target_platform = {target_platform!r}; "
                            f"choose one of {', '.join(PLATFORMS)}")
    check_optimizers(disabled)
    with tempfile.TemporaryDirectory() as tmp:
        staged = []
        for i, (model, src, out) in enumerate(jobs):
            tmp_out = Path(tmp) / f"{i:03d}.ort"
            try:
                optimize_graph(src, tmp_out, target_platform, disabled)
            except Exception as e:  # ORT raises its own exception types; the message names the problem
                msg = str(e)
                m = re.search(r"implementation for (\w+)\(", msg) or re.search(r"[Oo]p(?:erator)? ?type:? ?'?(\w+)", msg)
                op = f" (operator {m.group(1)})" if m else ""
                last = msg.strip().splitlines()[-1][:300] if msg.strip() else type(e).__name__
                raise PipelineError(f"{model} -> ort: converting {src.name} failed{op}: {last}; "
                                    f"leave '{src.stem}' out of export.ort_variants") from None
            if not tmp_out.is_file():
                raise PipelineError(f"{model} -> ort: ONNX Runtime wrote no .ort file for {src.name}; "
                                    f"leave '{src.stem}' out of export.ort_variants")
            staged.append((tmp_out, out))
        for tmp_out, out in staged:  # all converted: only now does anything land in the stage folder
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(tmp_out), out)
