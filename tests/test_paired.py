"""Head-to-head timing (eval/paired.py): which files are paired on which target, the alternating
rounds, and how the goals and the schema read the result. Timing is faked where a value is asserted."""
from __future__ import annotations

import pytest

import eval.paired as P
from eval.latency import Plan
from eval.results import validate_results
from tests.test_report_render import classified


def _r(variant, fmt, **extra):
    return {"model": "student", "variant": variant, "format": fmt, "_path": f"/x/{variant}.{fmt}",
            "file": f"x/{variant}.{fmt}", **extra}


ROWS = [_r("fp32", "onnx"), _r("fp32", "ort"), _r("optimized", "onnx"), _r("optimized", "ort"),
        _r("int8-dynamic", "onnx"), _r("int8-dynamic", "ort"), _r("optimum-fp32", "onnx", source="optimum"),
        _r("optimum-int8-dynamic", "onnx", source="optimum"), _r("fp16", "onnx")]


def test_pairs_take_what_each_target_runs():
    # fp32: the optimized file is ours (the plain export is Optimum's graph); on the phone target ours is
    # the .ort that ships, Optimum's is its .onnx
    host = [(a["variant"], a["format"], b["variant"]) for a, b in P.pair_rows(ROWS, "host-cpu")]
    assert host == [("optimized", "onnx", "optimum-fp32"), ("int8-dynamic", "onnx", "optimum-int8-dynamic")]
    mobile = [(a["variant"], a["format"], b["format"]) for a, b in P.pair_rows(ROWS, "mobile-cpu")]
    assert mobile == [("optimized", "ort", "onnx"), ("int8-dynamic", "ort", "onnx")]
    no_peer = [r for r in ROWS if r.get("source") != "optimum"]
    assert P.pair_rows(no_peer, "host-cpu") == []
    # a config without "optimized" (or a model it does not apply to): the plain fp32 file stands in
    plain = [r for r in ROWS if r["variant"] != "optimized"]
    assert [a["variant"] for a, _ in P.pair_rows(plain, "mobile-cpu")] == ["fp32", "int8-dynamic"]
    missing = [dict(r, missing=True) if r["variant"] in ("int8-dynamic", "optimized") else r for r in ROWS]
    assert [a["variant"] for a, _ in P.pair_rows(missing, "mobile-cpu")] == ["fp32"]


def test_alternating_rounds_cancel_drift(monkeypatch):
    """Two equally fast files on a machine that slows down 5% per timed block: timed A-block then B-block
    every round, B would always look slower; alternating the order makes the median ratio ~1."""
    order, block = [], [0]

    def fake_time_calls(fn, plan):
        order.append(fn())
        block[0] += 1
        return [1.0 * (1 + 0.05 * block[0])] * plan.iterations

    monkeypatch.setattr(P.L, "time_calls", fake_time_calls)
    out = P.alternate(lambda: "a", lambda: "b", 6, Plan(0, 5, 1.0))
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert out["rounds"] == 6 and len(out["round_ratios"]) == 6
    assert [r < 1 for r in out["round_ratios"]] == [True, False] * 3  # ours first: ours looks faster, and back
    assert out["ratio_min"] <= out["ratio"] <= out["ratio_max"]
    assert out["ratio"] == pytest.approx(1.0, abs=0.01)


def test_alternate_measures_real_calls():
    import time

    out = P.alternate(lambda: time.sleep(0.002), lambda: None, 3, Plan(1, 5, 1.0, 5))
    assert out["ours_p50_ms"] >= 2.0 > out["peer_p50_ms"] and out["ratio"] > 1.0


def _doc(head_to_head):
    lat = {"64": {"p50_ms": 2.0, "p90_ms": 2.1, "p99_ms": 2.2, "mean_ms": 2.0, "min_ms": 1.9, "iterations": 30}}
    rows = [{"model": "student", "variant": v, "format": "onnx", "accuracy": 0.8, "size_bytes": 1, "flops_per_seq": 1,
             "latency": {"host-cpu": lat}} for v in ("fp32", "optimum-fp32")]
    return {"machine": {}, "versions": {}, "threads": {"host-cpu": 2}, "targets": {},
            "plan": {"headline_length": 64}, "seconds": {"total": 10.0}, "rows": rows, "head_to_head": head_to_head}


