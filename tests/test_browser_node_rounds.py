"""The Node cross-check's rounds (eval/browser_cross.py cross_check, web/cross_check.mjs): the teacher's fp32
file the 1/10 goal reads (the faster in Chromium) is timed in every round at its own call count, as in
Chromium's rounds, so the goal's Node figure is a median of same-round ratios against that file."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from eval import browser_cross
from eval.browser_goals import browser_goals


def _row(model: str, variant: str, fmt: str) -> dict:
    return {"model": model, "variant": variant, "format": fmt, "_path": Path(f"/runs/{model}-{variant}.{fmt}")}


def _cross_check(monkeypatch, out: dict, rows: list[dict]) -> dict:
    """cross_check on rows with Node's run replaced: {keys, rounds, file_runs} of the job it was given."""
    files = {str(r["_path"]): {"key": r["_path"].name, "path": str(r["_path"]), "inputs": {"64": {}}} for r in rows}
    seen = {}

    def run(picked, warmup, iterations, max_seconds, **kw):
        seen.update(keys=[f["key"] for f in picked], **kw)
        return {"versions": {"node": "24.19.0"},
                "runs": {rt: {"files": {f["key"]: {"64": [2.0], "round_p50s": {"64": [2.0] * 9}} for f in picked}}
                         for rt in browser_cross.RUNTIMES}}

    monkeypatch.setattr(browser_cross, "unavailable", lambda: None)
    monkeypatch.setattr(browser_cross, "run_cross_check", run)
    bench = NS(b=NS(headline_length=64, browser_iterations=10, head_to_head_rounds=9, browser_warmup=2,
                    max_seconds_per_point=1.5))
    browser_cross.cross_check(bench, out, files, rows)
    return seen


def test_the_node_cross_check_times_the_teachers_faster_file_in_every_round(monkeypatch):
    rows = [_row("student", "int8-dynamic-fastgelu", "ort"), _row("student", "optimum-int8-dynamic", "onnx"),
            _row("teacher", "fp32", "onnx"), _row("teacher", "fp32", "ort"), _row("teacher", "int8-dynamic", "ort")]
    out = {("browser-wasm", (r["model"], r["variant"], r["format"])): {"64": {"p50_ms": 1.0}} for r in rows}
    # Chromium's rounds found the teacher's .ort faster (its sweep point says otherwise: the rounds decide)
    out[("browser-wasm", ("teacher", "fp32", "onnx"))].update({"64": {"p50_ms": 70.0},
                                                            "chromium_rounds": {"length": 64, "round_p50_ms": [80.0, 81.0, 79.0]}})
    out[("browser-wasm", ("teacher", "fp32", "ort"))].update({"64": {"p50_ms": 90.0},
                                                           "chromium_rounds": {"length": 64, "round_p50_ms": [60.0, 62.0, 95.0]}})
    seen = _cross_check(monkeypatch, out, rows + rows)  # measure_browser passes each row once per browser target
    # the 1/10 goal's teacher file, not the other one or the teacher's int8 files: the goals never read them
    assert seen["keys"] == ["student-int8-dynamic-fastgelu.ort", "student-optimum-int8-dynamic.onnx",
                            "teacher-fp32.ort"]
    assert seen["rounds"] == 9 and seen["file_runs"] == {"teacher-fp32.ort": browser_cross.TEACHER_RUNS}
    assert len(out[("browser-wasm", ("teacher", "fp32", "ort"))]["cross_check"]["node-wasm"]["round_p50_ms"]) == 9
    assert "cross_check" not in out[("browser-wasm", ("teacher", "fp32", "onnx"))]
    assert "cross_check" not in out[("browser-wasm", ("teacher", "int8-dynamic", "ort"))]


def test_without_chromium_rounds_the_teachers_sweep_point_picks_its_file(monkeypatch):
    rows = [_row("student", "int8-dynamic", "ort"), _row("teacher", "fp32", "onnx"), _row("teacher", "fp32", "ort")]
    out = {("browser-wasm", (r["model"], r["variant"], r["format"])): {"64": {"p50_ms": ms}}
           for r, ms in zip(rows, (4.0, 58.0, 61.0))}
    seen = _cross_check(monkeypatch, out, rows + rows)
    assert seen["keys"] == ["student-int8-dynamic.ort", "teacher-fp32.onnx"]
    assert seen["file_runs"] == {"teacher-fp32.onnx": browser_cross.TEACHER_RUNS}


