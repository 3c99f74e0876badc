"""results.json building and the report rendering, on hand-written bench documents (no models):
ratios, goals, the metric column chosen by the rows (accuracy or perplexity), Pareto fronts, plots."""
from __future__ import annotations

import pytest

from eval.plots import pareto
from eval.report import blocks, to_markdown, write_report
from eval.results import (build_results, classification_results, generation_results, quality_key,
                          validate_results)
from pipeline.config import BundleSection

TARGETS = {"host-cpu": {"runtime": "onnxruntime", "provider": "CPU", "threads": 2, "precision": "fp32",
                        "formats": ["onnx"], "proxy": "", "description": ""},
           "mobile-cpu": {"runtime": "onnxruntime", "provider": "CPU", "threads": 1, "precision": "int8",
                          "formats": ["ort"], "proxy": "a host stand-in", "description": ""},
           "desktop-gpu": {"runtime": "pytorch", "provider": "cuda", "threads": 2, "precision": "fp16",
                           "formats": ["onnx"], "proxy": "", "description": ""}}


def _lat(ms: dict[int, float]) -> dict:
    out = {str(n): {"p50_ms": v, "p90_ms": v * 1.1, "p99_ms": v * 1.2, "mean_ms": v * 1.05, "min_ms": v * 0.9,
                    "iterations": 30} for n, v in ms.items()}
    out["session"] = {"provider": "CPUExecutionProvider", "threads": 1, "peak_rss_mb": 300.0, "session_rss_mb": 20.0}
    return out


def _row(model, variant, fmt, metric, value, size, host, mobile, **extra):
    gpu = {"status": "skipped", "reason": "no CUDA device on this machine"}
    return {"model": model, "variant": variant, "format": fmt, metric: value, "size_bytes": size, "params": size // 4,
            "flops_per_seq": 10**9, "flops_by_length": {"16": 10**8, "64": 10**9},
            "latency": {"host-cpu": _lat(host) if host else {"status": "skipped", "reason": "not on host"},
                        "mobile-cpu": _lat(mobile) if mobile else {"status": "skipped", "reason": "not on mobile"},
                        "desktop-gpu": gpu}, **extra}


def classified(doc: dict, accuracy_window: float = BundleSection.accuracy_window) -> dict:
    """results.json as the report step builds it for a classification run (its Task.results)."""
    return build_results(doc, classification_results, accuracy_window)


def _doc(rows):
    return {"machine": {"cpu": "test cpu", "machine": "x86_64", "system": "Linux", "logical_cores": 2,
                        "usable_cores": 2, "cpu_flags": ["avx2"], "load_average_1m": 0.1,
                        "peak_gflops_fp32": {"1": 100.0, "2": 190.0}, "peak_probe": "probe"},
            "versions": {"onnxruntime": "1.32.0"}, "threads": {"host-cpu": 2, "mobile-cpu": 1, "desktop-gpu": 2},
            "targets": TARGETS,
            "plan": {"seq_lengths": [16, 64], "headline_length": 64, "warmup": 5, "iterations": 30,
                     "min_iterations": 10, "max_seconds_per_point": 1.5, "throughput_batch": 32,
                     "sweep_variants": ["fp32"], "inputs": "test texts", "npu_device": "apple-a17-pro"},
            "seconds": {"peer_export": 10.0, "total": 120.0}, "rows": rows}


def test_classification_ratios_and_goals():
    rows = [_row("teacher", "fp32", "pytorch", "accuracy", 0.80, 8000, None, None),
            _row("teacher", "fp32", "ort", "accuracy", 0.80, 8100, None, {16: 10.0, 64: 40.0}),
            _row("student", "int8-dynamic", "ort", "accuracy", 0.76, 1000, None, {16: 1.0, 64: 3.0}),
            _row("student", "fp32", "onnx", "accuracy", 0.77, 4000, {64: 2.0}, None),
            _row("student", "optimum-fp32", "onnx", "accuracy", 0.77, 4000, {64: 2.5}, {64: 3.5}, source="optimum")]
    res = classified(_doc(rows))
    assert validate_results(res) == []
    st = next(r for r in res["rows"] if r["variant"] == "int8-dynamic")
    assert st["vs_teacher"]["size_ratio"] == pytest.approx(8.0)
    assert st["vs_teacher"]["quality_retention"] == pytest.approx(0.95)
    assert st["vs_teacher"]["speedup"] == {"mobile-cpu": pytest.approx(40.0 / 3.0)}
    first = res["goals"][0]
    assert first["value"] == pytest.approx(3.0 / 40.0) and first["met"] is True
    peer = [g for g in res["goals"] if "fp32 at most 0.8x" in g["goal"] and "host-cpu" in g["goal"]][0]
    assert peer["value"] == pytest.approx(0.8) and peer["met"] is True
    budget = res["goals"][-1]
    assert budget["value"] == 120.0 and budget["met"] is True
    assert len(res["goals"]) == 10  # the four peer goals at batch 1 and again at the throughput batch (32)


