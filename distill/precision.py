"""train.precision / lm.teacher_precision = "auto": bf16 where the hardware computes it natively, else fp32.

Why not bf16 everywhere: on a CPU without bf16 units (AVX2 only, no AVX512-BF16 or AMX) PyTorch emulates
bf16 autocast, and a 512 x 576 x 1536 matmul on 2 threads of this project's AVX2 development machine took
735 ms under bf16 autocast against 6.8 ms in fp32 (a timed loop of `a @ b` on random tensors). With bf16
dot-product units it is the other way round: on a Zen 4 EPYC (AVX512-BF16) the same matmul on 1 thread took
4.3 ms under bf16 autocast against 8.8 ms in fp32 (docs/results/2026-11-24-bf16-detection.md); on a Xeon
with AMX the same autocast made the generation demo's teacher pass about 1.75x faster than fp32
(docs/results/2026-11-23-generation-demo.md).

The CPU features are read from /proc/cpuinfo in full (eval.machine.all_cpu_flags), not from the report's
short list, which once lacked avx512_bf16 and made "auto" pick fp32 on a Zen 4.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("pocketformer")

# /proc/cpuinfo features with native bf16 dot products (what makes bf16 autocast faster than fp32):
# x86 AMX-BF16 tiles and AVX512-BF16 (VDPBF16PS; Zen 4+, Cooper Lake, Sapphire Rapids+), AVX10 (which
# includes the AVX512-BF16 instructions), and ARM's BF16 extension (BFDOT/BFMMLA; Neoverse V1/V2, Graviton3+).
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
BF16_CPU_FLAG_PREFIXES = ("avx10",)
# features that convert bf16 without computing in it: the multiplies stay at the fp32 rate, so no faster
CONVERT_ONLY = ("avx_ne_convert",)


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # fp32 | bf16 | fp16
    reason: str  # why, for the log and the stage summary


def cpu_bf16_choice(flags: set[str] | list[str]) -> PrecisionChoice:
    """"auto" on a CPU with these /proc/cpuinfo features."""
    f = set(flags)
    native = [x for x in BF16_CPU_FLAGS if x in f] + sorted(x for x in f if x.startswith(BF16_CPU_FLAG_PREFIXES))
    if native:
        return PrecisionChoice("bf16", f"CPU computes bf16 natively ({', '.join(native)})")
    if not f:
        return PrecisionChoice("fp32", "CPU features unknown (no /proc/cpuinfo): bf16 could be emulated, slower")
    convert = [x for x in CONVERT_ONLY if x in f]
    why = f"only converts bf16 ({', '.join(convert)}), multiplies at the fp32 rate" if convert else \
        "no bf16 units (none of amx_bf16, avx512_bf16, avx10, ARM bf16)"
    return PrecisionChoice("fp32", f"CPU has {why}: PyTorch would emulate bf16 autocast, slower than fp32")


def gpu_bf16_choice(name: str, capability: tuple[int, int], hip: bool) -> PrecisionChoice:
    """"auto" on a GPU. CUDA: bf16 tensor cores from compute capability 8.0 (Ampere) on; torch's
    is_bf16_supported() also says True for older GPUs that only emulate it. ROCm: is_bf16_supported()."""
    cc = f"{capability[0]}.{capability[1]}"
    if hip or capability >= (8, 0):
        return PrecisionChoice("bf16", f"GPU {name} (compute capability {cc}) has bf16 units")
    return PrecisionChoice("fp32", f"GPU {name} (compute capability {cc} < 8.0) would emulate bf16")


def choose_precision(precision: str, what: str = "precision") -> PrecisionChoice:
    """The precision to run for a configured value; "auto" is resolved for this machine and logged with its
    reason (`what` names the setting in the log line)."""
    if precision != "auto":
        return PrecisionChoice(precision, "set in the config")
    import torch

    if torch.cuda.is_available():
        hip = bool(getattr(torch.version, "hip", None))
        if hip and not torch.cuda.is_bf16_supported():
            choice = PrecisionChoice("fp32", f"GPU {torch.cuda.get_device_name()} has no bf16 support")
        else:
            choice = gpu_bf16_choice(torch.cuda.get_device_name(), torch.cuda.get_device_capability(), hip)
    else:
        from eval.machine import all_cpu_flags

        choice = cpu_bf16_choice(all_cpu_flags())
    log.info("[precision] %s = auto -> %s: %s", what, choice.precision, choice.reason)
    return choice
