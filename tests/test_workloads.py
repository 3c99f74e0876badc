"""Which file serves which workload (eval/workloads.py): the rule on synthetic rows, the report's table, the
batch-32 peer goals, and the bundle's metadata entry (export/bundle.py). No timing: the numbers are written."""
from __future__ import annotations

import pytest

from eval.report import _head_to_head, _workloads
from eval.results import validate_results
from eval.workloads import choose_workloads, workloads
from export.bundle import bundle_workloads
from tests.test_report_render import classified


def _pt(ms: float) -> dict:
    return {"p50_ms": ms, "p90_ms": ms * 1.1, "p99_ms": ms * 1.2, "mean_ms": ms, "min_ms": ms * 0.9, "iterations": 10}


def _row(variant, fmt, acc, target, b1, b32=None, **extra):
    entry = {"64": _pt(b1)}
    if b32:
        entry["throughput_b32"] = {**_pt(32 / b32 * 1e3), "batch": 32, "seq_len": 64, "sequences_per_s": b32}
    return {"model": extra.pop("model", "student"), "variant": variant, "format": fmt, "accuracy": acc,
            "size_bytes": 100, "file": f"export/student/{variant}.{fmt}", "flops_per_seq": 1,
            "latency": {target: entry}, **extra}


# batch 1: int8-dynamic is fastest; batch 32: optimized has the most sequences/s; int8-static is fastest at
# both but 2 points below the best; Optimum's and the teacher's files never serve; a failed file neither
ROWS = [_row("optimized", "ort", 0.80, "mobile-cpu", 3.0, 500),
        _row("int8-dynamic", "ort", 0.795, "mobile-cpu", 2.0, 450),
        _row("int8-static", "ort", 0.78, "mobile-cpu", 1.0, 900),
        _row("optimum-fp32", "onnx", 0.80, "mobile-cpu", 0.5, 2000, source="optimum"),
        _row("fp32", "ort", 0.80, "mobile-cpu", 0.4, 3000, model="teacher"),
        _row("fp16", "ort", 0.80, "mobile-cpu", 0.3, 4000, status="failed"),
        _row("fp32", "onnx", 0.80, "host-cpu", 1.5, 1000)]


def test_batch1_is_fastest_and_batch32_most_throughput_within_the_window():
    w = choose_workloads(ROWS, "mobile-cpu", 0.01, 64, 32)
    assert (w["batch1"]["variant"], w["batch1"]["format"], w["batch1"]["p50_ms"]) == ("int8-dynamic", "ort", 2.0)
    assert (w["batch32"]["variant"], w["batch32"]["sequences_per_s"]) == ("optimized", 500)
    assert w["batch32"]["batch"] == 32 and w["batch1"]["batch"] == 1
    assert "within 0.010 of the best (0.8000)" in w["batch1"]["rule"] and "sequences/s" in w["batch32"]["rule"]
    # the next file in the window and the pick's lead over it, as a fraction
    assert w["batch1"]["runner_up"] == {"variant": "optimized", "format": "ort", "p50_ms": 3.0, "lead": pytest.approx(0.5)}
    assert w["batch32"]["runner_up"] == {"variant": "int8-dynamic", "format": "ort", "sequences_per_s": 450,
                                         "lead": pytest.approx(500 / 450 - 1)}
    assert "runner_up" not in choose_workloads(ROWS, "host-cpu", 0.01, 64, 32)["batch1"]  # one file: none
    # a wider window lets int8-static in: it wins both
    w = choose_workloads(ROWS, "mobile-cpu", 0.03, 64, 32)
    assert w["batch1"]["variant"] == w["batch32"]["variant"] == "int8-static"
    # host-cpu takes the .onnx rows
    assert choose_workloads(ROWS, "host-cpu", 0.01, 64, 32)["batch1"]["format"] == "onnx"


def test_a_target_that_could_not_run_gives_its_reason():
    """No GPU here: the report's workload rows said "no batch-1 time for the files", as if the files had failed."""
    skipped = {"status": "skipped", "reason": "no CUDA device on this machine"}
    rows = [{**_row(v, "onnx", 0.80, "host-cpu", 1.0, 900), "latency": {"desktop-gpu": skipped}} for v in ("fp32", "fp16")]
    w = workloads(rows, ["desktop-gpu"], 0.01, 64, 32)["desktop-gpu"]
    assert w == {k: {"status": "not measured", "reason": "desktop-gpu did not run here: no CUDA device on this machine"}
                 for k in ("batch1", "batch32")}
    rows[1]["latency"]["desktop-gpu"] = {"64": _pt(1.0)}  # one file timed: the rule picks among what ran
    assert workloads(rows, ["desktop-gpu"], 0.01, 64, 32)["desktop-gpu"]["batch1"]["variant"] == "fp16"