def test_teacher_rounds_are_a_table_of_every_student_file():
    """The report shows the rounds the bundle's choice reads, fastest first, next to the sweep that can disagree."""
    rows = [_row("teacher", "fp32", "ort", "accuracy", 0.80, 8100, None, {64: 14.7}),
            _row("student", "int8-dynamic", "ort", "accuracy", 0.75, 1000, None, {64: 0.892}),
            _row("student", "int8-static", "ort", "accuracy", 0.7545, 1300, None, {64: 0.831})]
    f = {"format": "ort"}
    vs = [{"target": "mobile-cpu", "seq_len": 64, "batch": 1, "threads": 1, "rounds": 9, "teacher_p50_ms": 14.66,
           "teacher": {"variant": "fp32", "file": "export/teacher/fp32.ort", **f},
           "students": [{"variant": "int8-static", "p50_ms": 0.825, "ratio": 0.0564, "ratio_min": 0.0551,
                         "ratio_max": 0.058, "round_ratios": [0.0564] * 9, **f},
                        {"variant": "int8-dynamic", "p50_ms": 0.611, "ratio": 0.0417, "ratio_min": 0.0408,
                         "ratio_max": 0.0422, "round_ratios": [0.0417] * 9, **f}]}]
    md = to_markdown(blocks(classified({**_doc(rows), "teacher_rounds": vs}), {}))
    section = md.split("## Student files against the fp32 teacher, in interleaved rounds")[1].split("##")[0]
    assert "in 9 interleaved rounds (mobile-cpu: the teacher's fp32 .ort 14.66 ms, 14.70 ms in the sweep)" in section
    lines = [ln for ln in section.splitlines() if ln.startswith("| mobile-cpu")]
    assert lines == ["| mobile-cpu | int8-dynamic ort | 0.611 | 0.0417 | 0.0408-0.0422 | 0.892 |",
                     "| mobile-cpu | int8-static ort | 0.825 | 0.0564 | 0.0551-0.0580 | 0.831 |"]
    failed = [{"target": "mobile-cpu", "seq_len": 64, "status": "failed", "reason": "RuntimeError: x"}]
    assert "## Student files against" not in to_markdown(blocks(classified({**_doc(rows), "teacher_rounds": failed}), {}))


