"""Benchmark targets, a registry keyed by name: where a model runs (runtime, execution provider,
threads, precision, model format), and whether that place exists on this machine.

A target that is a stand-in for other hardware says so in `proxy`; the report prints it next to every
number measured there. `unavailable()` gives the one-line reason a target cannot run here (or None).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.errors import lookup


@dataclass(frozen=True)
class Target:
    name: str
    runtime: str  # onnxruntime | pytorch | coreml (several: the first available one is used)
    provider: str  # execution provider (or device) the runtime is asked for
    threads: int  # intra-op threads; 0 = every core this process may use
    precision: str  # what the target's kernels compute in
    formats: tuple[str, ...]  # model formats it runs
    variants: tuple[str, ...]  # variants it runs ("*" = every variant of those formats)
    description: str
    proxy: str = ""  # non-empty: this is a stand-in measured on the host, and why
    # (format, variant) every model should have here; one the earlier stages did not make becomes a
    # row whose entry says so, rather than a silent gap in the table
    expects: tuple[tuple[str, str], ...] = ()


# every file the browser can load: our ONNX and .ort variants and Optimum's peer files (fp16 has no WASM kernels),
# and the browser-only .ort files with GELU as FastGelu (export.fast_gelu_variants; export/web_model.py)
BROWSER_VARIANTS = ("fp32", "optimized", "int8-dynamic", "int8-static", "optimum-fp32", "optimum-int8-dynamic",
                    "fp32-fastgelu", "optimized-fastgelu", "int8-dynamic-fastgelu")

TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("host-cpu", "onnxruntime + pytorch", "CPUExecutionProvider", 0, "fp32 / int8",
           ("onnx", "pytorch"), ("*",),
           "ONNX Runtime on every host core; PyTorch eager as the reference",
           expects=(("pytorch", "fp32"), ("onnx", "fp32"), ("onnx", "int8-dynamic"))),
    Target("mobile-cpu", "onnxruntime", "XNNPACKExecutionProvider if present, else CPUExecutionProvider", 1,
           "fp32 / int8", ("ort", "onnx"), ("fp32", "optimized", "int8-dynamic", "int8-static",
                                            "optimum-fp32", "optimum-int8-dynamic"),
           "the .ort mobile files on one thread, as a phone app runs them",
           proxy="measured on one core of this host, not on a phone: ratios between models carry over, "
                 "absolute times do not (the phone harness lands real runs in the same table)",
           expects=(("ort", "fp32"), ("ort", "int8-dynamic"), ("ort", "int8-static"))),
    Target("edge-npu", "onnxruntime NNAPI/CoreML EP, Core ML", "NPU (Neural Engine with CPU_AND_NE)", 1, "int8 / fp16",
           ("onnx", "coreml"), ("int8-static", "fp16", "int8", "palettized-4bit"),
           "static-QDQ int8 with fixed shapes, and the Core ML packages; readiness everywhere, latency only "
           "where an NPU runtime exists, else a roofline estimate", expects=(("onnx", "int8-static"),)),
    # "optimized" is ORT's transformer fusion (Attention, BiasGelu: contrib ops with CUDA kernels), and
    # Optimum's fp32 file is the peer; int8 files stay off: their kernels are CPU kernels
    Target("desktop-gpu", "onnxruntime CUDA EP, else pytorch", "CUDAExecutionProvider / cuda", 0, "fp16",
           ("onnx", "pytorch"), ("fp32", "optimized", "fp16", "optimum-fp32"),
           "ONNX Runtime's CUDA provider when onnxruntime-gpu is installed, else PyTorch CUDA in fp16"),
    # The browser: onnxruntime-web's WASM backend in headless Chromium (eval/browser.py), every file in one
    # browser session. One thread is what a page gets without cross-origin isolation; -mt uses every core.
    Target("browser-wasm", "onnxruntime-web (WASM) in headless Chromium", "wasm", 1, "fp32 / int8",
           ("onnx", "ort"), BROWSER_VARIANTS,
           "onnxruntime-web's WASM backend in Chromium on this host's CPU, 1 thread (a web page as shipped)"),
    Target("browser-wasm-mt", "onnxruntime-web (WASM) in headless Chromium", "wasm", 0, "fp32 / int8",
           ("onnx", "ort"), BROWSER_VARIANTS,
           "onnxruntime-web's WASM backend in Chromium on every host core (WASM threads; the page is served "
           "with COOP/COEP headers)"),
    # Qualcomm's HTP compiler (eval/qnn.py): verdicts per chip from the compile stage (compile/qnn.json),
    # never timed (its x86 emulator's timings are not a phone's)
    Target("qnn-htp", "onnxruntime-qnn (QNN EP, HTP backend)", "QNNExecutionProvider", 1, "int8 / int16 QDQ",
           ("onnx", "onnx-npu"), ("int8-static", "*w8a16*", "npu-*"),
           "the static QDQ files compiled for each Snapdragon HTP in npu.chips and run on QAIRT's x86 HTP "
           "emulator: compiled or not, nodes on the HTP, emulator agreement; no latency",
           proxy="compiled here for the chip and run on an emulator: verdicts and numerics, no latency"),
)}


def get_target(name: str) -> Target:
    return lookup(TARGETS, name, f"target '{name}' in bench.targets", "Known targets")


def host_threads() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity mask
        return os.cpu_count() or 1


def resolved_threads(t: Target) -> int:
    return t.threads or host_threads()


def ort_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def cuda_backend() -> str | None:
    """'ort-cuda', 'torch-cuda' or None (no CUDA usable from this process). onnxruntime-gpu lists its
    provider even on a machine without a GPU; that case fails at session creation and is recorded there."""
    if "CUDAExecutionProvider" in ort_providers():
        return "ort-cuda"
    import torch

    return "torch-cuda" if torch.cuda.is_available() else None


def coreml_runtime() -> bool:
    """Core ML predictions (and so the Neural Engine) exist only on macOS."""
    import platform

    return platform.system() == "Darwin"


def unavailable(t: Target) -> str | None:
    """Why the target cannot run on this machine at all, in one line; None when it can."""
    from eval.browser import is_browser, unavailable_reason

    if is_browser(t):
        return unavailable_reason()
    if t.name == "qnn-htp":
        from eval.qnn import unavailable_reason as qnn_missing

        return qnn_missing()
    if t.name == "desktop-gpu" and cuda_backend() is None:
        return ("no CUDA device on this machine (ONNX Runtime providers: " + ", ".join(ort_providers())
                + "; torch.cuda.is_available() is False)")
    return None


def runtimes_state(cfg) -> str:
    """Where each of the run's bench.targets runs on this machine, in a few stable words ("host-cpu: runs,
    mobile-cpu: CPUExecutionProvider, desktop-gpu: cannot run"). The bench stage is keyed on it (its
    Step.environment): a bench that skipped a target re-runs once what the target needs is installed (Chromium,
    onnxruntime-gpu, a GPU, onnxruntime-qnn), or when the target would now run on another provider; the same
    machine re-runs nothing (no paths or reasons, which could differ between calls)."""
    from eval.browser import is_browser, unavailable_reason

    words = []
    for name in cfg.bench.targets:
        t = TARGETS[name]
        if t.name == "desktop-gpu":
            state = cuda_backend() or "cannot run"
        elif t.name == "mobile-cpu":
            state = mobile_provider()
        elif is_browser(t):  # the configured browser, as the bench drives it
            state = "cannot run" if unavailable_reason(cfg.bench.browser_executable) else "runs"
        else:
            state = "cannot run" if unavailable(t) else "runs"
        words.append(f"{name}: {state}")
    return ", ".join(words)


def mobile_provider() -> str:
    """XNNPACK is what ORT Mobile uses on phones; the PyPI CPU wheel does not ship it."""
    return "XNNPACKExecutionProvider" if "XNNPACKExecutionProvider" in ort_providers() else "CPUExecutionProvider"
