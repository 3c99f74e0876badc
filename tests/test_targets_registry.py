"""The target registry and the benchmark plan: unknown names, skip reasons, which lengths run where."""
from __future__ import annotations

import pytest

from eval.plan import Point, plan_point
from eval.targets import TARGETS, get_target, unavailable
from pipeline.errors import PipelineError

LENGTHS = [16, 32, 64, 128, 256]


def _plan(target, model="teacher", variant="fp32", fmt="onnx", max_positions=512):
    return plan_point(get_target(target), {"model": model, "variant": variant, "format": fmt}, LENGTHS, 64,
                      ["fp32", "int8-dynamic"], max_positions)


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(PipelineError) as e:
        get_target("phone")
    assert "unknown target 'phone'" in str(e.value)
    for name in TARGETS:
        assert name in str(e.value)


def test_every_target_names_runtime_provider_threads_precision_format():
    for t in TARGETS.values():
        assert t.runtime and t.provider and t.precision and t.formats and t.threads >= 0
    assert get_target("mobile-cpu").threads == 1 and get_target("mobile-cpu").proxy
    assert get_target("host-cpu").threads == 0  # all cores


def test_desktop_gpu_without_cuda_is_skipped_with_one_line(monkeypatch):
    import eval.targets as T

    monkeypatch.setattr(T, "cuda_backend", lambda: None)
    why = unavailable(get_target("desktop-gpu"))
    assert why.startswith("no CUDA device on this machine") and "\n" not in why
    assert unavailable(get_target("host-cpu")) is None
    monkeypatch.setattr(T, "cuda_backend", lambda: "torch-cuda")
    assert unavailable(get_target("desktop-gpu")) is None


def test_sweep_variants_run_every_length_and_throughput_on_host_and_mobile():
    p = _plan("host-cpu")
    assert isinstance(p, Point) and p.lengths == LENGTHS and p.throughput
    p = _plan("mobile-cpu", fmt="ort", variant="int8-dynamic")
    assert p.lengths == LENGTHS and p.throughput  # the batch-32 workload on one core
    p = _plan("mobile-cpu", variant="optimum-int8-dynamic")
    assert p.lengths == [64] and p.throughput  # Optimum's file too: the same workload, head to head
    p = _plan("mobile-cpu", fmt="ort", variant="int8-static")
    assert not p.throughput  # outside the sweep variants: batch 1 only (bench time)


def test_desktop_gpu_runs_float_files_and_the_batch_workload():
    """A GPU runs the fp32, fused and fp16 files and Optimum's fp32 peer; batch 32 is where it pays off, so it
    times the throughput workload too. int8 files stay on the CPU targets."""
    p = _plan("desktop-gpu")
    assert p.lengths == LENGTHS and p.throughput
    for variant in ("optimized", "fp16", "optimum-fp32"):
        assert isinstance(_plan("desktop-gpu", variant=variant), Point), variant
    fp16 = _plan("desktop-gpu", variant="fp16")  # the GPU's own precision: every length, and batch 32
    assert fp16.lengths == LENGTHS and fp16.throughput
    assert _plan("desktop-gpu", variant="optimum-fp32").throughput  # the peer, at the same workloads
    assert "CPU kernels" in _plan("desktop-gpu", variant="optimum-int8-dynamic")


def test_other_variants_run_the_headline_length_with_reasons_for_the_rest():
    p = _plan("host-cpu", variant="int8-static")
    assert p.lengths == [64] and not p.throughput
    assert set(p.skipped_lengths) == {"16", "32", "128", "256"}
    assert "sweep" in p.skipped_lengths["16"]
    p = _plan("host-cpu", fmt="pytorch")
    assert p.lengths == [64] and p.throughput and "PyTorch eager" in p.skipped_lengths["256"]
    p = _plan("mobile-cpu", variant="optimum-int8-dynamic")
    assert p.lengths == [64] and "Optimum" in p.skipped_lengths["16"]


def test_position_table_limits_lengths():
    p = _plan("host-cpu", model="student", max_positions=128)
    assert p.lengths == [16, 32, 64, 128]
    assert p.skipped_lengths["256"] == "longer than the model's position table (128 tokens)"
    assert "no configured length" in _plan("host-cpu", max_positions=8)


@pytest.mark.parametrize("target, variant, fmt, words", [
    ("host-cpu", "fp16", "onnx", "fp16"),
    ("host-cpu", "fp32", "ort", "mobile-cpu"),
    ("host-cpu", "fp16", "coreml", "Core ML"),
    ("mobile-cpu", "fp32", "onnx", ".ort"),
    ("mobile-cpu", "fp32", "pytorch", "PyTorch"),
    ("edge-npu", "int8-dynamic", "onnx", "static"),
    ("edge-npu", "fp32", "pytorch", "PyTorch"),
    ("desktop-gpu", "int8-dynamic", "onnx", "CPU kernels"),
])
def test_skips_say_why(target, variant, fmt, words):
    why = _plan(target, variant=variant, fmt=fmt)
    assert isinstance(why, str) and words in why


def test_edge_npu_takes_static_int8_and_core_ml():
    assert isinstance(_plan("edge-npu", variant="int8-static"), Point)
    for v in ("fp16", "int8", "palettized-4bit"):
        assert isinstance(_plan("edge-npu", variant=v, fmt="coreml"), Point)


@pytest.mark.parametrize("target", ["browser-wasm", "browser-wasm-mt"])
def test_browser_sweeps_the_teachers_fp32_files_and_every_student_sweep_variant(target):
    """In the browser the teacher is the reference: its fp32 files are swept, its other variants timed at the
    headline only, with the reason; the students keep the sweep. The native targets sweep the teacher as before."""
    for fmt in ("onnx", "ort"):
        assert _plan(target, "teacher", "fp32", fmt).lengths == LENGTHS
        p = _plan(target, "teacher", "int8-dynamic", fmt)
        assert p.lengths == [64] and set(p.skipped_lengths) == {"16", "32", "128", "256"}
        assert "sweep the teacher's fp32 files only" in p.skipped_lengths["16"]
        assert _plan(target, "student", "int8-dynamic", fmt).lengths == LENGTHS
        assert _plan(target, "lstm", "int8-dynamic", fmt).lengths == LENGTHS
    assert _plan("host-cpu", "teacher", "int8-dynamic").lengths == LENGTHS