def test_generation_rows_render_perplexity_and_generation_table(tmp_path):
    rows = [_row("teacher", "fp32", "pytorch", "perplexity", 20.0, 8000, {16: 30.0, 64: 90.0}, None,
                 generation={"host-cpu": {"ttft_ms": 95.0, "decode_tokens_per_s": 12.5}}),
            _row("student", "fp32", "onnx", "perplexity", 25.0, 2000, {16: 5.0, 64: 12.0}, None,
                 generation={"host-cpu": {"ttft_ms": 14.0, "decode_tokens_per_s": 80.0}}),
            _row("lstm", "fp32", "onnx", "perplexity", 40.0, 1000, {16: 2.0, 64: 6.0}, None,
                 generation={"host-cpu": {"status": "skipped", "reason": "runs the .ort file"}})]
    doc = _doc(rows)
    doc["plan"]["max_seconds_per_point"] = None  # the generation bench times whole generations
    doc["plan"]["decode_tokens"] = 32  # and decodes after the prompt: its latency is the first token
    res = build_results(doc, generation_results)
    goals = {g["goal"]: g for g in res["goals"]}
    assert list(goals)[-1] == "benchmark of the models completes within 5 minutes"
    assert goals["student perplexity within 2x of the teacher's"]["value"] == pytest.approx(1.25)
    assert goals["student perplexity within 2x of the teacher's"]["met"] is True
    below = goals["student perplexity below the LSTM's"]
    assert (below["value"], below["limit"], below["met"]) == (25.0, 40.0, True)
    speed = goals["student int8 decode >= 5x the teacher's tokens/s on mobile-cpu"]
    assert speed["value"] is None and speed["met"] is None  # no int8 student on mobile-cpu in this document
    assert res["quality_metric"] == "perplexity" and quality_key(rows) == "perplexity"
    st = next(r for r in res["rows"] if r["model"] == "student")
    assert st["vs_teacher"]["quality_retention"] == pytest.approx(20.0 / 25.0)  # lower perplexity is better
    paths = write_report(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| model | variant | format | perplexity | perplexity / teacher |" in md
    assert "| student | fp32 | onnx | 25.0000 | 1.25x |" in md  # the goal's ratio, not its inverse as a %
    # the latency columns say they are the time to first token; no GFLOP/s column of dashes (none for generation)
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert "| host-cpu first-token p50 ms | faster |" in summary
    assert "GFLOP/s" not in summary
    assert "## Generation" in md and "| student | fp32 | onnx | host-cpu | 14.00 | 80.0 |" in md
    assert "## Latency vs sequence length" in md  # two lengths timed: a sweep table
    assert "macro-F1" not in md and "stopping after None" not in md
    assert "| student perplexity below the LSTM's | 25 | 40 | yes |" in md
    assert "| lstm | fp32 | onnx | host-cpu |" not in md.split("## Generation")[1].split("##")[0]
    assert {p.name for p in paths} >= {"report.md", "report.html", "quality_vs_latency.png",
                                       "latency_vs_length.png", "size_vs_quality.png"}


def test_skipped_targets_and_lengths_are_listed_with_reasons(tmp_path):
    rows = [_row("teacher", "fp32", "onnx", "accuracy", 0.8, 8000, {64: 40.0}, None)]
    rows[0]["latency"]["host-cpu"]["16"] = {"status": "skipped", "reason": "sweep budget"}
    md = to_markdown(blocks(classified(_doc(rows)), {}))
    assert "| desktop-gpu: skipped: no CUDA device on this machine | teacher fp32 onnx |" in md
    assert "| host-cpu: skipped: sweep budget | teacher fp32 onnx (at 16) |" in md
    # a variant the quantize stage could not make has no row to time: listed once, for every target
    res = classified(_doc(rows))
    res["not_made"] = [{"model": "teacher", "variant": "optimized", "reason": "no fusion patterns for 'deberta'"}]
    assert validate_results(res) == []
    assert "| all targets: not made: no fusion patterns for 'deberta' | teacher optimized |" in \
        to_markdown(blocks(res, {}))
    # a target with nothing measured or estimated has no column in the summary
    summary = md.split("## Summary")[1].split("##")[0]
    assert "desktop-gpu p50" not in summary and "host-cpu p50 ms" in summary


def test_proxy_line_names_the_proxies_or_says_there_are_none():
    rows = [_row("teacher", "fp32", "onnx", "accuracy", 0.8, 8000, {64: 40.0}, None)]
    doc = _doc(rows)
    md = to_markdown(blocks(classified(doc), {}))
    assert "Host proxies: mobile-cpu - measured on this machine as a stand-in;" in md
    for t in doc["targets"].values():
        t["proxy"] = ""
    md = to_markdown(blocks(classified(doc), {}))
    assert "Host proxies: none - every target was measured on the hardware it names. Numbers marked" in md
    assert "stand-in" not in md.split("Host proxies")[1].split("\n")[0]
    assert "## Latency vs sequence length" not in md  # one length timed (as generation): no empty section
    assert "GPU:" not in md  # no card in the machine record: none named
    assert "interleaved rounds" not in md  # a document from before desktop-gpu was timed in rounds
    doc["plan"]["gpu_rounds"] = 10
    rounds = "desktop-gpu: every row's points are timed together in 10 interleaved rounds"
    assert rounds not in to_markdown(blocks(classified(doc), {}))  # configured, but nothing timed there
    doc["rows"][0]["latency"]["desktop-gpu"] = _lat({64: 1.0})
    assert rounds in to_markdown(blocks(classified(doc), {}))
    doc["machine"]["gpu"] = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "compute_capability": "9.0",
                             "cuda_runtime": "13.0", "driver": "580.159.04", "count": 1}
    machine_line = next(line for line in to_markdown(blocks(classified(doc), {})).splitlines()
                        if line.startswith("Machine:"))
    assert machine_line.endswith("GPU: NVIDIA H100 80GB HBM3 (81,559 MiB, compute capability 9.0, driver 580.159.04, "
                                 "CUDA 13.0 (PyTorch's)).")