def _h2h(ratio, lo, hi, **extra):
    return {"model": "student", "target": "host-cpu", "seq_len": 64, "ours": {"variant": "fp32", "format": "onnx"},
            "peer": {"variant": "optimum-fp32", "format": "onnx"}, "rounds": 9, "ratio": ratio, "ratio_min": lo,
            "ratio_max": hi, "ours_p50_ms": 1.9, "peer_p50_ms": 2.0, **extra}


def test_goal_reads_the_head_to_head_ratio_over_the_sweep():
    # _doc has no optimized row: the fp32 goal is the plain file's
    res = classified(_doc([_h2h(0.75, 0.7, 0.81)]))
    assert validate_results(res) == []
    goal = next(g for g in res["goals"] if g["goal"].startswith("our student fp32") and "host-cpu" in g["goal"])
    assert goal["value"] == 0.75 and goal["met"] is True and "alternating-round" in goal["detail"]
    # without a head-to-head entry the goal falls back to the sweep's p50s (2.0 / 2.0)
    res = classified(_doc([]))
    goal = next(g for g in res["goals"] if g["goal"].startswith("our student fp32") and "host-cpu" in g["goal"])
    assert goal["value"] == 1.0 and goal["met"] is False and "sweep" in goal["detail"]  # a tie is no win


def test_schema_rejects_broken_comparisons():
    assert any("outside its rounds' range" in p for p in validate_results(classified(_doc([_h2h(1.2, 0.9, 1.1)]))))
    bad = _h2h(None, None, None)
    assert any("needs ratio" in p for p in validate_results(classified(_doc([bad]))))
    failed = {k: v for k, v in _h2h(1.0, 1.0, 1.0).items() if not k.startswith("ratio")}
    assert validate_results(classified(_doc([dict(failed, status="failed", reason="boom")]))) == []
    assert any("needs its reason" in p for p in validate_results(classified(_doc([dict(failed, status="failed")]))))


def test_fp32_goal_is_the_optimized_file_when_there_is_one():
    doc = _doc([_h2h(1.03, 0.99, 1.08), _h2h(0.9, 0.85, 0.95, ours={"variant": "optimized", "format": "onnx"})])
    doc["rows"].append(dict(doc["rows"][0], variant="optimized"))
    goals = [g for g in classified(doc)["goals"] if "Optimum" in g["goal"] and "host-cpu" in g["goal"]]
    assert [g["goal"].split(" at most")[0] for g in goals] == ["our student optimized", "our student int8-dynamic"]
    assert goals[0]["value"] == 0.9 and goals[0]["met"] is False  # faster, but not by the 0.8 margin
    assert goals[1]["value"] is None and goals[1]["met"] is None  # no int8 rows: listed, not measured


def test_report_says_why_the_plain_fp32_file_is_not_paired():
    from eval.report import _head_to_head

    def text(pairs):
        return " ".join(b[1] for b in _head_to_head({"head_to_head": pairs}) if b[0] == "p")

    opt = _h2h(0.9, 0.85, 0.95, ours={"variant": "optimized", "format": "onnx"})
    assert "same torch.onnx export Optimum writes" in text([opt])
    assert "same torch.onnx export" not in text([_h2h(1.0, 0.95, 1.05)])  # plain fp32 paired: no such claim
    # with the [CLS]-only last layer ours is not Optimum's export: the text says what differs and what it means
    rows = [{"model": "student", "variant": "fp32", "format": "onnx", "details": {"cls_only_last_layer": True}}]
    cls = " ".join(b[1] for b in _head_to_head({"head_to_head": [opt], "rows": rows}) if b[0] == "p")
    assert "same torch.onnx export" not in cls and "Optimum's torch.onnx export but for its last layer" in cls
    assert "part of each ratio is that work saved, not faster kernels" in cls


def test_rounds_of_several_files_go_forward_then_backward(monkeypatch):
    order = []

    def fake_time_calls(fn, plan):
        order.append(fn())
        return [1.0]

    monkeypatch.setattr(P.L, "time_calls", fake_time_calls)
    p50s = P.round_p50s([lambda: "t", lambda: "s1", lambda: "s2"], 3, [Plan(0, 1, 1.0)] * 3)
    assert order == ["t", "s1", "s2", "s2", "s1", "t", "t", "s1", "s2"]
    assert p50s == [[1.0] * 3] * 3


