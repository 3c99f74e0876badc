"""The bench and report stages on a tiny fabricated run: four random-weight models (width 16-32)
exported to ONNX, dynamic and static int8, .ort and a Core ML package, with the upstream manifests the
runner needs, so `bench` and `report` run through pipeline.stage exactly as in the demo."""
from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_texts, tiny_bert_config, write_tokenizer

LABELS = ["negative", "neutral", "positive"]


def _export(model: torch.nn.Module, path: Path) -> Path:
    x = torch.ones(1, 8, dtype=torch.long)
    path.parent.mkdir(parents=True, exist_ok=True)
    axes = {"batch": 0, "sequence": 1}
    torch.onnx.export(model.eval(), (x, x), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                    "attention_mask": {0: "batch", 1: "sequence"}, "logits": {0: "batch"}})
    return path


def _static_int8(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"input_ids": rng.integers(5, 40, (2, 12)).astype(np.int64),
                                  "attention_mask": np.ones((2, 12), np.int64)} for _ in range(2)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return dst


def _coreml_lstm(path: Path) -> Path:
    """A small LSTM Core ML package with a range-flexible input: two Neural Engine blockers."""
    import coremltools as ct

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(8, 8, batch_first=True)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x):  # (B, T, 8) -> (B, 3)
            return self.head(self.rnn(x)[0].mean(1))

    traced = torch.jit.trace(M().eval(), torch.randn(1, 6, 8))
    ml = ct.convert(traced, inputs=[ct.TensorType("x", shape=(1, ct.RangeDim(2, 32), 8))],
                    minimum_deployment_target=ct.target.iOS17, convert_to="mlprogram")
    ml.save(str(path))
    return path


def _row(model, variant, fmt, run, path, acc):
    return {"model": model, "variant": variant, "format": fmt, "file": path.relative_to(run).as_posix(),
            "size_bytes": path.stat().st_size if path.is_file() else 1000, "check": {}, "accuracy": acc,
            "macro_f1": acc - 0.05, "params": 1000}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """runs/tiny with finished data, teacher, distill, baseline, eval, quantize and export folders."""
    from distill.lstm import RNNClassifier, RNNConfig
    from distill.models import HFLogits, count_params, save_model
    from onnxruntime.quantization import quantize_dynamic
    from pipeline.data import write_jsonl
    from pipeline.manifest import write_manifest
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("bench")
    run = root / "runs" / "tiny"
    tok = write_tokenizer(root / "tok")
    (run / "data").mkdir(parents=True)
    write_jsonl(run / "data" / "test.jsonl", [{"text": t, "label": lab} for t, lab in make_texts(60, seed=1)])
    (run / "data" / "labels.json").write_text(json.dumps(LABELS))
    hf = lambda **kw: HFLogits(BertForSequenceClassification(tiny_bert_config(num_labels=3, **kw)))  # noqa: E731
    models = {"teacher": (hf(), "hf", ("teacher", "model")),
              "student": (hf(hidden_size=16, num_hidden_layers=1, intermediate_size=32, max_position_embeddings=24),
                          "hf", ("distill", "student")),
              "lstm": (RNNClassifier(RNNConfig(len(tok), 3, 16, 16)), "rnn", ("baseline", "lstm")),
              "lstm_distilled": (RNNClassifier(RNNConfig(len(tok), 3, 16, 16)), "rnn", ("baseline", "lstm_distilled"))}
    acc = {"teacher": 0.9, "student": 0.85, "lstm": 0.7, "lstm_distilled": 0.8}
    eval_rows, q_rows, e_rows = [], [], []
    for name, (m, kind, (stage, sub)) in models.items():
        folder = run / stage / sub
        save_model(folder, m, tok, LABELS, kind, 32)
        eval_rows.append({"model": name, "variant": "fp32", "format": "pytorch", "accuracy": acc[name],
                          "macro_f1": acc[name] - 0.05, **count_params(m),
                          "size_bytes": (folder / "model.safetensors").stat().st_size})
        qdir = run / "quantize" / name
        fp32 = _export(m, qdir / "fp32.onnx")
        dyn = qdir / "int8-dynamic.onnx"
        quantize_dynamic(str(fp32), str(dyn))
        q_rows += [_row(name, "fp32", "onnx", run, fp32, acc[name]),
                   _row(name, "int8-dynamic", "onnx", run, dyn, acc[name] - 0.01)]
        if name == "student":
            st = _static_int8(fp32, qdir / "int8-static.onnx")
            q_rows += [_row(name, "int8-static", "onnx", run, st, acc[name] - 0.02),
                       _row(name, "fp16", "onnx", run, qdir / "fp16.onnx", acc[name])]  # file never built
    edir = run / "export"
    subprocess.run([sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(run / "quantize"),
                    "--output_dir", str(edir)], check=True, capture_output=True)
    for name in models:
        for v in ("fp32", "int8-dynamic"):
            r = _row(name, v, "ort", run, edir / name / f"{v}.ort", acc[name])
            r.pop("accuracy")  # the bench takes it from the ONNX row
            e_rows.append(r)
    e_rows.append(_row("lstm", "fp16", "coreml", run, _coreml_lstm(edir / "lstm" / "fp16.mlpackage"), 0.7))
    (run / "eval" / "accuracy.json").parent.mkdir(parents=True, exist_ok=True)
    (run / "eval" / "accuracy.json").write_text(json.dumps(eval_rows))
    (run / "quantize" / "variants.json").write_text(json.dumps(q_rows))
    (run / "quantize" / "npu.json").write_text(json.dumps(_npu_rows(run, tok)))
    (edir / "variants.json").write_text(json.dumps(e_rows))
    skipped = [{"model": "lstm", "variant": "int8-static", "reason": "left out by this test"}]
    for stage in ("data", "teacher", "distill", "baseline", "eval", "quantize", "compile", "export"):
        summary = {"skipped": skipped} if stage == "quantize" else {}
        (run / stage).mkdir(parents=True, exist_ok=True)  # compile writes no file here (no QNN SDK)
        write_manifest(run / stage, stage=stage, config={}, config_hash="test", inputs={}, summary=summary, started=0)
    return root


