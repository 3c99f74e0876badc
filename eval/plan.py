"""Which (row, target, length) combinations the benchmark measures, and the reason for each it skips.

Every row gets an entry for every configured target: measured lengths, or a skip with its reason, so
nothing is silently dropped. The rules keep the demo within its time budget while keeping what the
report needs: every variant at the headline length, the length sweep (16..256) for the variants whose
scaling matters (fp32 and dynamic int8 by default), batch throughput (batch 32 at the headline length) on the
host and on mobile-cpu (the .ort files, 1 thread) for those variants and the Optimum peer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from eval.targets import Target


# the targets timed at bench.throughput_batch too (the batch-32 workload): a server (host-cpu) and a phone
# batching texts on one core (mobile-cpu, the .ort files); the other targets answer one text at a time
THROUGHPUT_TARGETS = ("host-cpu", "mobile-cpu", "desktop-gpu")  # a GPU earns its keep on batches


@dataclass
class Point:
    """What to measure for one row on one target."""

    lengths: list[int] = field(default_factory=list)
    throughput: bool = False
    skipped_lengths: dict[str, str] = field(default_factory=dict)  # "256" -> reason


# (target, format) -> why the target does not run that format; the others get a generic reason
FORMAT_SKIPS = {
    ("mobile-cpu", "onnx"): "mobile-cpu runs the .ort file of this variant (the phone build of the same model, see "
                            "its ort row)",
    ("mobile-cpu", "pytorch"): "phones run the exported files, not PyTorch eager",
    ("mobile-cpu", "coreml"): "Core ML packages run under Core ML only: see edge-npu",
    ("host-cpu", "ort"): "host-cpu runs the .onnx file of this variant (the same model); the .ort file is measured "
                         "on mobile-cpu",
    ("host-cpu", "coreml"): "Core ML packages run under Core ML only (macOS/iOS): see edge-npu",
    ("edge-npu", "pytorch"): "NPUs run exported files, not PyTorch eager",
    ("edge-npu", "ort"): "edge-npu takes the static-QDQ .onnx (shapes fixed per length) and the Core ML package",
    ("desktop-gpu", "ort"): "the .ort format is for mobile builds of ONNX Runtime",
    ("desktop-gpu", "coreml"): "Core ML does not run on CUDA GPUs",
}


def _variant_skip(t: Target, variant: str) -> str:
    if variant == "fp16" and t.name.startswith("browser-"):
        return "fp16 ONNX has no WASM kernels in onnxruntime-web (it is the GPU/NPU variant)"
    if variant == "fp16" and t.name in ("host-cpu", "mobile-cpu"):
        return "fp16 ONNX has no fast CPU kernels in ONNX Runtime (it runs through casts); it is the GPU/NPU variant"
    if variant.endswith("-fastgelu"):
        return ("a browser-only file: GELU approximated for onnxruntime-web's WASM build, where erf GELU is slow "
                "(export/web_model.py); the browser targets time it")
    if t.name == "edge-npu":
        return ("edge-npu runs the static-QDQ int8 model (NPU providers need static quantization) and the "
                "Core ML packages")
    if t.name == "desktop-gpu":
        return "int8 ONNX kernels are CPU kernels; the GPU runs fp32 and fp16"
    return f"{t.name} does not run the {variant} variant"


def plan_point(t: Target, row: dict, lengths: list[int], headline: int, sweep_variants: list[str],
               max_positions: int | None, throughput_targets: tuple[str, ...] = THROUGHPUT_TARGETS) -> Point | str:
    """The lengths to measure for row on target t, or the reason the whole combination is skipped."""
    fmt, variant = row["format"], row["variant"]
    if fmt == "onnx-npu":  # static per-length NPU files: edge-npu only, at the lengths they were made for
        if t.name != "edge-npu":
            return (f"a static-shape NPU file (export/npu.py) for the {row.get('provider')} provider; "
                    f"edge-npu takes it")
        made = [n for n in lengths if n in row.get("lengths", [])]
        return Point(lengths=made) if made else f"no NPU file at the bench lengths {lengths}"
    if variant.endswith("-fastgelu") and variant not in t.variants:  # before the format: why is the variant
        return _variant_skip(t, variant)
    if fmt not in t.formats:
        return FORMAT_SKIPS.get((t.name, fmt), f"{t.name} does not run {fmt} files")
    if t.name == "mobile-cpu" and fmt == "onnx" and not variant.startswith("optimum-"):
        return FORMAT_SKIPS[(t.name, fmt)]  # only the peer, which has no .ort of ours, runs as .onnx there
    if t.name == "edge-npu" and fmt == "onnx" and variant != "int8-static":
        return _variant_skip(t, variant)
    if "*" not in t.variants and variant not in t.variants:
        return _variant_skip(t, variant)
    if "*" in t.variants and variant == "fp16":
        return _variant_skip(t, variant)
    # PyTorch eager is the reference at the headline length; the sweep uses the files that ship
    # and the target's own precision is swept too: fp16 is what a GPU runs (desktop-gpu)
    sweep = (variant in sweep_variants or variant == t.precision) and fmt != "pytorch"
    # in the browser the teacher is the reference, never a file a page ships: its fp32 files are swept, its
    # other variants timed at the headline only (docs/benchmark.md: the seconds this saves the demo's bench)
    teacher_ref = t.name.startswith("browser-") and row["model"] == "teacher" and variant != "fp32"
    sweep = sweep and not teacher_ref
    p = Point()
    for n in lengths:
        if max_positions is not None and n > max_positions:
            p.skipped_lengths[str(n)] = f"longer than the model's position table ({max_positions} tokens)"
        elif sweep or n == headline:
            p.lengths.append(n)
        else:
            why = ("the Optimum peer is compared at the headline length" if variant.startswith("optimum-") else
                   "PyTorch eager is the reference at the headline length; the sweep uses the exported files"
                   if fmt == "pytorch" else
                   "the browser targets sweep the teacher's fp32 files only (the reference: a web page ships a "
                   "student or an LSTM, never the teacher)" if teacher_ref else
                   f"length sweep only for {', '.join(sweep_variants)} exports (bench time budget)")
            p.skipped_lengths[str(n)] = f"{why}; this variant is measured at {headline}"
    p.throughput = t.name in throughput_targets and (variant in sweep_variants or variant == t.precision
                                                  or variant.startswith("optimum-")) \
        and (max_positions is None or headline <= max_positions)
    if not p.lengths:
        return f"no configured length fits this model (position table {max_positions} tokens)"
    return p