def test_desktop_gpu_serves_onnx_files():
    rows = [_row("fp32", "onnx", 0.80, "desktop-gpu", 1.1, 9000), _row("fp16", "onnx", 0.80, "desktop-gpu", 1.2, 20000),
            _row("int8-dynamic", "ort", 0.80, "desktop-gpu", 0.1, 90000)]  # a phone file: never a GPU pick
    w = workloads(rows, ["desktop-gpu"], 0.01, 64, 32)["desktop-gpu"]
    assert (w["batch1"]["variant"], w["batch1"]["format"]) == ("fp32", "onnx")
    assert (w["batch32"]["variant"], w["batch32"]["sequences_per_s"]) == ("fp16", 20000)


def test_unmeasured_workloads_say_why():
    no_b32 = [_row("optimized", "ort", 0.8, "mobile-cpu", 3.0)]
    w = choose_workloads(no_b32, "mobile-cpu", 0.01, 64, 32)
    assert w["batch1"]["variant"] == "optimized"
    assert w["batch32"]["status"] == "not measured" and "batch-32" in w["batch32"]["reason"]
    w = choose_workloads([], "mobile-cpu", 0.01, 64, 32)
    assert all(v["status"] == "not measured" and ".ort" in v["reason"] for v in w.values())
    # only the targets that time both workloads get an entry
    assert set(workloads(ROWS, ["host-cpu", "mobile-cpu", "edge-npu"], 0.01, 64, 32)) == {"host-cpu", "mobile-cpu"}


def test_report_table_names_the_file_per_workload():
    doc = {"machine": {}, "versions": {}, "threads": {"mobile-cpu": 1, "host-cpu": 2},
           "targets": {"mobile-cpu": {}, "host-cpu": {}}, "plan": {"headline_length": 64, "throughput_batch": 32},
           "seconds": {"total": 1.0}, "rows": ROWS, "quality_metric": "accuracy"}
    res = classified(doc, 0.01)
    assert res["workloads"]["mobile-cpu"]["batch32"]["variant"] == "optimized"
    blocks = _workloads(res)
    assert blocks[0] == ("h2", "Which file for which workload")
    table = blocks[-1][2]
    assert ["mobile-cpu", "batch 1 latency", "int8-dynamic ort", "export/student/int8-dynamic.ort", "0.7950",
            "2.000 ms p50", "optimized ort: 3.000 ms (+50.0%)"] in table
    assert ["mobile-cpu", "batch 32 throughput", "optimized ort", "export/student/optimized.ort", "0.8000",
            "500.0 seq/s (64.0 ms per batch)", "int8-dynamic ort: 450.0 seq/s (+11.1%)"] in table
    # host-cpu has one .onnx file: no runner-up
    assert ["host-cpu", "batch 1 latency", "fp32 onnx", "export/student/fp32.onnx", "0.8000", "1.500 ms p50", "-"] in table
    assert "read such a pick as a tie" in blocks[1][1]
    assert _workloads({"workloads": {}}) == []


def _h2h(batch, ratio, variant="optimized", target="mobile-cpu"):
    return {"model": "student", "target": target, "seq_len": 64, "batch": batch, "rounds": 5,
            "ours": {"variant": variant, "format": "ort"}, "peer": {"variant": "optimum-fp32", "format": "onnx"},
            "ratio": ratio, "ratio_min": ratio * 0.9, "ratio_max": ratio * 1.1, "ours_p50_ms": 1.0,
            "peer_p50_ms": 1.0 / ratio, "iterations_per_round": 100 if batch == 1 else 6}