def _npu_rows(run: Path, tok) -> list[dict]:
    """npu.json as the quantize stage writes it for an npu student: static files at 16 tokens, checked."""
    from distill.batching import encode
    from distill.npu_student import NpuStudent, NpuStudentConfig
    from eval.npu import check_onnx
    from export.npu import NPU_VARIANTS, write_variant

    m = NpuStudent(NpuStudentConfig(len(tok), 3, 16, 1, 2, 32, 24)).eval()
    calib, _ = encode(tok, [t for t, _ in make_texts(16, seed=2)], 16)
    rows = []
    for name, v in NPU_VARIANTS.items():
        made = write_variant(m, run / "quantize" / "student" / "npu", name, [16], 17, calib, 0, "student")
        f = made["files"][16]
        rows.append({**_row("student", f"npu-{name}", "onnx-npu", run, f, 0.84), "provider": v.provider,
                     "lengths": [16], "files": {"16": f.relative_to(run).as_posix()},
                     "lookup": made["lookup"].relative_to(run).as_posix() if made["lookup"] else None,
                     "readiness": {"16": {"fixed_shape": [1, 16], **check_onnx(f)}}})
    return rows


def _cfg(root: Path, **bench):
    from pipeline.config import config_from_dict

    # the browser targets have their own test (test_browser.py): Chromium stays out of this one
    b = {"targets": ["host-cpu", "mobile-cpu", "edge-npu", "desktop-gpu"], "seq_lengths": [8, 16, 32],
         "headline_length": 16, "warmup": 1, "iterations": 6, "min_iterations": 3,
         "max_seconds_per_point": 0.2, "throughput_batch": 4, **bench}
    return config_from_dict({"run": {"name": "tiny", "runs_dir": str(root / "runs")}, "bench": b,
                             "bundle": {"web": False}}, "bench-test")


@pytest.fixture(scope="module")
def benched(tiny_run):
    """peer, bench then report through the stage runner; returns (run folder, latency doc, results doc)."""
    from pipeline.stage import run_stage

    cfg = _cfg(tiny_run)
    run_stage(cfg, "peer")
    run_stage(cfg, "bench")
    run_stage(cfg, "report")
    run = cfg.run_dir
    return run, json.loads((run / "bench" / "latency.json").read_text()), \
        json.loads((run / "report" / "results.json").read_text())


def _rows(doc, model, variant, fmt):
    return next(r for r in doc["rows"] if (r["model"], r["variant"], r["format"]) == (model, variant, fmt))


