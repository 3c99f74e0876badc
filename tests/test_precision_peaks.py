"""What "auto" precision picks on recorded CPUs (tests/fixtures/cpuinfo/), the int8 kernel family MLAS
gives them, and which measured peak each bench row's "% of peak" divides by."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from distill.precision import cpu_bf16_choice
from eval.int8_peak import has_vnni, int8_matmul_peaks, mlas_int8_kernel
from eval.machine import has_fp16_units, parse_cpu_flags
from eval.peaks import arithmetic, row_peak

CPUINFO = Path(__file__).parent / "fixtures" / "cpuinfo"
# file -> (arch, auto precision, MLAS int8 path, VNNI, fp16 units)
CPUS = {
    "zen4-epyc-avx512bf16.txt": ("x86_64", "bf16", "AVX512-VNNI", True, False),
    "sapphire-rapids-amx.txt": ("x86_64", "bf16", "AMX", True, True),
    "epyc-7763-avx2-only.txt": ("x86_64", "fp32", "AVX2 (no VNNI)", False, False),
    "neoverse-n1-graviton2.txt": ("aarch64", "fp32", "NEON UDOT", True, True),
    "neoverse-v1-graviton3.txt": ("aarch64", "bf16", "NEON I8MM (SMMLA/UMMLA)", True, True),
}


def _flags(name: str) -> set[str]:
    return parse_cpu_flags((CPUINFO / name).read_text())


@pytest.mark.parametrize("name", sorted(CPUS))
def test_recorded_cpus(name):
    arch, precision, kernel, vnni, fp16 = CPUS[name]
    flags = _flags(name)
    assert flags, name
    choice = cpu_bf16_choice(flags)
    assert choice.precision == precision, choice.reason
    assert mlas_int8_kernel(flags, arch) == kernel
    assert has_vnni(flags) is vnni
    assert has_fp16_units(flags, arch) is fp16


def test_reasons_name_the_deciding_features():
    assert "avx512_bf16" in cpu_bf16_choice(_flags("zen4-epyc-avx512bf16.txt")).reason
    assert "amx_bf16" in cpu_bf16_choice(_flags("sapphire-rapids-amx.txt")).reason
    assert "no bf16 units" in cpu_bf16_choice(_flags("epyc-7763-avx2-only.txt")).reason
    convert_only = cpu_bf16_choice({"avx2", "avx_vnni", "avx_ne_convert"})  # Meteor Lake-like client core
    assert convert_only.precision == "fp32" and "avx_ne_convert" in convert_only.reason
    assert cpu_bf16_choice({"avx2", "avx10_1"}).precision == "bf16"
    assert cpu_bf16_choice(set()).precision == "fp32"


MACHINE = {"machine": "x86_64", "cpu_flags": ["avx2", "avx512f", "avx512_vnni"], "fp16_units": False,
           "peak_gflops_fp32": {"1": 100.0, "2": 190.0}, "peak_gops_int8": {"1": 400.0, "2": 760.0}}


@pytest.mark.parametrize("variant, fmt, target, kind", [
    ("fp32", "onnx", "host-cpu", "fp32"),
    ("optimized", "ort", "mobile-cpu", "fp32"),
    ("fp32", "pytorch", "host-cpu", "fp32"),
    ("optimum-fp32", "onnx", "host-cpu", "fp32"),
    ("int8-dynamic", "ort", "mobile-cpu", "int8"),
    ("int8-static", "onnx", "host-cpu", "int8"),
    ("optimum-int8-dynamic", "onnx", "host-cpu", "int8"),
    ("int8-dynamic", "onnx", "browser-wasm", "int8"),
    ("fp16", "onnx", "host-cpu", "fp32"),  # no fp16 units: ORT computes it in fp32
    ("fp32", "pytorch", "desktop-gpu", None),
    ("int8-dynamic", "onnx", "edge-npu", None),
    ("fp16", "coreml", "edge-npu", None),
])
def test_peak_per_row(variant, fmt, target, kind):
    assert arithmetic(variant, fmt, target, MACHINE)[0] == kind
    peak, got = row_peak(variant, fmt, target, MACHINE, 1)
    assert got == kind
    assert peak == {"fp32": 100.0, "int8": 400.0, None: None}[kind]


def test_fp16_rows_on_a_cpu_with_fp16_units_get_no_peak():
    m = dict(MACHINE, fp16_units=True)
    assert row_peak("fp16", "onnx", "host-cpu", m, 1) == (None, None)
    old = {k: v for k, v in MACHINE.items() if k != "fp16_units"}  # older document: the flags decide
    assert row_peak("fp16", "onnx", "host-cpu", dict(old, cpu_flags=["avx512_fp16"]), 1) == (None, None)
    assert row_peak("int8-dynamic", "onnx", "host-cpu", dict(MACHINE, peak_gops_int8={}), 1) == (None, None)


def test_int8_row_is_measured_against_the_int8_peak():
    """An lstm_distilled int8 row at 185 GOP/s on 1 thread was shown as 185% of the 100 GFLOP/s fp32 peak."""
    from eval.peaks import add_gflops as _gflops

    entry = {"p50_ms": 1.0}
    _gflops(entry, 185 * 10**6, 1, row_peak("int8-dynamic", "ort", "mobile-cpu", MACHINE, 1))
    assert entry["gflops"] == pytest.approx(185.0)
    assert entry["peak"] == "int8" and entry["peak_fraction"] == pytest.approx(185 / 400)
    fp32 = {"p50_ms": 1.0}
    _gflops(fp32, 50 * 10**6, 1, row_peak("fp32", "onnx", "host-cpu", MACHINE, 2))
    assert fp32["peak"] == "fp32" and fp32["peak_fraction"] == pytest.approx(50 / 190)
    gpu = {"p50_ms": 1.0}
    _gflops(gpu, 50 * 10**6, 1, row_peak("fp32", "pytorch", "desktop-gpu", MACHINE, 2))
    assert "peak_fraction" not in gpu and "peak" not in gpu


def test_int8_probe_runs_the_kernel_our_int8_files_run():
    out = int8_matmul_peaks([1], size=64, seconds=0.05)
    assert out["peak_gops_int8"]["1"] > 0
    assert "DynamicQuantizeMatMul (CPUExecutionProvider)" in out["kernels"]


def test_report_cell_names_the_peak():
    from eval.report import _gflops_cell

    assert _gflops_cell({"gflops": 185.0, "peak_fraction": 0.4625, "peak": "int8"}) == "185.0 (46.2% of int8)"
    assert _gflops_cell({"gflops": 50.0, "peak_fraction": 0.5, "peak": "fp32"}) == "50.0 (50.0% of fp32)"
    assert _gflops_cell({"gflops": 50.0}) == "50.0 (-)"


def test_int8_probe_model_uses_an_ir_older_runtimes_load(tmp_path):
    """onnx writes its newest IR by default; an onnxruntime a release behind the onnx package refuses it, and
    the int8 peak then failed on a CUDA machine's onnxruntime-gpu 1.31.1 beside onnx 1.23.1."""
    import onnx

    from eval.int8_peak import _quantized_matmul

    out = _quantized_matmul(tmp_path, 8)
    assert onnx.load(str(tmp_path / "fp32.onnx")).ir_version == 10
    assert onnx.load(str(out)).ir_version <= 10