def test_pareto_front():
    pts = [(1.0, 0.70), (2.0, 0.80), (3.0, 0.75), (4.0, 0.90), (5.0, 0.85)]
    assert pareto(pts) == [(1.0, 0.70), (2.0, 0.80), (4.0, 0.90)]
    # perplexity: lower is better
    assert pareto([(1.0, 30.0), (2.0, 20.0), (3.0, 25.0)], higher_is_better=False) == [(1.0, 30.0), (2.0, 20.0)]
    assert pareto([]) == []


def test_generation_goals_read_decode_speed_on_mobile_cpu():
    gen = lambda tps: {"mobile-cpu": {"ttft_ms": 5.0, "decode_tokens_per_s": tps}}  # noqa: E731
    rows = [_row("teacher", "fp32", "pytorch", "perplexity", 20.0, 8000, None, None),
            _row("teacher", "fp32", "onnx", "perplexity", 20.0, 8000, None, None, generation=gen(20.0)),
            _row("student", "fp32", "pytorch", "perplexity", 50.0, 2000, None, None),
            _row("student", "int8-dynamic", "ort", "perplexity", 51.0, 500, None, None, generation=gen(90.0)),
            _row("lstm", "fp32", "pytorch", "perplexity", 45.0, 1000, None, None)]
    goals = {g["goal"]: g for g in build_results(_doc(rows), generation_results)["goals"]}
    assert goals["student int8 decode >= 5x the teacher's tokens/s on mobile-cpu"]["value"] == pytest.approx(4.5)
    assert goals["student int8 decode >= 5x the teacher's tokens/s on mobile-cpu"]["met"] is False
    assert goals["student perplexity within 2x of the teacher's"]["met"] is False  # 2.5x
    assert goals["student perplexity below the LSTM's"]["met"] is False  # 50 > 45
    # with the distilled LSTM beside it, the limit is the better of the two LSTMs
    both = rows + [_row("lstm_distilled", "fp32", "pytorch", "perplexity", 55.0, 1000, None, None)]
    below = {g["goal"]: g for g in build_results(_doc(both), generation_results)["goals"]}["student perplexity below "
                                                                                          "the LSTMs'"]
    assert below["limit"] == 45.0 and below["met"] is False and "limit = lstm's, the better LSTM," in below["detail"]
    both[-1]["perplexity"] = 40.0
    below = {g["goal"]: g for g in build_results(_doc(both), generation_results)["goals"]}["student perplexity below "
                                                                                          "the LSTMs'"]
    assert below["limit"] == 40.0 and "lstm_distilled's" in below["detail"]


def test_summary_shows_a_files_rounds_beside_a_sweep_point_they_disagree_with():
    """On the 2026-11-28 demo the web bundle's file read 3.73 ms in the Chromium sweep and 2.34-2.49 ms in its
    nine rounds, so the summary showed the file the bundle picked as slower than the one it beat; in a later run
    host-cpu's rounds read every file 1.4-2.1x its sweep point. Neither measurement is always the right one, so a
    cell whose file has rounds that differ from its sweep point by more than DISAGREE shows both; within it
    the sweep alone (the frame of every other row), and a file without rounds its sweep point."""
    from eval.report import DISAGREE
    from eval.rows import rounds_p50

    rows = [_row("teacher", "fp32", "ort", "accuracy", 0.80, 8100, None, {16: 5.0, 64: 15.0}),
            _row("student", "int8-dynamic", "ort", "accuracy", 0.76, 1000, None, {16: 0.4, 64: 1.2}),
            _row("student", "fp32", "ort", "accuracy", 0.77, 4000, None, {16: 0.5, 64: 1.0})]
    rounds = {"teacher": [14.0, 14.5, 14.2], "int8-dynamic": [0.62, 0.60, 0.61]}
    for r, got in zip(rows, (rounds["teacher"], rounds["int8-dynamic"])):
        r["latency"]["mobile-cpu"]["rounds"] = {"length": 64, "round_p50_ms": got}
    assert rounds_p50(rows[1], "mobile-cpu", 64) == pytest.approx(0.61)
    assert rounds_p50(rows[1], "mobile-cpu", 16) is None and rounds_p50(rows[2], "mobile-cpu", 64) is None
    assert abs(14.2 / 15.0 - 1) < DISAGREE < abs(0.61 / 1.2 - 1)
    res = classified(_doc(rows))
    i8 = next(r for r in res["rows"] if r["variant"] == "int8-dynamic")
    assert i8["vs_teacher"]["speedup"]["mobile-cpu"] == pytest.approx(15.0 / 1.2)  # the sweep's, like every row's
    md = to_markdown(blocks(res, {}))
    summary = md.split("## Summary at 64 tokens, batch 1")[1].split("##")[0]
    assert "| student | int8-dynamic | ort | 0.7600 |" in summary and "| 1.20 (\u2020 0.610) | 12.5x |" in summary
    assert "| 15.00 | 1.0x |" in summary and "| 1.00 | 15.0x |" in summary
    assert "the median of the same file's interleaved rounds" in summary
    sweep = md.split("## Latency vs sequence length (p50 ms, batch 1)")[1].split("##")[0]
    assert "| student | int8-dynamic | ort | 0.400 | 1.20 |" in sweep  # the length tables: the sweep alone
    rows[1]["latency"]["mobile-cpu"]["rounds"]["round_p50_ms"] = [1.15, 1.2, 1.1]  # agrees: no second number
    assert "\u2020" not in to_markdown(blocks(classified(_doc(rows)), {})).split("## Summary")[1]


