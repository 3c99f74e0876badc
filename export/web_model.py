"""The web bundle's model file, re-made for onnxruntime-web: GELU as its tanh approximation (FastGelu).

Why: in onnxruntime-web's WASM build the exact (erf) GELU is the student's slowest kernel. Per-op profile of
the demo student's int8-dynamic .ort, Chromium, 1 thread, 64 tokens (python -m tools.wasm_profile): BiasGelu
280 us per layer, twice its layer's intermediate int8 MatMul (139 us) and 22% of the kernel time; natively
it is 29 us. A [1, 64, 512] micro-graph in Node's WASM: BiasGelu 170 us, FastGelu 60 us (session overhead
subtracted). ONNX Runtime's GeluApproximation transformer (off unless the session config
`optimization.enable_gelu_approximation` is 1) swaps Gelu / BiasGelu for FastGelu when the file is made,
and the .ort keeps the swapped graph. The tanh form differs from erf GELU by at most about 5e-4 per value,
so the file is checked: its test accuracy must stay within bundle.accuracy_window of the best candidate and
its labels must agree with the as-trained file's on quantize.min_argmax_agreement of the test split, else
the bundle ships the as-trained file and says why (pipeline/tasks/classification/web.py).
"""
from __future__ import annotations

from pathlib import Path

from export.ort_format import optimize_graph

GELU_APPROXIMATION = {"optimization.enable_gelu_approximation": "1"}


def source_onnx(row: dict, run_dir: Path) -> Path:
    """The .onnx a row's file was made from: itself, or for an .ort its details.source (export/variants.json)."""
    if row["format"] == "onnx":
        return run_dir / row["file"]
    return run_dir / row.get("details", {}).get("source", f"quantize/{row['model']}/{row['variant']}.onnx")


def fast_gelu_file(src: Path, out: Path, fmt: str, target_platform: str, disabled: list[str] | tuple[str, ...]) -> None:
    """Write src (an .onnx) to out as fmt ("ort" or "onnx"), optimized as export/ort_format.py makes .ort
    files (same platform, same optimizers left out) with GELU approximated by FastGelu."""
    optimize_graph(src, out, target_platform, disabled, save_format=fmt.upper(), extra_config=GELU_APPROXIMATION)


def gelu_check(new: list[int], old: list[int], gold: list[int], best: float, window: float,
               min_agreement: float) -> dict:
    """The approximated file's labels (new) against the as-trained file's (old) and the test labels (gold)."""
    n = max(1, len(gold))
    accuracy = sum(a == g for a, g in zip(new, gold)) / n
    agreement = sum(a == b for a, b in zip(new, old)) / n
    floor = best - window
    reasons = []
    if accuracy < floor - 1e-12:
        reasons.append(f"test accuracy {accuracy:.4f} < {floor:.4f} (best {best:.4f} - bundle.accuracy_window {window:g})")
    if agreement < min_agreement:
        reasons.append(f"labels agree with the as-trained file on {agreement:.2%} of the test split "
                       f"(quantize.min_argmax_agreement = {min_agreement:.2%})")
    return {"texts": len(gold), "accuracy": accuracy, "as_trained_accuracy": sum(a == g for a, g in zip(old, gold)) / n,
            "agreement_with_as_trained": agreement, "accuracy_floor": floor, "min_agreement": min_agreement,
            "passed": not reasons, "reason": "; ".join(reasons)}