def test_versions_name_the_onnxruntime_that_ran(monkeypatch):
    """onnxruntime-gpu installs the same module as onnxruntime: the version recorded is the imported module's,
    not whichever 'onnxruntime' distribution metadata the path also holds."""
    import sys
    import types

    from pipeline.manifest import library_versions

    monkeypatch.setitem(sys.modules, "onnxruntime", types.SimpleNamespace(__version__="1.31.1"))
    assert library_versions()["onnxruntime"] == "1.31.1"


def test_gpu_record_names_the_card_and_driver(monkeypatch, tmp_path):
    """The bench's machine record names the CUDA card the desktop-gpu rows ran on, with nvidia-smi's driver
    version; a process without a CUDA device records none."""
    import types

    import torch

    from eval import machine
    from eval.report import gpu_line

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert machine.gpu_info() is None and gpu_line(None) == ""

    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=driver_version" ] && echo 580.159.04\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i=0: types.SimpleNamespace(total_memory=81559 * 2**20))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    gpu = machine.gpu_info()
    assert gpu == {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "compute_capability": "9.0",
                   "cuda_runtime": "13.0", "driver": "580.159.04", "count": 1}
    assert gpu_line(gpu) == (" GPU: NVIDIA H100 80GB HBM3 (81,559 MiB, compute capability 9.0, "
                             "driver 580.159.04, CUDA 13.0 (PyTorch's)).")
    # nvidia-smi missing or failing: the card is still named, the driver left out
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert machine.nvidia_driver() is None
    assert "driver" not in gpu_line({**gpu, "driver": None, "count": 2}) and \
        gpu_line({**gpu, "count": 2}).endswith(", device 0 of 2).")
