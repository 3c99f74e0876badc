"""The int8 matrix-multiply peak int8 rows are compared against: a square fp32 MatMul quantized the way our
int8-dynamic files are (onnxruntime's quantize_dynamic: int8 weights, activations quantized on the fly),
timed with onnxruntime's CPU provider at the bench's thread counts. ORT fuses it into the same
DynamicQuantizeMatMul kernel our files run, on MLAS's integer GEMM for this CPU.

ORT reports which op kernel ran (its profiler, read once below) but not which MLAS code path that kernel
dispatched to; that is chosen from the CPU's features as MLAS does (onnxruntime/core/mlas/lib/platform.cpp)
and recorded as inferred.
"""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from export.ort_session import ort_session

SIZE = 1024


def _quantized_matmul(folder: Path, size: int) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    w = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "int8_peak",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])],
                              [numpy_helper.from_array(w, "w")])
    src, out = folder / "fp32.onnx", folder / "int8.onnx"
    # IR 10, not onnx's newest: an onnxruntime one release older than the onnx package refuses the newer IR
    # (seen with onnx 1.23.1 and onnxruntime-gpu 1.31.1: "Load model ... failed" at model.cc:256)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), src)
    logging.disable(logging.WARNING)  # quantize_dynamic's "consider pre-processing" note on a one-node graph
    try:
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    return out


def _kernels_run(path: Path, x, folder: Path) -> list[str]:
    """'op (provider)' of every node ORT's profiler saw run: which fused kernel the int8 graph became."""
    sess = ort_session(path, 1, inter_threads=1, fix=None, profile=str(folder / "profile"))
    sess.run(None, {"x": x})
    events = json.loads(Path(sess.end_profiling()).read_text())
    return sorted({f"{e['args']['op_name']} ({e['args'].get('provider', '?')})" for e in events
                   if e.get("cat") == "Node" and "op_name" in e.get("args", {})})


def int8_matmul_peaks(thread_counts: list[int], size: int = SIZE, seconds: float = 0.5) -> dict:
    """{"peak_gops_int8": {threads: best GOP/s}, "kernels": [op (provider), ...]} of a size x size x size
    dynamically quantized MatMul (2 size^3 integer ops per call) run by onnxruntime."""
    import numpy as np

    from eval.latency import best_seconds

    x = np.random.default_rng(1).standard_normal((size, size)).astype(np.float32)
    peaks = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = _quantized_matmul(Path(tmp), size)
        kernels = _kernels_run(path, x, Path(tmp))
        for t in sorted(set(thread_counts)):
            sess = ort_session(path, t, inter_threads=1, fix=None)  # warm-up calls: weight prepacking, thread pool start
            best = best_seconds(lambda: sess.run(None, {"x": x}), seconds)
            peaks[str(t)] = round(2 * size ** 3 / best / 1e9, 1)
    return {"peak_gops_int8": peaks, "kernels": kernels}


# x86: the first whose flags the CPU has, in MLAS's order of checks
X86_INT8_KERNELS = (({"amx_int8", "amx_tile"}, "AMX"), ({"avx512_vnni"}, "AVX512-VNNI"),
                    ({"avx512bw", "avx512f"}, "AVX512 core (no VNNI)"), ({"avx_vnni"}, "AVX-VNNI"),
                    ({"avx2"}, "AVX2 (no VNNI)"))


def mlas_int8_kernel(flags: set[str] | list[str], machine: str) -> str:
    """The MLAS integer-GEMM code path (u8 activations x s8 weights) this CPU gets, by MLAS's own order of
    checks. AMX needs an ORT build with it and the kernel's permission for AMX state; assumed granted."""
    f = set(flags)
    if machine.lower() in ("arm64", "aarch64"):
        if "i8mm" in f:
            return "NEON I8MM (SMMLA/UMMLA)"
        return "NEON UDOT" if "asimddp" in f else "NEON"
    return next((name for need, name in X86_INT8_KERNELS if need <= f), "SSE4.1")


def has_vnni(flags: set[str] | list[str]) -> bool:
    """Integer dot-product instructions (one instruction per 4 int8 multiply-adds)."""
    return bool(set(flags) & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm"})