def test_browser_cross_check_section():
    """Rows whose browser-wasm entry carries a Node cross-check get a table with both runtimes and their ratio."""
    rows = [_row("student", "int8-dynamic", "ort", "accuracy", 0.8, 1000, None, {64: 2.0})]
    rows[0]["latency"]["browser-wasm"] = {
        "64": {"p50_ms": 6.0, "p90_ms": 6.5, "p99_ms": 7.0, "mean_ms": 6.1, "min_ms": 5.9, "iterations": 10},
        "cross_check": {"length": 64, "node-wasm": {"p50_ms": 4.5}, "node-native": {"error": "no binary"},
                        "versions": {"node": "20.20.2", "onnxruntime-web": "1.30.0"}}}
    res = classified(_doc(rows))
    assert validate_results(res) == []  # eval/SCHEMA.md knows the key
    md = to_markdown(blocks(res, {}))
    section = md.split("## Browser rows cross-checked outside the browser (64 tokens, 1 thread)")[1].split("##")[0]
    assert "| student | int8-dynamic | ort | 6.00 | 4.50 | 0.75 | - | no binary |" in section
    assert "onnxruntime-web 1.30.0" in section
    # Node times in rounds: where Chromium's page timed the file in rounds too, the ratio reads those
    rows[0]["latency"]["browser-wasm"]["chromium_rounds"] = {"length": 64, "round_p50_ms": [4.4, 4.6, 4.5]}
    section = to_markdown(blocks(classified(_doc(rows)), {})).split("1 thread)")[1].split("##")[0]
    assert "| student | int8-dynamic | ort | 4.50 \u2020 (sweep 6.00) | 4.50 | 1.00 | - | no binary |" in section
    plain = [_row("student", "int8-dynamic", "ort", "accuracy", 0.8, 1000, None, {64: 2.0})]
    assert "cross-checked" not in to_markdown(blocks(classified(_doc(plain)), {}))


def test_browser_goals_pick_the_student_within_the_runs_accuracy_window():
    """The browser goals judge the student the web bundle would ship, which it picks within bundle.accuracy_window;
    they used the default 0.01 whatever the run set, so at 0.02 they timed another file than the bundle ships."""
    rows = [_row("teacher", "fp32", "onnx", "accuracy", 0.80, 8000, {64: 40.0}, None),
            _row("student", "fp32", "onnx", "accuracy", 0.80, 4000, {64: 5.0}, None),
            _row("student", "int8-dynamic", "onnx", "accuracy", 0.785, 1000, {64: 2.0}, None)]
    for r, ms in zip(rows, (40.0, 5.0, 2.0)):
        r["latency"]["browser-wasm"] = _lat({64: ms})
    doc = _doc(rows)
    doc["targets"] = dict(TARGETS, **{"browser-wasm": {"runtime": "onnxruntime-web", "provider": "wasm", "threads": 1,
                                                       "precision": "fp32", "formats": ["onnx", "ort"], "proxy": "",
                                                       "description": ""}})
    doc["threads"]["browser-wasm"] = 1

    def teacher_goal(window):
        return next(g for g in classified(doc, window)["goals"] if g["goal"].startswith(
            "web bundle's student p50 <= 1/10 of the fp32 teacher on browser-wasm"))

    assert teacher_goal(0.01)["value"] == pytest.approx(5.0 / 40.0) and "student fp32 .onnx" in teacher_goal(0.01)["detail"]
    wide = teacher_goal(0.02)  # 1.5 points down is inside the run's window: the bundle ships the int8 file
    assert wide["value"] == pytest.approx(2.0 / 40.0) and "student int8-dynamic .onnx" in wide["detail"]