def test_the_1_10_goal_gives_its_node_ratio_against_the_teacher_file_it_reads():
    def row(model, variant, fmt, acc, chrome, node):
        entry = {"64": {"p50_ms": chrome[0]}, "chromium_rounds": {"length": 64, "round_p50_ms": chrome},
                 "cross_check": {"node-wasm": {"p50_ms": node[0], "round_p50_ms": node}}}
        return {"model": model, "variant": variant, "format": fmt, "accuracy": acc, "latency": {"browser-wasm": entry}}

    rows = [row("student", "int8-dynamic-fastgelu", "ort", 0.75, [4.0, 4.0, 4.0], [5.0, 6.0, 5.0]),
            row("teacher", "fp32", "onnx", 0.75, [80.0, 80.0, 80.0], [90.0, 90.0, 90.0]),
            row("teacher", "fp32", "ort", 0.75, [50.0, 50.0, 50.0], [60.0, 80.0, 50.0])]
    g = browser_goals(rows, 64, ["browser-wasm"])[0]
    assert g["value"] == pytest.approx(0.08) and "vs teacher fp32 .ort" in g["detail"]
    # Node's same-round ratios against the same .ort: 5/60, 6/80, 5/50 -> median 0.0833
    assert g["detail"].endswith("; cross-check in Node (same WASM build): 0.0833")


def _tiny_onnx(path: Path) -> None:
    """A model taking input_ids / attention_mask that onnxruntime-web runs in microseconds."""
    import onnx
    from onnx import TensorProto, helper

    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, "n"]) for n in ("input_ids", "attention_mask")]
    out = helper.make_tensor_value_info("logits", TensorProto.INT64, [1, "n"])
    g = helper.make_graph([helper.make_node("Add", ["input_ids", "attention_mask"], ["logits"])], "tiny", ins, [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_cross_check_mjs_times_a_file_with_its_own_runs_in_every_round(tmp_path):
    """max_seconds 0 cuts a plain file short after its first round; a file_runs file runs its count every round."""
    why = browser_cross.unavailable()
    if why:
        pytest.skip(why)
    inputs = {"4": {"input_ids": [101, 7, 8, 102], "attention_mask": [1, 1, 1, 1]}}
    files = []
    for key in ("plain", "own"):
        _tiny_onnx(tmp_path / f"{key}.onnx")
        files.append({"key": key, "path": str(tmp_path / f"{key}.onnx"), "inputs": inputs})
    doc = browser_cross.run_cross_check(files, 1, 60, 0.0, rounds=3, file_runs={"own": 4})
    wasm = doc["runs"]["node-wasm"]["files"]
    assert len(wasm["own"]["4"]) == 12 and len(wasm["own"]["round_p50s"]["4"]) == 3
    assert len(wasm["plain"]["4"]) == 20 and len(wasm["plain"]["round_p50s"]["4"]) == 1  # one round of 60 / 3


def test_the_goal_and_the_cross_check_take_the_same_teacher_file(monkeypatch):
    """Where the same-round ratios and the median round p50s would choose differently, both take the file with
    the lower median round p50, so the goal's detail has its Node figure (a re-bench once chose apart)."""
    student = [4.0, 4.0, 8.0]
    rounds = {"onnx": [50.0, 50.0, 100.0], "ort": [45.0, 60.0, 60.0]}  # ratio medians: 0.08 and 0.089
    rows = [dict(_row("student", "int8-dynamic-fastgelu", "ort"), accuracy=0.75)] + \
           [dict(_row("teacher", "fp32", fmt), accuracy=0.75) for fmt in ("onnx", "ort")]
    out = {}  # the bench's browser-wasm entries, which the report then reads as the rows' latency
    for r, ms in zip(rows, [student, rounds["onnx"], rounds["ort"]]):
        entry = {"64": {"p50_ms": ms[0]}, "chromium_rounds": {"length": 64, "round_p50_ms": ms}}
        out[("browser-wasm", (r["model"], r["variant"], r["format"]))] = entry
        r["latency"] = {"browser-wasm": entry}
    seen = _cross_check(monkeypatch, out, rows)
    assert "teacher-fp32.onnx" in seen["keys"] and "teacher-fp32.ort" not in seen["keys"]
    g = browser_goals(rows, 64, ["browser-wasm"])[0]
    assert "vs teacher fp32 .onnx" in g["detail"] and g["value"] == pytest.approx(0.08)
    assert "; cross-check in Node (same WASM build): " in g["detail"]