def test_batch32_goals_and_head_to_head_rows_are_kept_apart():
    doc = {"machine": {}, "versions": {}, "threads": {"mobile-cpu": 1}, "targets": {},
           "plan": {"headline_length": 64, "throughput_batch": 32}, "seconds": {"total": 1.0},
           "rows": ROWS[:4], "quality_metric": "accuracy", "head_to_head": [_h2h(1, 0.7), _h2h(32, 0.9)]}
    res = classified(doc)
    assert not [p for p in validate_results(res) if "head_to_head" in p]
    goals = {g["goal"]: g for g in res["goals"] if "Optimum" in g["goal"] and "mobile-cpu" in g["goal"]}
    assert goals["our student optimized at most 0.8x Optimum's time on mobile-cpu at 64 tokens"]["value"] == 0.7
    assert goals["our student optimized at most 0.8x Optimum's time on mobile-cpu at 64 tokens"]["met"] is True
    # 0.9 is faster than Optimum, but not by the margin the goal asks for
    assert goals["our student optimized at most 0.8x Optimum's time on mobile-cpu at 64 tokens, batch 32"]["met"] is False
    assert goals["our student optimized at most 0.8x Optimum's time on mobile-cpu at 64 tokens, batch 32"]["value"] == 0.9
    # int8: no head to head, so the throughput rows stand in (Optimum has none for int8 here: unmeasured)
    assert goals["our student int8-dynamic at most 0.8x Optimum's time on mobile-cpu at 64 tokens, batch 32"]["value"] is None
    # without a paired batch-32 entry the throughput rows give the ratio: Optimum 2000 seq/s / ours 500
    doc["head_to_head"] = [_h2h(1, 0.7)]
    g = next(g for g in classified(doc)["goals"] if g["goal"].endswith("mobile-cpu at 64 tokens, batch 32")
             and "optimized" in g["goal"])
    assert g["value"] == pytest.approx(4.0) and g["met"] is False and "sequences/s" in g["detail"]
    table = _head_to_head({"head_to_head": [_h2h(1, 0.7), _h2h(32, 0.9)]})[-1][2]
    assert [row[1] for row in table] == ["1", "32"]


def test_bundle_names_the_shipped_file_or_the_run_file():
    results = {"plan": {"headline_length": 64, "throughput_batch": 32}, "rows": ROWS}
    w = bundle_workloads(results, 0.01, "student", "int8-dynamic", "model/student-int8-dynamic.ort")
    assert w["batch1"]["in_bundle"] is True and w["batch1"]["file"] == "model/student-int8-dynamic.ort"
    assert w["batch32"]["in_bundle"] is False and w["batch32"]["run_file"] == "export/student/optimized.ort"
    assert "file" not in w["batch32"] and w["batch32"]["target"] == "mobile-cpu"
    w = bundle_workloads({"plan": {"headline_length": 64, "throughput_batch": 32}, "rows": []}, 0.01, "student",
                         "int8-dynamic", "model/x.ort")
    assert w["batch32"]["status"] == "not measured" and w["batch32"]["reason"]


@pytest.mark.parametrize("change, message", [
    (lambda w: w.update(batch1="fast"), "workloads.batch1 must be an object"),
    (lambda w: w.update(fast={}), "workloads.fast: a workload is named batch<N>"),
    (lambda w: w["batch1"].update(p50_ms="2 ms"), "workloads.batch1.p50_ms must be a positive number"),
    (lambda w: w["batch32"].update(sequences_per_s=-1), "workloads.batch32.sequences_per_s must be a positive"),
    (lambda w: w["batch32"].update(batch=1), "workloads.batch32.batch must be 32"),
    (lambda w: w["batch1"].update(accuracy=7), r"workloads.batch1.accuracy must be a number in \[0, 1\]"),
    (lambda w: w["batch1"].pop("rule"), "workloads.batch1 needs variant, format, target and rule"),
    (lambda w: w["batch1"].update(in_bundle="yes"), "workloads.batch1.in_bundle must be true or false"),
    (lambda w: w["batch1"].update(file="model/other.ort"), "workloads.batch1.file = 'model/other.ort' is not in"),
    (lambda w: w["batch32"].pop("run_file"), "workloads.batch32: a file not in the bundle needs its run_file"),
    (lambda w: w.update(batch32={"status": "not measured"}), "workloads.batch32: an unmeasured workload needs"),
])
def test_malformed_workloads_are_one_clear_error(tmp_path, change, message):
    from pipeline.errors import PipelineError
    from pipeline.verify_bundle_meta import check_workloads

    results = {"plan": {"headline_length": 64, "throughput_batch": 32}, "rows": ROWS}
    meta = {"files": {"model/student-int8-dynamic.ort": {"sha256": "0" * 64, "bytes": 1}},
            "workloads": bundle_workloads(results, 0.01, "student", "int8-dynamic", "model/student-int8-dynamic.ort")}
    check_workloads(tmp_path, meta)  # as written: accepted
    change(meta["workloads"])
    with pytest.raises(PipelineError, match=message) as e:
        check_workloads(tmp_path, meta)
    assert "\n" not in str(e.value) and "make bundle" in str(e.value)