def test_every_row_has_every_target_measured_or_with_reason(benched):
    _, lat, _ = benched
    # pytorch + onnx + ort + coreml + Optimum peer + what targets expect but was not made:
    # int8-static .ort for all four models, int8-static .onnx for all but the student
    # and the npu student's static NPU files, one per variant of the registry (nnapi, coreml, qnn-w8a16)
    assert len(lat["rows"]) == 4 + 10 + 8 + 1 + 4 + 4 + 3 + 3
    for r in lat["rows"]:
        assert set(r["latency"]) == {"host-cpu", "mobile-cpu", "edge-npu", "desktop-gpu"}
        for target, entry in r["latency"].items():
            if "status" in entry:
                assert entry["reason"], (r["model"], r["variant"], target)
                continue
            for key, point in entry.items():
                if key in ("session", "rounds") or "status" in point:
                    continue
                assert 0 < point["min_ms"] <= point["p50_ms"] <= point["p90_ms"] <= point["p99_ms"]
                assert 3 <= point["iterations"] <= 6


def test_lengths_throughput_and_flops(benched):
    _, lat, _ = benched
    teacher = _rows(lat, "teacher", "fp32", "onnx")["latency"]["host-cpu"]
    assert {"8", "16", "32", "throughput_b4", "session"} <= set(teacher)
    assert teacher["throughput_b4"]["batch"] == 4 and teacher["throughput_b4"]["sequences_per_s"] > 0
    assert teacher["session"]["threads"] >= 1 and teacher["session"]["peak_rss_mb"] > 0
    assert teacher["16"]["gflops"] > 0
    # the student's position table holds 24 tokens: 32 is skipped, with the reason
    student = _rows(lat, "student", "fp32", "onnx")["latency"]["host-cpu"]
    assert student["32"] == {"status": "skipped", "reason": "longer than the model's position table (24 tokens)"}
    # mobile-cpu runs one thread, at batch 1 and at the throughput batch (the .ort files and Optimum's .onnx);
    # int8-static is measured at the headline length only
    mobile = _rows(lat, "student", "int8-dynamic", "ort")["latency"]["mobile-cpu"]
    assert mobile["session"]["threads"] == 1
    assert mobile["throughput_b4"]["batch"] == 4 and mobile["throughput_b4"]["sequences_per_s"] > 0
    assert _rows(lat, "student", "optimum-fp32", "onnx")["latency"]["mobile-cpu"]["throughput_b4"]["batch"] == 4
    assert "throughput_b4" not in _rows(lat, "student", "int8-static", "ort")["latency"]["mobile-cpu"]
    static = _rows(lat, "student", "int8-static", "onnx")["latency"]["host-cpu"]
    assert "p50_ms" in static["16"] and "sweep" in static["8"]["reason"]
    # FLOPs: the attention term makes the teacher super-linear in length, the LSTM is linear
    t, lstm = _rows(lat, "teacher", "fp32", "onnx"), _rows(lat, "lstm", "fp32", "onnx")
    assert t["flops_by_length"]["32"] > 2 * t["flops_by_length"]["16"]
    assert lstm["flops_by_length"]["32"] == 2 * lstm["flops_by_length"]["16"]
    assert t["flops_per_seq"] == t["flops_by_length"]["16"]
    # the formula agrees with MatMul/Gemm/LSTM FLOPs counted in the exported graph
    for r in (t, lstm, _rows(lat, "student", "fp32", "onnx")):
        assert 0.99 < r["flops_graph_check"]["ratio_to_formula"] < 1.1, r["flops_graph_check"]


def test_skip_reasons(benched):
    _, lat, _ = benched
    fp16 = _rows(lat, "student", "fp16", "onnx")["latency"]
    assert fp16["host-cpu"]["status"] == "skipped" and "fp16" in fp16["host-cpu"]["reason"]
    assert "static-QDQ" in fp16["edge-npu"]["reason"]
    assert "ort" in _rows(lat, "teacher", "fp32", "onnx")["latency"]["mobile-cpu"]["reason"]
    assert "PyTorch" in _rows(lat, "teacher", "fp32", "pytorch")["latency"]["mobile-cpu"]["reason"]
    if not torch.cuda.is_available():
        for r in (r for r in lat["rows"] if not r.get("missing")):
            gpu = r["latency"]["desktop-gpu"]
            assert gpu["status"] == "skipped" and gpu["reason"].startswith("no CUDA device")


