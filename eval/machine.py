"""What machine the numbers came from, and how fast its cores can multiply matrices (the peak that
achieved GFLOP/s is compared against), measured in the same run as the models."""
from __future__ import annotations

import logging
import os
import platform
import subprocess
import time
from pathlib import Path

log = logging.getLogger("pocketformer")


def cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# the features shown in the report and read by the kernel and precision choices (x86 "flags" and ARM
# "Features" names as /proc/cpuinfo writes them)
REPORTED_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx_vnni_int8", "avx512_bf16",
                  "avx_ne_convert", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
                  "asimddp", "i8mm", "bf16", "sve", "fphp", "asimdhp")


def parse_cpu_flags(cpuinfo: str) -> set[str]:
    """Every feature on the first "flags" (x86) or "Features" (ARM) line of a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        key = line.split(":", 1)[0].strip()
        if key in ("flags", "Features") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def all_cpu_flags() -> set[str]:
    """This machine's CPU features (empty where there is no /proc/cpuinfo, e.g. macOS)."""
    info = Path("/proc/cpuinfo")
    return parse_cpu_flags(info.read_text(errors="replace")) if info.is_file() else set()


def cpu_flags() -> list[str]:
    """The SIMD features that decide which int8/fp32/bf16 kernels ORT and PyTorch pick, in a fixed order."""
    have = all_cpu_flags()
    return [f for f in REPORTED_FLAGS if f in have]


def has_fp16_units(flags: set[str] | list[str], machine: str) -> bool:
    """fp16 arithmetic in hardware (AVX512-FP16, AMX-FP16; ARM's half-precision SIMD). Without it ORT's CPU
    provider runs an fp16 graph's MatMuls in fp32 (it inserts casts), so fp16 rows meet the fp32 peak."""
    f = set(flags)
    if machine.lower() in ("arm64", "aarch64"):
        return "asimdhp" in f
    return bool(f & {"avx512_fp16", "amx_fp16"})


def matmul_peak_gflops(threads: int, size: int = 1024, seconds: float = 0.5) -> float:
    """Best fp32 GFLOP/s of a size x size matmul (torch, MKL/oneDNN) on `threads` threads."""
    import torch

    from eval.latency import best_seconds

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(size, size)
        b = torch.randn(size, size)
        return 2 * size ** 3 / best_seconds(lambda: torch.mm(a, b), seconds) / 1e9
    finally:
        torch.set_num_threads(old)


def other_cpu_percent(seconds: float = 1.0) -> float:
    """System-wide CPU use while this process sleeps: the share other processes are taking."""
    import psutil

    return round(psutil.cpu_percent(interval=seconds), 1)


class OtherLoad:
    """The machine's CPU time other processes took while a block ran, as a share of all its cores (what
    cpu_busy_percent samples for one second at the start, over the whole bench): work that starts after the
    bench did slows its numbers as much as work it found running."""

    def __init__(self) -> None:
        self.start = (time.monotonic(), _busy_seconds(), *_own_seconds())

    def percent(self) -> float:
        wall, busy, reaped, seen = (now - then for now, then in zip((time.monotonic(), _busy_seconds(),
                                                                     *_own_seconds()), self.start))
        # each count of this tree's time falls short in its own way (_own_seconds): the larger is the closer
        own = max(reaped, seen)
        return round(max(0.0, 100 * (busy - own) / (wall * (os.cpu_count() or 1))), 1) if wall > 0 else 0.0


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting on I/O), as psutil.cpu_percent counts."""
    import psutil

    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # already inside user / nice
    return total - t.idle - getattr(t, "iowait", 0.0)


# (pid, start time) -> CPU seconds of a process this one started (or one of its descendants did), when last seen
_SEEN: dict[tuple[int, float], float] = {}


def note_descendants() -> float:
    """Look at this process's descendants (and those seen before, re-parented since) and return the CPU seconds
    of all ever seen, each as last seen. Chromium's renderers, where the browser bench's WASM runs, are not
    waited for up to this process (the browser ends their parent first), so their time never reaches its
    children's: only seeing them alive counts it. run_watched calls this every half second."""
    _look()
    return sum(_SEEN.values())


def _look() -> float:
    """Note every descendant's CPU seconds in _SEEN; return the sum over those still this process's descendants."""
    import psutil

    procs = psutil.Process().children(recursive=True)
    listed = {p.pid for p in procs}
    for pid, _ in list(_SEEN):
        if pid not in listed:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                pass
    live = 0.0
    for proc in procs:
        try:
            key, t = (proc.pid, proc.create_time()), proc.cpu_times()
        except psutil.Error:  # ended since the listing: its last sighting stands (once waited for, its children's)
            continue
        if proc.pid in listed or key in _SEEN:  # not a stranger that reused a seen pid
            _SEEN[key] = t.user + t.system
        if proc.pid in listed:
            live += t.user + t.system
    return live


