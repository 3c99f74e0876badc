"""train.precision / lm.teacher_precision = "auto": bf16 where the hardware computes it natively, else fp32.

Why not bf16 everywhere: on a CPU without bf16 units (AVX2 only, no AVX512-BF16 or AMX) PyTorch emulates
bf16 autocast, and a 512 x 576 x 1536 matmul on 2 threads of this project's AVX2 development machine took
735 ms under bf16 autocast against 6.8 ms in fp32 (a timed loop of `a @ b` on random tensors). On a Xeon with AMX the same autocast made the generation
demo's teacher pass about 1.75x faster than fp32 (README, "Generation").
"""
from __future__ import annotations

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs with native bf16 arithmetic


def resolve_precision(precision: str) -> str:
    """"auto" -> "bf16" on a bf16-capable CUDA GPU or CPU, else "fp32"; any other value as it is."""
    if precision != "auto":
        return precision
    import torch

    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    from eval.machine import cpu_flags

    return "bf16" if set(cpu_flags()) & set(BF16_CPU_FLAGS) else "fp32"
