"""What machine the numbers came from, and how fast its cores can multiply matrices (the peak that
achieved GFLOP/s is compared against), measured in the same run as the models."""
from __future__ import annotations

import platform
import time
from pathlib import Path


def cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The SIMD features that decide which int8/fp32 kernels ORT picks."""
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        return []
    for line in info.read_text(errors="replace").splitlines():
        if line.startswith("flags"):
            keep = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16", "avx512_fp16")
            return [f for f in line.split(":", 1)[1].split() if f in keep]
    return []


def matmul_peak_gflops(threads: int, size: int = 1024, seconds: float = 0.5) -> float:
    """Best fp32 GFLOP/s of a size x size matmul (torch, MKL/oneDNN) on `threads` threads."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(size, size)
        b = torch.randn(size, size)
        for _ in range(2):  # warm-up: thread pool start, page faults
            torch.mm(a, b)
        best = float("inf")
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        return 2 * size ** 3 / best / 1e9
    finally:
        torch.set_num_threads(old)


def other_cpu_percent(seconds: float = 1.0) -> float:
    """System-wide CPU use while this process sleeps: the share other processes are taking."""
    import psutil

    return round(psutil.cpu_percent(interval=seconds), 1)


def is_busy(machine: dict) -> bool:
    busy = machine.get("cpu_busy_percent")
    if busy is not None:
        return busy > 25.0
    load = machine.get("load_average_1m")
    return load is not None and load > 0.5 * (machine.get("usable_cores") or 1)


def machine_info(thread_counts: list[int]) -> dict:
    import os

    return {
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_flags": cpu_flags(),
        # other work on the machine skews every number; recorded so a noisy run can be recognised
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        # the 1-minute load average still counts the pipeline's own training that just ended; CPU use
        # over one idle second of ours is what other work is taking now
        "cpu_busy_percent": other_cpu_percent(),
        "peak_gflops_fp32": {str(t): round(matmul_peak_gflops(t), 1) for t in sorted(set(thread_counts))},
        "peak_probe": "best of repeated 1024x1024 fp32 torch.mm over 0.5 s, per thread count",
    }


def peak_for(peaks: dict[str, float], threads: int) -> float | None:
    """The matmul peak for `threads`: the best probe on at most that many threads (t threads can always do
    what fewer do; a probe disturbed by other load must not make the peak look lower)."""
    fit = [g for t, g in peaks.items() if int(t) <= threads]
    return max(fit) if fit else None
