"""Which measured peak a row's achieved GFLOP/s is compared with: the peak of the arithmetic its kernels
run. fp32 rows against the fp32 matmul peak, int8 rows (int8-dynamic, int8-static, Optimum's int8) against
the int8 matmul peak, fp16 rows against the fp32 peak on a CPU without fp16 units (ORT casts them to fp32
there). A GPU or NPU row has no peak measured here, so no fraction. Dividing an int8 row by the fp32 peak
was how an lstm_distilled int8 row once showed 185%.
"""
from __future__ import annotations

from eval.machine import has_fp16_units, peak_for

GPU_OR_NPU = ("desktop-gpu", "edge-npu")


def arithmetic(variant: str, fmt: str, target: str, machine: dict) -> tuple[str | None, str]:
    """(the peak this row is measured against: "fp32" | "int8" | None, why)."""
    if target in GPU_OR_NPU or fmt == "coreml":
        return None, f"no {target} peak is measured on this machine"
    if variant.removeprefix("optimum-").startswith("int8"):
        return "int8", "int8 kernels (MatMulInteger / QLinearMatMul family)"
    if variant == "fp16":
        units = machine.get("fp16_units")
        if units is None:  # a document from before fp16_units was recorded: the flags say
            units = has_fp16_units(machine.get("cpu_flags") or [], machine.get("machine", ""))
        if units:
            return None, "fp16 units on this CPU; no fp16 peak is measured"
        return "fp32", "fp16 file computed in fp32 (no fp16 units on this CPU)"
    return "fp32", "fp32 kernels"


def add_gflops(entry: dict, flops: int | None, batch: int, peak: tuple[float | None, str | None]) -> None:
    """gflops, and peak_fraction against the peak of the row's own arithmetic (row_peak), named in `peak`
    ("fp32" or "int8")."""
    if flops and entry.get("p50_ms"):
        entry["gflops"] = flops * batch / (entry["p50_ms"] / 1e3) / 1e9
        if peak[0]:
            entry["peak_fraction"] = entry["gflops"] / peak[0]
            entry["peak"] = peak[1]


def row_peak(variant: str, fmt: str, target: str, machine: dict, threads: int) -> tuple[float | None, str | None]:
    """(peak GFLOP/s or GOP/s at `threads`, its kind) for a row on a target; (None, None) when no measured
    peak matches the row's arithmetic."""
    kind, _ = arithmetic(variant, fmt, target, machine)
    peaks = {"fp32": machine.get("peak_gflops_fp32"), "int8": machine.get("peak_gops_int8")}.get(kind or "")
    peak = peak_for(peaks, threads) if peaks else None
    return (peak, kind) if peak else (None, None)
