"""The browser variant of a student file: GELU as its tanh approximation (FastGelu), `<variant>-fastgelu.ort`.

Why: in onnxruntime-web's WASM build the exact (erf) GELU is the student's slowest kernel. Per-op profile of
the demo student's int8-dynamic .ort, Chromium, 1 thread, 64 tokens (python -m tools.wasm_profile): BiasGelu
280 us per layer, twice its layer's intermediate int8 MatMul (139 us) and 22% of the kernel time; natively
it is 29 us. A [1, 64, 512] micro-graph in Node's WASM: BiasGelu 170 us, FastGelu 60 us (session overhead
subtracted). ONNX Runtime's GeluApproximation transformer (off unless the session config
`optimization.enable_gelu_approximation` is 1) swaps Gelu / BiasGelu for FastGelu when the file is made,
and the .ort keeps the swapped graph (docs/results/2026-11-24-wasm-profile.md). Before that, export/web_graph.py
rewrites the graph for the WASM kernels (mask / token-type / reshape bookkeeping dropped, LayerNormalization
as ReduceMean + Sub + SimplifiedLayerNormalization + Add): another ~7% in Chromium and in Node's WASM.

The export stage writes it for the student from each ONNX variant in export.fast_gelu_variants (the
"ort-fastgelu" exporter, export/registry.py), with the same platform and optimizers left out as its other
.ort files, and checks it twice (pipeline/tasks/classification/fast_gelu.py): argmax agreement with its
source on the check texts, as every lossy .ort is checked, and `gelu_check` below on the whole test split.
The tanh form differs from erf GELU by at most about 5e-4 per value, so the check is about labels, not logits.

A browser-only variant (eval/targets.py BROWSER_VARIANTS). Natively, where ORT's erf is vectorised, it saves
less: python -m tools.compare_files on the demo student's int8-dynamic .ort, x86 host, 1 thread, 64 tokens,
15 alternating rounds: 0.934x and 0.935x of the erf file in two runs (rounds 0.71-1.04). A phone candidate
would need more than a timing: the phone bundle ships its .ort beside the .onnx source and the text-in model
made from that source, and verify-bundle holds all three to the same logits, so the FastGelu graph would have
to replace all three there. Until then mobile-cpu does not time it and the phone bundle never ships it.
"""
from __future__ import annotations

from pathlib import Path

from export.ort_format import optimize_graph

GELU_APPROXIMATION = {"optimization.enable_gelu_approximation": "1"}
SUFFIX = "-fastgelu"
# ONNX variants a FastGelu file may be made from (export.fast_gelu_variants): the float and dynamic-int8
# graphs, whose GELU is a float op. int8-static's QDQ graph and fp16 (no WASM kernels) are left out.
FAST_GELU_SOURCES = ("fp32", "optimized", "int8-dynamic")
# The model it is made for: the browser goal and the web bundle are about the student.
FAST_GELU_MODELS = ("student",)
FORM = "FastGelu (tanh approximation)"
AS_TRAINED = "as trained (erf)"


def variant_name(source: str) -> str:
    return f"{source}{SUFFIX}"


def is_fast_gelu(variant: str) -> bool:
    """A browser-only FastGelu variant (never a phone bundle's file)."""
    return variant.endswith(SUFFIX)


def fast_gelu_file(src: Path, out: Path, fmt: str, target_platform: str, disabled: list[str] | tuple[str, ...],
                   trim: bool = True) -> dict:
    """Write src (an .onnx) to out as fmt ("ort" or "onnx"), optimized as export/ort_format.py makes .ort
    files (same platform, same optimizers left out) with GELU approximated by FastGelu; with trim, the
    mask and token-type bookkeeping trimmed first (export/web_graph.py). Returns the trim's record."""
    import tempfile

    from export.web_graph import trim_web_graph

    with tempfile.TemporaryDirectory() as d:
        record = {"skipped": "not asked"}
        if trim:
            trimmed = Path(d) / "trimmed.onnx"
            record = trim_web_graph(src, trimmed)
            src = trimmed
        optimize_graph(src, out, target_platform, disabled, save_format=fmt.upper(), extra_config=GELU_APPROXIMATION)
    return record


def gelu_check(new: list[int], old: list[int], gold: list[int], reference: float, window: float,
               min_agreement: float) -> dict:
    """The FastGelu file's labels (new) against its as-trained source's (old) and the test labels (gold):
    test accuracy at least `reference` (the source's accuracy) - window (bundle.accuracy_window), and labels
    agreeing with the source's on at least min_agreement (quantize.min_argmax_agreement) of the texts."""
    n = max(1, len(gold))
    accuracy = sum(a == g for a, g in zip(new, gold)) / n
    agreement = sum(a == b for a, b in zip(new, old)) / n
    floor = reference - window
    reasons = []
    if accuracy < floor - 1e-12:
        reasons.append(f"test accuracy {accuracy:.4f} < {floor:.4f} (its source's {reference:.4f} - "
                       f"bundle.accuracy_window {window:g})")
    if agreement < min_agreement:
        reasons.append(f"labels agree with the as-trained file on {agreement:.2%} of the test split "
                       f"(quantize.min_argmax_agreement = {min_agreement:.2%})")
    return {"texts": len(gold), "accuracy": accuracy, "as_trained_accuracy": sum(a == g for a, g in zip(old, gold)) / n,
            "agreement_with_as_trained": agreement, "accuracy_floor": floor, "min_agreement": min_agreement,
            "passed": not reasons, "reason": "; ".join(reasons)}


def gelu_record(row: dict, rows: list[dict]) -> dict:
    """metadata.json's model.gelu for the web bundle's chosen row: which GELU form ships and why, from the
    export stage's rows (the FastGelu rows carry their check; the choice's candidates their timings)."""
    if is_fast_gelu(row["variant"]):
        return {"form": FORM, "source": row.get("details", {}).get("source"), "check": row["check"].get("gelu"),
                "why": "onnxruntime-web's WASM erf GELU is its slowest kernel (docs/results/2026-11-24-wasm-profile.md); "
                       "the file was the fastest on the web bundle's target within the accuracy window"}
    mine = [r for r in rows if r["model"] == row["model"] and r["format"] in ("onnx", "ort") and is_fast_gelu(r["variant"])]
    if not mine:
        return {"form": AS_TRAINED, "reason": f"no FastGelu file of {row['model']} was made (export.fast_gelu_variants)"}
    failed = [r for r in mine if r.get("status") == "failed"]
    if len(failed) == len(mine):
        return {"form": AS_TRAINED, "reason": "the FastGelu file failed its check: "
                + "; ".join(f"{r['variant']}: {r['check'].get('reason', 'its check failed')}" for r in failed),
                "check": failed[0]["check"].get("gelu")}
    return {"form": AS_TRAINED, "reason": f"{', '.join(r['variant'] for r in mine if r not in failed)} passed its "
            f"check but was not chosen: {row['choice']['rule']} (candidates in model.choice)"}