def test_a_pause_before_each_turn_keeps_the_last_sessions_spinning_workers_off_the_next_file(monkeypatch):
    """A multi-threaded ONNX Runtime session keeps its workers spinning for a while after its last call, so the
    file timed right after a switch reads slow (1.5-1.7x on the 2-core host, batch 32) and the same-round
    ratios alternate with the order. A pause before each turn (settle_for(threads > 1)) lets them stop."""
    state = {"last": None, "slept": False}

    def fake_time_calls(fn, plan):
        name, ms = fn()
        slow = 1.6 if state["last"] not in (None, name) and not state["slept"] else 1.0
        state.update(last=name, slept=False)
        return [ms * slow] * 3

    monkeypatch.setattr(P.L, "time_calls", fake_time_calls)
    monkeypatch.setattr(P.time, "sleep", lambda s: state.update(slept=s == P.SETTLE_S))
    ours, peer, plan = (lambda: ("ours", 10.0)), (lambda: ("peer", 14.0)), Plan(1, 6, 1.5, 3)
    raw = P.alternate(ours, peer, 9, plan)
    assert raw["round_ratios"][:2] == pytest.approx([10 / 22.4, 16 / 14])  # the second file of a round pays
    state["last"] = None
    settled = P.alternate(ours, peer, 9, plan, P.settle_for(2))
    assert settled["round_ratios"] == pytest.approx([10 / 14] * 9)
    assert P.settle_for(1) == 0.0  # one thread: no workers to wait for


class _FakeBench:
    """What teacher_rounds uses of eval.bench.Bench: the plan, inputs and a runner per row."""

    def __init__(self, speed):
        from types import SimpleNamespace

        self.b = SimpleNamespace(headline_length=64, warmup=0, iterations=4, max_seconds_per_point=1.5, min_iterations=2,
                                 sweep_variants=["fp32", "int8-dynamic"])
        self.speed, self.opened = speed, []

    def inputs(self, model, n, batch):
        return (model, n, batch)

    def runner(self, t, row, threads):
        self.opened.append((row["model"], row["variant"], row["format"], threads))
        return (lambda *inputs: lambda: self.speed(row["variant"])), "CPUExecutionProvider"


def _teacher_rows():
    return [dict(_r("fp32", "ort"), model="teacher"), dict(_r("fp32", "onnx"), model="teacher"),
            _r("int8-dynamic", "ort"), _r("int8-static", "ort"), _r("int8-dynamic", "onnx"),
            _r("int8-dynamic-fastgelu", "ort"), _r("fp32", "ort")]