def test_header_states_the_browser_warm_up_only_when_a_browser_target_was_timed():
    rows = [_row("student", "fp32", "onnx", "accuracy", 0.77, 4000, {64: 2.0}, None)]
    doc = _doc(rows)
    doc["plan"].update(browser_warmup=2, browser_iterations=10, browser_v8_flags="--no-liftoff",
                       browser_file_warmup_s=0.15)
    assert "Browser targets:" not in to_markdown(blocks(classified(doc), {}))  # none timed
    doc["targets"] = dict(TARGETS, **{"browser-wasm": {"runtime": "onnxruntime-web", "provider": "wasm", "threads": 1,
                                                       "precision": "fp32", "formats": ["onnx", "ort"], "proxy": "",
                                                       "description": ""}})
    doc["threads"]["browser-wasm"] = 1
    rows[0]["latency"]["browser-wasm"] = _lat({64: 5.0})
    md = to_markdown(blocks(classified(doc), {}))
    assert ("Browser targets: Chromium with V8 flags --no-liftoff (V8 compiles the WASM module optimized when it "
            "loads; left to tier it up while files were timed, files read up to 3x slow)") in md
    assert "each file run untimed for 0.15 s, then 2 warm-up calls per length and up to 10 timed calls." in md


def test_head_to_head_says_when_optimum_was_given_the_folded_embedding():
    """The peer of a compact-embedding student is exported from the folded table (eval/peer.py plain_folder):
    the head-to-head says so, and says nothing of it for a stock student."""
    from eval.report import _head_to_head

    pair = {"target": "mobile-cpu", "batch": 1, "ours": {"variant": "int8-dynamic", "format": "ort"},
            "peer": {"variant": "optimum-int8-dynamic", "format": "onnx"}, "ours_p50_ms": 0.6, "peer_p50_ms": 0.9,
            "ratio": 0.667, "ratio_min": 0.6, "ratio_max": 0.7, "rounds": 9, "iterations_per_round": 100, "seq_len": 64}
    peer = {"model": "student", "variant": "optimum-int8-dynamic", "format": "onnx", "source": "optimum"}
    text = lambda rows: to_markdown(_head_to_head({"head_to_head": [pair], "rows": rows}))  # noqa: E731
    assert "folded into a stock table of every tokenizer id" in text([{**peer, "folded_embedding": True}])
    assert "folded" not in text([peer])


def test_head_to_head_says_what_the_optimized_files_graph_trim_dropped():
    """The optimized file's exact bookkeeping trim (export/web_graph.trim_bookkeeping) is part of what the fp32
    ratio measures: the note gives its node counts, and says nothing when the trim was skipped."""
    from eval.report import _head_to_head

    pair = {"target": "host-cpu", "batch": 1, "ours": {"variant": "optimized", "format": "onnx"},
            "peer": {"variant": "optimum-fp32", "format": "onnx"}, "ours_p50_ms": 1.2, "peer_p50_ms": 1.7,
            "ratio": 0.7, "ratio_min": 0.6, "ratio_max": 0.8, "rounds": 9, "iterations_per_round": 100, "seq_len": 64}
    trim = {"mask_expands_dropped": 1, "nodes_before": 163, "nodes_after": 108, "max_relative_difference": 0.0}
    row = {"model": "student", "variant": "optimized", "format": "onnx", "details": {"graph_trim": trim}}
    text = lambda rows: to_markdown(_head_to_head({"head_to_head": [pair], "rows": rows}))  # noqa: E731
    int8 = {"model": "student", "variant": "int8-dynamic", "format": "onnx", "details": {"source": "optimized"}}
    assert ("is trimmed from the optimized file, which int8-dynamic is quantized from: 163 -> 108 nodes, the same "
            "outputs (max relative difference 0)") in text([row, int8])
    # quantize.dynamic_source = "fp32": the int8 file does not carry the trim
    assert "optimized file: 163 -> 108 nodes" in text([row, {**int8, "details": {"source": "fp32"}}])
    skipped = {**row, "details": {"graph_trim": {"skipped": "nothing to trim"}}}
    assert "trimmed" not in text([skipped]) and "trimmed" not in text([{**row, "format": "ort"}])