def test_files_never_made_are_rows_with_the_reason(benched):
    _, lat, _ = benched
    lstm = _rows(lat, "lstm", "int8-static", "onnx")
    assert lstm["missing"] is True and lstm["accuracy"] is None
    assert lstm["latency"]["edge-npu"] == {"status": "skipped", "reason": "no onnx int8-static file for lstm: "
                                                                          "left out by this test"}
    assert "not made" in lstm["latency"]["host-cpu"]["reason"]
    teacher = _rows(lat, "teacher", "int8-static", "ort")["latency"]["mobile-cpu"]
    assert teacher["reason"].startswith("no ort int8-static file for teacher")


def test_edge_npu_readiness_and_estimate(benched):
    _, lat, _ = benched
    st = _rows(lat, "student", "int8-static", "onnx")
    nnapi = st["npu"]["onnx"]["nnapi"]["as_is"]
    assert st["npu"]["onnx"]["fixed_shape"] == [1, 16]
    assert 0 < nnapi["supported_nodes"] <= nnapi["total_nodes"] and nnapi["partitions"] >= 1
    assert "DequantizeLinear" not in nnapi.get("unsupported_ops", []) or nnapi["partitions"] > 1
    entry = st["latency"]["edge-npu"]
    assert entry["status"] == "not measured here"
    est = entry["estimate"]
    assert "ESTIMATE" in est["kind"] and est["source"] and est["device"] == "apple-a17-pro"
    assert est["by_length"]["16"]["estimate_ms"] > 0 and est["by_length"]["16"]["bound"] in ("compute", "memory")
    cm = _rows(lat, "lstm", "fp16", "coreml")["npu"]["coreml"]
    assert cm["ane_ready"] is False
    assert any(b.startswith("lstm op") for b in cm["ane_blockers"])
    assert any("range-flexible" in b for b in cm["ane_blockers"])
    assert cm["inputs"]["x"]["flexibility"] == "range"


def test_optimum_peer_matches_the_pytorch_model(benched):
    """Optimum's fp32 export of the same weights must score exactly what PyTorch scores."""
    from distill.models import load_model, predict_logits
    from eval.metrics import scores
    from pipeline.data import read_split

    run, lat, _ = benched
    test = read_split(run / "data", "test")
    gold = np.array([LABELS.index(r["label"]) for r in test])
    for model, folder in (("teacher", run / "teacher" / "model"), ("student", run / "distill" / "student")):
        m = load_model(folder, model)
        ref = scores(predict_logits(m.model, m.tokenizer, [r["text"] for r in test], 32), gold, 3)
        peer = _rows(lat, model, "optimum-fp32", "onnx")
        assert peer["source"] == "optimum" and (run / peer["file"]).is_file()
        assert peer["file"] == f"peer/{model}/fp32/model.onnx"  # the peer stage's, timed by the bench
        assert peer["accuracy"] == pytest.approx(ref["accuracy"])
        q = _rows(lat, model, "optimum-int8-dynamic", "onnx")
        import onnx

        ops = {n.op_type for n in onnx.load(str(run / q["file"])).graph.node}
        assert {"DynamicQuantizeLinear", "MatMulInteger"} & ops  # really int8 (tiny models grow when quantized)
        assert "p50_ms" in q["latency"]["mobile-cpu"]["16"]
    assert "lstm" not in {r["model"] for r in lat["rows"] if r.get("source") == "optimum"}
    made = json.loads((run / "peer" / "rows.json").read_text())
    assert [(r["model"], r["variant"]) for r in made["rows"]] == [
        ("teacher", "optimum-fp32"), ("teacher", "optimum-int8-dynamic"),
        ("student", "optimum-fp32"), ("student", "optimum-int8-dynamic")]
    assert made["seconds"] > 0 and lat["seconds"]["peer_export"] == made["seconds"]


def test_re_timing_keeps_optimums_files(benched):
    """Another bench.* timing key re-runs the bench alone: Optimum's export and scoring (the peer stage) stay."""
    from pipeline.stage import status

    run, lat, res = benched
    timing = _cfg(run.parents[1], iterations=7)
    assert status(timing, "peer")[0] and not status(timing, "bench")[0]
    assert not status(_cfg(run.parents[1], peer_eval_texts=2), "peer")[0]
    budget = next(g for g in res["goals"] if g["goal"].startswith("benchmark of the models"))
    assert budget["value"] == lat["seconds"]["total"]
    assert f"in the peer stage: {lat['seconds']['peer_export']:.0f} s" in budget["detail"]