def _own_seconds() -> tuple[float, float]:
    """CPU seconds of this process tree, counted two ways that each fall short: this process, its children
    waited for (and theirs) and those still running, which misses processes nobody waited for; and this process
    plus every descendant ever seen at its last sighting (note_descendants), which misses what a finished one
    used after it was last seen."""
    import psutil

    c = psutil.Process().cpu_times()
    mine, live = c.user + c.system, _look()  # one look at the tree for both counts
    return mine + c.children_user + c.children_system + live, mine + sum(_SEEN.values())


def run_watched(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s) that notes the process tree's
    CPU time every half second while it waits (note_descendants), so a browser's work counts as this run's."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=max(0.01, min(0.5, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    note_descendants()
                    if time.monotonic() >= deadline:
                        raise subprocess.TimeoutExpired(argv, timeout_s) from None
        except BaseException:  # a timeout or Ctrl-C: as subprocess.run, the command does not outlive the call
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def record_load(machine: dict, load: OtherLoad) -> None:
    """machine["cpu_busy_during_percent"]: other processes' share of the cores over the bench (warned above 25%)."""
    machine["cpu_busy_during_percent"] = share = load.percent()
    if share > 25.0:
        log.warning("[bench] other processes took %s%% of the machine's cores while the bench ran: its latencies "
                    "are noisy, multi-threaded ones most; re-run `make bench` on an idle machine before quoting "
                    "them", share)


def is_busy(machine: dict) -> bool:
    """Other processes took more than a quarter of the cores at the bench's start or over its run."""
    shares = [machine.get(k) for k in ("cpu_busy_percent", "cpu_busy_during_percent")]
    if any(v is not None for v in shares):
        return max(v for v in shares if v is not None) > 25.0
    load = machine.get("load_average_1m")
    return load is not None and load > 0.5 * (machine.get("usable_cores") or 1)


def machine_info(thread_counts: list[int]) -> dict:
    return {
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "fp16_units": has_fp16_units(all_cpu_flags(), platform.machine()),
        # other work on the machine skews every number; recorded so a noisy run can be recognised
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        # the 1-minute load average still counts the pipeline's own training that just ended; CPU use
        # over one idle second of ours is what other work is taking now
        "cpu_busy_percent": other_cpu_percent(),
        "peak_gflops_fp32": {str(t): round(matmul_peak_gflops(t), 1) for t in sorted(set(thread_counts))},
        "peak_probe": "best of repeated 1024x1024 fp32 torch.mm over 0.5 s, per thread count",
        **int8_peak_info(thread_counts),
        # the desktop-gpu rows say nothing of which card ran them without this
        "gpu": gpu_info(),
    }


def gpu_info() -> dict | None:
    """The CUDA device the desktop-gpu target runs on (device 0, which ONNX Runtime's CUDA provider and
    PyTorch both use by default); None where this process sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": torch.cuda.get_device_name(0), "memory_mib": props.total_memory // 2**20,
            "compute_capability": "{}.{}".format(*torch.cuda.get_device_capability(0)),
            "cuda_runtime": torch.version.cuda or torch.version.hip, "driver": nvidia_driver(),
            "count": torch.cuda.device_count()}


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it (None without nvidia-smi, e.g. on ROCm)."""
    import shutil

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader", "--id=0"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def int8_peak_info(thread_counts: list[int]) -> dict:
    """The int8 peak (eval/int8_peak.py), the kernels that ran it and whether the CPU has VNNI. A probe that
    cannot run leaves int8 rows without a peak fraction and says why (never the fp32 peak instead)."""
    from eval.int8_peak import SIZE, has_vnni, int8_matmul_peaks, mlas_int8_kernel

    flags = all_cpu_flags()
    kernels = {"mlas": mlas_int8_kernel(flags, platform.machine()),
               "mlas_source": "inferred from the CPU flags by MLAS's dispatch order (onnxruntime does not report it)",
               "vnni": has_vnni(flags)}
    try:
        probe = int8_matmul_peaks(thread_counts)
    except Exception as e:  # an onnxruntime that cannot build or run the graph
        log.warning("[bench] int8 matmul peak probe failed: %s; int8 rows get no %% of peak", e)
        return {"peak_gops_int8": {}, "peak_probe_int8": f"failed: {type(e).__name__}: {str(e)[:200]}",
                "int8_kernels": kernels}
    return {"peak_gops_int8": probe["peak_gops_int8"],
            "peak_probe_int8": f"best of repeated {SIZE}x{SIZE}x{SIZE} MatMul quantized by onnxruntime's "
                               f"quantize_dynamic (int8 weights), onnxruntime CPU provider, over 0.5 s, per thread count",
            "int8_kernels": {"ort_ops": probe["kernels"], **kernels}}


def peak_for(peaks: dict[str, float], threads: int) -> float | None:
    """The matmul peak for `threads`: the best probe on at most that many threads (t threads can always do
    what fewer do; a probe disturbed by other load must not make the peak look lower)."""
    return max((g for t, g in peaks.items() if int(t) <= threads), default=None)