def test_head_to_head_explains_a_4bit_word_table_against_optimums_fp32_one():
    from eval.report import _table_bits_note

    ours = {"model": "student", "variant": "int8-dynamic", "format": "onnx", "accuracy": 0.75,
            "size_bytes": 1.39 * 2**20, "details": {"embedding_4bit": {"bits": 4, "rows": 10964, "dim": 64}}}
    peer = {"model": "student", "variant": "optimum-int8-dynamic", "format": "onnx", "source": "optimum",
            "accuracy": 0.7542, "size_bytes": 4.68 * 2**20}
    assert _table_bits_note([ours, peer]) == (
        " Our int8-dynamic file keeps its word table in 4 bits (quantize.embedding_bits = 4): 1.39 MiB at accuracy "
        "0.7500, against Optimum's 4.68 MiB at 0.7542, whose table stays fp32.")
    assert _table_bits_note([{**ours, "details": {}}, peer]) == ""  # an int8 table: nothing to explain
    assert _table_bits_note([ours]) == ""  # no peer


def test_a_goal_value_shows_the_digits_that_tell_it_from_its_limit():
    """A missed goal of 0.8005 against 0.8 printed as "0.8 | 0.8 | NO" reads as a contradiction: the value gets the
    digits it needs (3 significant ones at least), the limit stays as written."""
    from eval.report import _beside, _goals

    assert [_beside(v, 0.8) for v in (0.8005, 0.79999, 0.7766, 0.8, 0.81)] == ["0.8005", "0.79999", "0.777", "0.8",
                                                                             "0.81"]
    assert (_beside(None, 0.8), _beside(193.1, 300.0), _beside(0.12345678912, None)) == ("-", "193", "0.123")
    goals = [{"goal": "g", "value": 0.8005, "limit": 0.8, "met": False, "detail": "d"}]
    assert _goals({"goals": goals})[1][2] == [["g", "0.8005", "0.8", "NO", "d"]]


def test_build_results_takes_the_tasks_part_not_a_window():
    """build_results(doc, part, accuracy_window): a window where the task's part goes is one clear error."""
    rows = [_row("teacher", "fp32", "onnx", "accuracy", 0.8, 4000, {64: 10.0}, {64: 20.0})]
    with pytest.raises(TypeError, match=r"part is the task's Task.results, got 0.01"):
        build_results(_doc(rows), 0.01)
    assert [g["goal"] for g in build_results(_doc(rows))["goals"]] == [
        "benchmark of the models completes within 5 minutes"]


def test_the_summary_reads_its_columns_from_the_metric_and_the_plan_not_a_task_name(monkeypatch):
    """A task with its own higher-is-better score gets retention and no macro-F1 column; the latency header says
    "first-token" only when the bench timed a decode workload (its plan has decode steps)."""
    from eval import metrics

    monkeypatch.setitem(metrics.HIGHER_IS_BETTER, "toy_score", True)
    rows = [_row("teacher", "fp32", "onnx", "toy_score", 0.8, 8000, {16: 4.0, 64: 9.0}, None),
            _row("student", "fp32", "onnx", "toy_score", 0.6, 2000, {16: 1.0, 64: 2.0}, None)]

    def header(doc) -> str:
        md = to_markdown(blocks(build_results({**doc, "quality_metric": "toy_score"}), {}))
        return next(line for line in md.splitlines() if line.startswith("| model | variant | format | toy_score"))

    plain = header(_doc(rows))
    assert "| toy_score | retention | params |" in plain and "macro-F1" not in plain
    assert "host-cpu p50 ms" in plain and "first-token" not in plain
    decode = _doc(rows)
    decode["plan"]["decode_tokens"] = 8
    assert "host-cpu first-token p50 ms" in header(decode)
    monkeypatch.setitem(metrics.HIGHER_IS_BETTER, "toy_score", False)  # lower is better: a ratio, row / teacher
    assert "| toy_score | toy_score / teacher | params |" in header(_doc(rows))