def test_bench_seconds_say_where_the_time_went(benched):
    """latency.json's seconds.parts: each timed part, together within the stage's total; the 5-minute goal names
    the largest three."""
    _, lat, res = benched
    parts, total = lat["seconds"]["parts"], lat["seconds"]["total"]
    assert {"host-cpu", "mobile-cpu", "head_to_head", "teacher_rounds"} <= parts.keys()
    assert "browser" not in parts  # no browser target here
    assert all(v >= 0.05 for v in parts.values()) and sum(parts.values()) <= total + 0.5
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
    budget = next(g for g in res["goals"] if g["goal"].startswith("benchmark of the models"))
    assert ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in top) in budget["detail"]
    assert res["bench_seconds"]["parts"] == parts


def test_results_follow_the_schema_and_ratios(benched):
    from eval.results import validate_results

    _, lat, res = benched
    assert validate_results(res) == []
    # the int8 students against the fp32 teacher on mobile-cpu, in the same rounds; the goal reads them. host-cpu
    # times its .onnx files in rounds of their own, which its batch-1 pick reads
    host, vs = lat["teacher_rounds"]
    assert (host["target"], host["teacher"]["file"], host["threads"]) == ("host-cpu", "quantize/teacher/fp32.onnx", 2)
    assert {s["variant"] for s in host["students"]} >= {"fp32", "int8-dynamic"}
    assert all(s["format"] == "onnx" for s in host["students"])
    assert res["workloads"]["host-cpu"]["batch1"]["p50_from"] == "interleaved rounds"
    assert vs["teacher"]["file"] == "export/teacher/fp32.ort" and vs["rounds"] == 9 and vs["teacher_p50_ms"] > 0
    assert {s["variant"] for s in vs["students"]} >= {"int8-dynamic"} and all(
        s["format"] == "ort" and len(s["round_ratios"]) == 9 for s in vs["students"])
    int8 = [s for s in vs["students"] if s["variant"].startswith("int8")]
    best = min(int8, key=lambda s: s["ratio"])
    # every student .ort the bundle chooses among is in the rounds, and each file's round p50s are on its row
    assert {s["variant"] for s in vs["students"]} >= {"fp32", "int8-dynamic"}
    for s in vs["students"] + [{"model": "teacher", **vs["teacher"]}]:
        row = _rows(res, s.get("model", "student"), s["variant"], "ort")
        assert row["latency"]["mobile-cpu"]["rounds"]["length"] == vs["seq_len"]
        assert len(row["latency"]["mobile-cpu"]["rounds"]["round_p50_ms"]) == 9
    goal = next(g for g in res["goals"] if g["goal"].startswith("student int8 p50 <= 1/10"))
    assert goal["value"] == best["ratio"] and "interleaved-round" in goal["detail"]
    assert res["quality_metric"] == "accuracy" and res["threads"]["mobile-cpu"] == 1
    assert set(res["machine"]["peak_gflops_fp32"]) >= {"1"}
    assert 0.0 <= res["machine"]["cpu_busy_during_percent"] <= 100.0  # other processes' share over the bench
    assert set(res["machine"]["peak_gops_int8"]) == set(res["machine"]["peak_gflops_fp32"])
    assert "DynamicQuantizeMatMul (CPUExecutionProvider)" in res["machine"]["int8_kernels"]["ort_ops"]
    # every timed point is divided by the peak of its own arithmetic (eval/peaks.py)
    for r in res["rows"]:
        for t in ("host-cpu", "mobile-cpu"):
            for k, point in r["latency"].get(t, {}).items():
                if isinstance(point, dict) and "peak_fraction" in point:
                    want = "int8" if "int8" in r["variant"] else "fp32"
                    assert point["peak"] == want, (r["model"], r["variant"], r["format"], t, k)
    ort = _rows(res, "student", "fp32", "ort")
    assert ort["accuracy"] == 0.85 and ort["accuracy_from"] == "onnx"
    st, te = _rows(res, "student", "fp32", "pytorch"), _rows(res, "teacher", "fp32", "pytorch")
    assert st["vs_teacher"]["size_ratio"] == pytest.approx(te["size_bytes"] / st["size_bytes"])
    assert st["vs_teacher"]["quality_retention"] == pytest.approx(0.85 / 0.9)
    s_onnx, t_onnx = _rows(res, "student", "fp32", "onnx"), _rows(res, "teacher", "fp32", "onnx")
    assert s_onnx["vs_teacher"]["speedup"]["host-cpu"] == pytest.approx(
        t_onnx["latency"]["host-cpu"]["16"]["p50_ms"] / s_onnx["latency"]["host-cpu"]["16"]["p50_ms"])
    goals = {g["goal"]: g for g in res["goals"]}
    assert any("1/10" in g for g in goals) and all(g["met"] in (True, False, None) for g in res["goals"])
    # our student against Optimum's, side by side: the .ort that ships on mobile-cpu, the .onnx on host-cpu
    # at batch 1 and at the throughput batch (4 here), each with its own goal
    h2h = {(h["ours"]["variant"], h["target"], h["batch"]): h for h in res["head_to_head"]}
    assert len(h2h) == len(res["head_to_head"])
    assert {(v, t, b) for v in ("fp32", "int8-dynamic") for t in ("host-cpu", "mobile-cpu") for b in (1, 4)} <= set(h2h)
    for (variant, target, batch), h in h2h.items():
        assert h["ours"]["format"] == ("ort" if target == "mobile-cpu" else "onnx")
        assert h["peer"]["variant"] == ("optimum-int8-dynamic" if variant == "int8-dynamic" else "optimum-fp32")
        assert h["rounds"] == 9 and len(h["round_ratios"]) == 9 and h["ours_p50_ms"] > 0
        assert h["iterations_per_round"] == (100 if batch == 1 else 5)
        where = f"{target} at 16 tokens" + (", batch 4" if batch == 4 else "")
        goal = goals[f"our student {variant} at most 0.8x Optimum's time on {where}"]
        assert goal["value"] == h["ratio"] and goal["met"] == (h["ratio"] <= 0.8)
    # which file serves which workload, per target, from these rows (eval/workloads.py)
    for target, fmt in (("host-cpu", "onnx"), ("mobile-cpu", "ort")):
        w = res["workloads"][target]
        assert w["batch1"]["format"] == fmt and w["batch1"]["p50_ms"] > 0
        assert w["batch4"]["format"] == fmt and w["batch4"]["sequences_per_s"] > 0
    broken = json.loads(json.dumps(res))
    broken["rows"][0]["latency"].pop("edge-npu")
    broken["rows"][1]["latency"]["host-cpu"]["16"]["p90_ms"] = -1.0
    problems = validate_results(broken)
    assert any("no latency entry for target 'edge-npu'" in p for p in problems)
    assert any("percentiles out of order" in p for p in problems)