def test_students_and_teacher_share_rounds_and_a_phase_moves_them_alike(monkeypatch):
    """The machine runs at one speed for two rounds and 1.6x slower for the next two: every file of a round
    is timed in the same phase, so each round's ratio, and the goal, stays the files' own ratio."""
    import eval.targets as T

    calls = [0]
    per_round = 4  # teacher, int8-dynamic, int8-static, fp32

    def fake_time_calls(fn, plan):
        slow = 1.6 if (calls[0] // per_round) % 4 >= 2 else 1.0
        calls[0] += 1
        return [fn() * slow] * 3

    monkeypatch.setattr(P.L, "time_calls", fake_time_calls)
    bench = _FakeBench({"fp32": 20.0, "int8-dynamic": 1.1, "int8-static": 1.5}.get)
    [entry] = P.teacher_rounds(bench, _teacher_rows(), [T.get_target("mobile-cpu")], 8)
    assert [o[:3] for o in bench.opened] == [("teacher", "fp32", "ort"), ("student", "int8-dynamic", "ort"),
                                             ("student", "int8-static", "ort"),
                                             ("student", "fp32", "ort")]  # not the browser-only file
    assert all(o[3] == 1 for o in bench.opened)  # mobile-cpu's one thread
    assert entry["rounds"] == 8 and entry["teacher"]["file"] == "x/fp32.ort"
    assert entry["teacher_round_p50_ms"] == [20.0, 20.0, 32.0, 32.0] * 2
    dyn, static, fp32 = entry["students"]
    assert fp32["variant"] == "fp32" and fp32["ratio"] == pytest.approx(1.0)  # timed, but not the goal's file
    assert dyn["round_p50_ms"] == pytest.approx([1.1, 1.1, 1.76, 1.76] * 2)
    assert dyn["variant"] == "int8-dynamic" and dyn["ratio"] == pytest.approx(0.055)
    assert dyn["ratio_min"] == pytest.approx(dyn["ratio_max"])  # the phase hit every file of its rounds
    assert static["ratio"] == pytest.approx(0.075) and len(static["round_ratios"]) == 8
    res = classified({**_doc([]), "teacher_rounds": [entry]})
    assert validate_results(res) == [] and res["teacher_rounds"] == [entry]
    g = next(g for g in res["goals"] if g["goal"].startswith("student int8 p50 <= 1/10"))
    assert g["value"] == pytest.approx(0.055) and g["met"] is True
    assert "student int8-dynamic .ort vs teacher fp32 .ort: median of 8 interleaved-round p50 ratios" in g["detail"]


def test_host_cpu_times_its_onnx_files_in_rounds_of_their_own(monkeypatch):
    """host-cpu's batch-1 pick reads rounds too: the teacher's fp32 .onnx and the student .onnx files it times, on
    its threads, in an entry of their own; mobile-cpu's entry (the goal's) is unchanged beside it, and a target
    without its teacher file gets no entry."""
    import eval.targets as T

    monkeypatch.setattr(P.L, "time_calls", lambda fn, plan: [fn()] * 3)
    sleeps = []
    monkeypatch.setattr(P.time, "sleep", sleeps.append)
    bench = _FakeBench({"fp32": 8.0, "int8-dynamic": 0.6, "int8-static": 0.9}.get)
    host, mobile = T.get_target("host-cpu"), T.get_target("mobile-cpu")
    peer = _r("optimum-int8-dynamic", "onnx", source="optimum")  # compared in the head to head, not here
    got = P.teacher_rounds(bench, _teacher_rows() + [peer], [host, mobile], 4)
    assert [(e["target"], e["teacher"]["format"], e["threads"]) for e in got] == [("host-cpu", "onnx", 2),
                                                                               ("mobile-cpu", "ort", 1)]
    assert [(s["variant"], s["format"]) for s in got[0]["students"]] == [("int8-dynamic", "onnx")]
    assert got[0]["students"][0]["ratio"] == pytest.approx(0.075)
    assert ("teacher", "fp32", "onnx", 2) in bench.opened
    assert sleeps == [P.SETTLE_S] * 4 * 2  # host-cpu's 2 threads: before each of its 2 files' turns; mobile-cpu none
    res = classified({**_doc([]), "teacher_rounds": got})
    g = next(g for g in res["goals"] if g["goal"].startswith("student int8 p50 <= 1/10"))
    assert g["value"] == pytest.approx(0.6 / 8.0) and ".ort vs teacher fp32 .ort" in g["detail"]
    no_onnx_teacher = [r for r in _teacher_rows() if (r["model"], r["format"]) != ("teacher", "onnx")]
    assert [e["target"] for e in P.teacher_rounds(bench, no_onnx_teacher, [host, mobile], 4)] == ["mobile-cpu"]


def test_the_bundle_file_is_chosen_by_the_rounds_not_by_a_slow_sweep_point(monkeypatch):
    """The demo run of 2026-11-28 on the Zen 4 host: the sweep read 0.89 ms for the student's int8-dynamic .ort
    (a slow phase of the machine) against 0.83 for int8-static, so the bundle shipped int8-static; timed in the
    same interleaved rounds they read 0.61 and 0.83 ms. The rounds go onto the rows; the app bundle's choice and
    the batch-1 workload pick read them, and say so."""
    import eval.targets as T
    from eval.workloads import choose_workloads
    from export.bundle import choose

    monkeypatch.setattr(P.L, "time_calls", lambda fn, plan: [fn()] * 3)
    speed = {"fp32": 14.66, "optimized": 1.40, "int8-dynamic": 0.61, "int8-static": 0.825}
    sweep = {"fp32": 1.24, "optimized": 1.40, "int8-dynamic": 0.89, "int8-static": 0.83}
    bench = _FakeBench(lambda v: speed[v] if v != "fp32" else 1.24)
    rows = [dict(_r("fp32", "ort"), model="teacher")] + [_r(v, "ort") for v in sweep]
    [entry] = P.teacher_rounds(bench, rows, [T.get_target("mobile-cpu")], 5)
    entry["teacher_round_p50_ms"] = [14.66] * 5  # the fake ran the teacher at the student's fp32 speed
    doc_rows = [{"model": r["model"], "variant": r["variant"], "format": "ort", "file": r["file"],
                 "accuracy": {"int8-dynamic": 0.7500}.get(r["variant"], 0.7545), "size_bytes": 1,
                 "latency": {"mobile-cpu": {"64": {"p50_ms": 14.66 if r["model"] == "teacher" else sweep[r["variant"]]}}}}
                for r in rows]
    P.rounds_onto_rows(doc_rows, entry)
    assert all(r["latency"]["mobile-cpu"]["rounds"]["length"] == 64 for r in doc_rows)
    results = {"plan": {"headline_length": 64}, "targets": {"mobile-cpu": {"proxy": "host"}}, "rows": doc_rows}
    students = [dict(r, status="passed") for r in doc_rows if r["model"] == "student"]
    row = choose(students, results, "auto", "auto", 0.01, "c.toml")
    assert row["variant"] == "int8-dynamic"  # by the sweep's p50s it would be int8-static
    assert "interleaved rounds" in row["choice"]["rule"] and "length sweep" not in row["choice"]["rule"]
    picked = {c["variant"]: c for c in row["choice"]["candidates"]}
    assert picked["int8-dynamic"]["mobile-cpu_p50_from"] == "interleaved rounds"
    assert picked["int8-dynamic"]["mobile-cpu_p50_ms"] < picked["int8-static"]["mobile-cpu_p50_ms"]
    w = choose_workloads(doc_rows, "mobile-cpu", 0.01, 64, 32)["batch1"]
    assert (w["variant"], w["p50_from"]) == ("int8-dynamic", "interleaved rounds")
    assert w["runner_up"]["variant"] == "int8-static"
    # a skipped entry gets no rounds; the sweep stays the source there
    skipped = {"model": "student", "variant": "fp32", "format": "ort",
               "latency": {"mobile-cpu": {"status": "skipped", "reason": "x"}}}
    P.rounds_onto_rows([skipped], entry)
    assert "rounds" not in skipped["latency"]["mobile-cpu"]


def test_without_rounds_the_teacher_goal_reads_the_sweep(monkeypatch):
    import eval.targets as T

    bench = _FakeBench({"fp32": 20.0, "int8-dynamic": 1.1}.get)
    assert P.teacher_rounds(bench, _teacher_rows(), [T.get_target("browser-wasm")], 8) == []  # none of its kind
    assert P.teacher_rounds(bench, _teacher_rows(), [T.get_target("mobile-cpu")], 0) == []  # rounds off
    no_teacher = [r for r in _teacher_rows() if r["model"] != "teacher"]
    assert P.teacher_rounds(bench, no_teacher, [T.get_target("mobile-cpu"), T.get_target("host-cpu")], 8) == []
    assert bench.opened == []

    def lat(ms):
        return {"mobile-cpu": {"64": {"p50_ms": ms, "p90_ms": ms, "p99_ms": ms, "mean_ms": ms, "min_ms": ms,
                                      "iterations": 30}}}

    doc = _doc([])
    doc["threads"]["mobile-cpu"] = 1
    for r in doc["rows"]:
        r["latency"]["mobile-cpu"] = {"status": "skipped", "reason": "not in this test"}
    doc["rows"] += [{"model": m, "variant": v, "format": "ort", "accuracy": 0.8, "size_bytes": 1, "flops_per_seq": 1,
                     "latency": {"host-cpu": {"status": "skipped", "reason": "ort"}, **lat(ms)}}
                    for m, v, ms in (("teacher", "fp32", 20.0), ("student", "int8-dynamic", 2.4))]
    res = classified(doc)
    assert validate_results(res) == []
    g = next(g for g in res["goals"] if g["goal"].startswith("student int8 p50 <= 1/10"))
    assert g["value"] == pytest.approx(0.12) and g["met"] is False and "(sweep p50s)" in g["detail"]
    failed = {"target": "mobile-cpu", "seq_len": 64, "rounds": 9, "teacher": {}, "status": "failed"}
    assert any("needs its reason" in p for p in validate_results({**res, "teacher_rounds": [failed]}))