def test_report_files_are_self_contained(benched):
    run, _, _ = benched
    report = run / "report"
    html = (report / "report.html").read_text()
    assert html.count("src='data:image/png;base64,") == 3
    png = html.split("src='data:image/png;base64,")[1].split("'")[0]
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    # nothing fetched from elsewhere (base64 image data may contain the letters "http" by chance)
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", html)
    md = (report / "report.md").read_text()
    for png_name in ("quality_vs_latency.png", "latency_vs_length.png", "size_vs_quality.png"):
        assert f"]({png_name})" in md and (report / png_name).stat().st_size > 10_000
    assert "Host proxies: mobile-cpu" in md and "ESTIMATE" in md and "Edge NPU readiness" in md
    assert "| student | int8-static |" in md  # the readiness table row
    # every provider's nodes and partitions, for the static NPU files too
    assert "CoreML NeuralNetwork nodes" in md and "| student | npu-nnapi-int8 | NNAPI |" in md


def test_npu_files_on_edge_npu_only_with_every_variant_checked(benched):
    _, lat, _ = benched
    for v, provider in (("npu-nnapi-int8", "nnapi"), ("npu-coreml-int8w", "coreml_mlprogram")):
        r = _rows(lat, "student", v, "onnx-npu")
        mine = r["npu"]["onnx"][provider]["as_is"]
        assert mine["partitions"] == 1 and mine["supported_nodes"] == mine["total_nodes"]
        assert r["latency"]["edge-npu"]["status"] == "not measured here"
        assert "16" in r["latency"]["edge-npu"]["estimate"]["by_length"]
        assert "static-shape NPU file" in r["latency"]["host-cpu"]["reason"]
    # variants edge-npu does not run still get the checker's verdict (the report's table has every variant)
    fp32 = _rows(lat, "teacher", "fp32", "onnx")
    assert fp32["latency"]["edge-npu"]["status"] == "skipped" and fp32["npu"]["onnx"]["nnapi"]["as_is"]["total_nodes"] > 0


def test_unknown_target_fails_before_any_work(tiny_run):
    from pipeline.errors import PipelineError
    from pipeline.stage import run_stage

    with pytest.raises(PipelineError, match="unknown target 'phone-npu'.*host-cpu, mobile-cpu, edge-npu, desktop-gpu"):
        run_stage(_cfg(tiny_run, targets=["host-cpu", "phone-npu"]), "bench")  # refused when the config loads
    assert not (_cfg(tiny_run).run_dir / ".bench.partial").exists()
    with pytest.raises(PipelineError, match=r"'bench.headline_length' = 100 is not one of 'bench.seq_lengths'"):
        run_stage(_cfg(tiny_run, headline_length=100), "bench")  # refused when the config loads
    with pytest.raises(PipelineError, match="unknown NPU device profile 'pixel-99' in bench.npu_device. Known: apple-a17-pro"):
        run_stage(_cfg(tiny_run, npu_device="pixel-99"), "bench")
    with pytest.raises(PipelineError, match="'bench.head_to_head_rounds' = -2 must be >= 0"):
        run_stage(_cfg(tiny_run, head_to_head_rounds=-2), "bench")


@pytest.mark.e2e
def test_pipeline_runs_through_report(tiny_cfg_dict):
    """The real stages end to end on the shared tiny config: train, quantize, export .ort, bench, report.
    (Core ML is left out here for time; the fabricated run above covers a Core ML row.)"""
    from eval.results import validate_results
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    d = dict(tiny_cfg_dict, export={"coreml_models": []},
             bench={"seq_lengths": [8, 16, 32], "headline_length": 16, "warmup": 1, "iterations": 4,
                    "min_iterations": 3, "max_seconds_per_point": 0.1, "throughput_batch": 4})
    cfg = config_from_dict(d, "tiny-e2e")
    ran = run(cfg, ["report"])
    assert ran[-2:] == ["bench", "report"]
    res = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    assert validate_results(res) == []
    keys = {(r["model"], r["variant"], r["format"]) for r in res["rows"]}
    for model in ("teacher", "student", "lstm", "lstm_distilled"):
        assert {(model, "fp32", "pytorch"), (model, "fp32", "onnx"), (model, "int8-dynamic", "ort")} <= keys
    assert ("student", "optimum-int8-dynamic", "onnx") in keys
    ours = next(r for r in res["rows"] if r["model"] == "student" and r["format"] == "pytorch")
    peer = next(r for r in res["rows"] if r["model"] == "student" and r["variant"] == "optimum-fp32")
    assert peer["accuracy"] == pytest.approx(ours["accuracy"])  # same weights, same test texts
    assert (cfg.run_dir / "report" / "report.html").stat().st_size > 50_000


def test_gpu_target_never_files_cpu_numbers(tiny_run, monkeypatch, tmp_path):
    """onnxruntime falls back to the CPU with only a warning when CUDA cannot start; that must be a failure
    on desktop-gpu, not CPU latencies under a GPU name."""
    import eval.bench as B
    import eval.targets as T
    from transformers import AutoTokenizer

    monkeypatch.setattr(T, "cuda_backend", lambda: "ort-cuda")
    monkeypatch.setattr(B, "cuda_backend", lambda: "ort-cuda")
    monkeypatch.setattr(T, "ort_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    run = tiny_run / "runs" / "tiny"
    rows = B.collect_rows(run)
    row = next(r for r in rows if (r["model"], r["variant"], r["format"]) == ("teacher", "fp32", "onnx"))
    folders = {"teacher": run / "teacher" / "model"}
    models = B.Models(folders, {"teacher": AutoTokenizer.from_pretrained(folders["teacher"])})
    bench = B.Bench(_cfg(tiny_run), models, ["good day", "bad movie"], {"peak_gflops_fp32": {"1": 1.0}}, tmp_path)
    entry, npu = bench.row_target(T.get_target("desktop-gpu"), row)
    assert npu is None and entry["status"] == "pending"  # GPU points are timed together, after the other targets
    bench.time_deferred()
    assert entry["status"] == "failed"
    assert "CUDAExecutionProvider could not be created" in entry["reason"]


def test_a_headline_past_the_students_max_length_is_warned(caplog):
    """bench.headline_length above student.max_length: the headline figures are for inputs the bundle's tokenizer
    never lets through, and the log says so before anything is timed."""
    from types import SimpleNamespace

    from pipeline.config import config_from_dict
    from pipeline.tasks.classification.bench import stage_bench

    class Stop(Exception):
        pass

    def stop(_):
        raise Stop

    cfg = config_from_dict({"student": {"max_length": 32}})
    with pytest.raises(Stop):
        stage_bench(SimpleNamespace(cfg=cfg, input=stop))
    assert "bench.headline_length = 64 is past student.max_length (32)" in caplog.text


def test_desktop_gpu_points_are_timed_together_in_interleaved_rounds(tiny_run, monkeypatch, tmp_path):
    """desktop-gpu entries are handed out pending and filled in place once every row's session is open: each
    point's calls are spread over GPU_ROUNDS rounds (here ONNX Runtime's CPU provider stands in for CUDA). A
    session that cannot open fails its own row only."""
    import eval.bench as B
    import eval.targets as T
    from eval.plan import Point
    from transformers import AutoTokenizer

    run = tiny_run / "runs" / "tiny"
    rows = B.collect_rows(run)
    pick = [next(r for r in rows if (r["model"], r["variant"], r["format"]) == (m, v, "onnx"))
            for m, v in (("teacher", "fp32"), ("teacher", "int8-dynamic"), ("student", "fp32"))]
    folders = {"teacher": run / "teacher" / "model", "student": run / "distill" / "student"}
    models = B.Models(folders, {m: AutoTokenizer.from_pretrained(f) for m, f in folders.items()})
    bench = B.Bench(_cfg(tiny_run), models, ["good day", "bad movie"], {"peak_gflops_fp32": {"1": 1.0}}, tmp_path)
    opened = []

    def runner(t, row, threads):
        opened.append(row["variant"])
        if row["model"] == "student":
            raise RuntimeError("no kernel for this file")
        return L.ort_runner(L.ort_session(row["_path"], 1, ["CPUExecutionProvider"])), "CPUExecutionProvider"
    monkeypatch.setattr(bench, "runner", runner)
    from eval import latency as L

    gpu = T.get_target("desktop-gpu")
    entries = [bench.measure(gpu, r, Point([8, 16], True, {"32": "too long"})) for r in pick]
    assert all(e["status"] == "pending" for e in entries) and opened == []
    bench.time_deferred()
    assert opened == ["fp32", "int8-dynamic", "fp32"] and bench.deferred == []  # one session per row
    for e in entries[:2]:
        assert e["session"]["rounds"] == B.GPU_ROUNDS == 10 and e["session"]["provider"] == "CPUExecutionProvider"
        assert e["8"]["iterations"] >= bench.plan.min_iterations and e["8"]["p50_ms"] > 0
        assert e["throughput_b4"]["sequences_per_s"] == pytest.approx(4 / (e["throughput_b4"]["p50_ms"] / 1e3))
        assert e["32"] == {"status": "skipped", "reason": "too long"}
    assert entries[2] == {"status": "failed", "reason": "RuntimeError: no kernel for this file"}


def test_interleaved_rounds_spread_drift_over_every_call():
    """A machine that is slow for the first half of the calls and fast after: timed one after the other, two
    identical calls differ 4x; in alternating rounds they come out alike. A call that raises drops out alone."""
    import time

    from eval import latency as L

    count = [0]

    def call():
        count[0] += 1
        time.sleep(0.002 if count[0] <= 20 else 0.0005)
    plan = L.Plan(0, 20, 10.0, 20)
    one_by_one = [L.summarize(L.time_calls(call, plan))["p50_ms"] for _ in range(2)]
    assert one_by_one[0] / one_by_one[1] > 2.5
    count[0] = 0

    def broken():
        raise ValueError("session lost")
    samples, failed = L.time_interleaved({"a": (call, plan), "b": (call, plan), "c": (broken, plan)}, rounds=10)
    a, b = (L.summarize(samples[k])["p50_ms"] for k in "ab")
    assert len(samples["a"]) == len(samples["b"]) == 20 and 0.6 < a / b < 1.6
    assert set(samples) == {"a", "b"} and isinstance(failed["c"], ValueError)
