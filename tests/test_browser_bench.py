"""The browser targets (browser-wasm, browser-wasm-mt): a tiny random-weight student's ONNX and .ort files
timed in onnxruntime-web inside headless Chromium, in one browser run. Needs node, web/node_modules and
Chromium (`make web-deps`); without them the test is skipped with the reason the target itself reports."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import browser_or_skip, make_texts, tiny_bert_config, write_tokenizer

LABELS = ["negative", "neutral", "positive"]


@pytest.fixture(scope="module")
def student_files(tmp_path_factory):
    """(models, rows): a 1-layer student folder, its fp32 / int8-dynamic .onnx and .ort files, a file that
    is not a model, and an fp16 row (which the browser does not take)."""
    from distill.models import HFLogits, save_model
    from onnxruntime.quantization import quantize_dynamic
    from transformers import AutoTokenizer, BertForSequenceClassification

    from eval.bench import Models

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("browser_bench")
    tok = write_tokenizer(root / "tok")
    folder = root / "student"
    m = HFLogits(BertForSequenceClassification(tiny_bert_config(num_labels=3, hidden_size=16, num_hidden_layers=1,
                                                                intermediate_size=32, max_position_embeddings=24)))
    save_model(folder, m, tok, LABELS, "hf", 24)
    x = torch.ones(1, 8, dtype=torch.long)
    fp32 = root / "q" / "fp32.onnx"
    fp32.parent.mkdir()
    torch.onnx.export(m.eval(), (x, x), str(fp32), input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      opset_version=17, dynamo=False, dynamic_axes={"input_ids": {0: "b", 1: "s"},
                                                                   "attention_mask": {0: "b", 1: "s"}})
    quantize_dynamic(str(fp32), str(root / "q" / "int8-dynamic.onnx"))
    subprocess.run([sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(root / "q"),
                    "--output_dir", str(root / "ort")], check=True, capture_output=True)
    from export.web_model import fast_gelu_file  # the export stage's browser variant (GELU as FastGelu)

    fast_gelu_file(root / "q" / "int8-dynamic.onnx", root / "ort" / "int8-dynamic-fastgelu.ort", "ort", "arm", [])
    broken = root / "q" / "broken.onnx"
    broken.write_bytes(b"this is not an ONNX model")

    def row(variant, fmt, path):
        return {"model": "student", "variant": variant, "format": fmt, "file": path.name, "_path": path}

    rows = [row("fp32", "onnx", fp32), row("int8-dynamic", "onnx", root / "q" / "int8-dynamic.onnx"),
            row("fp32", "ort", root / "ort" / "fp32.ort"), row("int8-dynamic", "ort", root / "ort" / "int8-dynamic.ort"),
            row("int8-static", "onnx", broken), row("fp16", "onnx", root / "q" / "fp16.onnx"),
            {"model": "student", "variant": "fp32", "format": "pytorch", "file": None, "_path": None},
            row("int8-dynamic-fastgelu", "ort", root / "ort" / "int8-dynamic-fastgelu.ort"),
            # a file that failed its check in its stage: recorded there, never timed (here: a loadable file)
            dict(row("optimized-fastgelu", "ort", root / "ort" / "fp32.ort"), status="failed",
                 check={"reason": "labels agree with the as-trained file on 80.00% of the test split"})]
    models = Models({"student": folder}, {"student": AutoTokenizer.from_pretrained(folder)})
    return models, rows


def _bench(models, tmp_path, **bench):
    from eval.bench import Bench
    from pipeline.config import config_from_dict

    b = {"seq_lengths": [8, 16, 32], "headline_length": 16, "sweep_variants": ["fp32"], "browser_iterations": 3,
         "browser_warmup": 1, "max_seconds_per_point": 0.5, **bench}
    cfg = config_from_dict({"bench": b}, "browser-test")
    texts = [t for t, _ in make_texts(20, seed=2)]
    return Bench(cfg, models, texts, {"peak_gflops_fp32": {"1": 10.0}}, tmp_path)


def dyn_session(out: dict, target: str) -> dict:
    return out[(target, ("student", "int8-dynamic", "ort"))]["session"]


def test_every_file_timed_failed_or_skipped_with_reason(student_files, tmp_path):
    from eval.browser import FILE_WARMUP_S, V8_FLAGS
    from eval.browser_bench import measure_browser
    from eval.targets import get_target, host_threads

    from eval.bench import Models

    browser_or_skip("browser tests")
    models, rows = student_files
    # the teacher's fp32 .onnx / .ort (the student's files stand in): the 1/10 goal's reference
    teacher = [dict(r, model="teacher") for r in rows if (r["variant"], r["format"]) in (("fp32", "onnx"), ("fp32", "ort"))]
    models = Models({**models.folders, "teacher": models.folders["student"]},
                    {**models.tokenizers, "teacher": models.tokenizers["student"]})
    targets = [get_target("browser-wasm"), get_target("browser-wasm-mt"), get_target("host-cpu")]
    out = measure_browser(_bench(models, tmp_path), targets, rows + teacher)
    assert {t for t, _ in out} == {"browser-wasm", "browser-wasm-mt"}  # host-cpu is not a browser target
    for target, threads in (("browser-wasm", 1), ("browser-wasm-mt", host_threads())):
        fp32 = out[(target, ("student", "fp32", "onnx"))]
        # sweep variant: every length the position table (24) holds, then a skip with the reason
        for n in ("8", "16"):
            assert 0 < fp32[n]["min_ms"] <= fp32[n]["p50_ms"] <= fp32[n]["p99_ms"]
            assert 1 <= fp32[n]["iterations"] <= 3 and fp32[n]["gflops"] > 0
        assert fp32["32"]["status"] == "skipped" and "position table" in fp32["32"]["reason"]
        s = fp32["session"]
        assert s["threads"] == threads and s["provider"] == "onnxruntime-web wasm"
        assert s["cross_origin_isolated"] is True and "onnxruntime-web 1.30.0" in s["runtime"]
        # the page compiled the WASM module optimized up front; every file ran untimed first, by time
        assert s["v8_flags"] == "--no-liftoff" == V8_FLAGS
        assert s["warmup_s"] >= FILE_WARMUP_S and dyn_session(out, target)["warmup_s"] >= FILE_WARMUP_S
        assert s["load_s"] > 0 and dyn_session(out, target)["load_s"] > 0  # fetch + session creation, timed
        # other variants: the headline length only
        dyn = out[(target, ("student", "int8-dynamic", "ort"))]
        assert "p50_ms" in dyn["16"] and "sweep" in dyn["8"]["reason"]
        assert "p50_ms" in out[(target, ("student", "fp32", "ort"))]["16"]
        # a file onnxruntime-web cannot load is a failure carrying its error, not a gap
        bad = out[(target, ("student", "int8-static", "onnx"))]
        assert bad["status"] == "failed" and bad["reason"].startswith("onnxruntime-web: ")
        assert "WASM" in out[(target, ("student", "fp16", "onnx"))]["reason"]
        assert out[(target, ("student", "fp32", "pytorch"))]["status"] == "skipped"
        # the browser-only FastGelu file is timed like the others; a failed file is not, and says why
        assert "p50_ms" in out[(target, ("student", "int8-dynamic-fastgelu", "ort"))]["16"]
        failed = out[(target, ("student", "optimized-fastgelu", "ort"))]
        assert failed["status"] == "skipped" and failed["reason"] == \
            "not timed: the file failed its check (labels agree with the as-trained file on 80.00% of the test split)"
    # the browser-wasm rows at the headline length, timed again in Node (eval/browser_cross.py): the same
    # WASM build and onnxruntime-node's native one; a file that failed in Chromium has nothing to cross-check
    check = out[("browser-wasm", ("student", "int8-dynamic", "ort"))]["cross_check"]
    assert check["length"] == 16 and set(check["versions"]) >= {"node", "onnxruntime-web"}
    assert check["node-wasm"]["p50_ms"] > 0 and check["node-wasm"]["iterations"] >= 1
    # timed in interleaved rounds (bench.head_to_head_rounds, 9 by default), each round's p50 kept
    rounds = check["node-wasm"]["round_p50_ms"]
    assert len(rounds) == 9 and all(x > 0 for x in rounds)
    if "onnxruntime-node" in check["versions"]:
        assert check["node-native"]["p50_ms"] > 0
    else:
        assert "onnxruntime-node" in check["node-native"]["error"]
    assert out[("browser-wasm", ("student", "int8-dynamic-fastgelu", "ort"))]["cross_check"]["node-wasm"]["p50_ms"] > 0
    assert "cross_check" not in out[("browser-wasm", ("student", "int8-static", "onnx"))]
    assert "cross_check" not in out[("browser-wasm-mt", ("student", "fp32", "onnx"))]  # 1 thread only
    # every file the web goal can pick, timed again after the 1-thread page's sweep, in the same page, in
    # interleaved rounds (bench.head_to_head_rounds); not the one that failed, or the 2-thread page
    for variant, fmt in (("fp32", "onnx"), ("int8-dynamic", "onnx"), ("int8-dynamic", "ort"),
                         ("int8-dynamic-fastgelu", "ort")):
        r = out[("browser-wasm", ("student", variant, fmt))]["chromium_rounds"]
        assert r["length"] == 16 and len(r["round_p50_ms"]) == 9 and all(x > 0 for x in r["round_p50_ms"])
        assert r["v8_flags"] == V8_FLAGS  # the sweep's page and flags
    assert "chromium_rounds" not in out[("browser-wasm", ("student", "int8-static", "onnx"))]
    assert "chromium_rounds" not in out[("browser-wasm-mt", ("student", "int8-dynamic", "ort"))]
    # the teacher's two files are in Chromium's rounds; Node times the one faster there, in every round
    rounds = {fmt: out[("browser-wasm", ("teacher", "fp32", fmt))]["chromium_rounds"]["round_p50_ms"] for fmt in ("onnx", "ort")}
    faster = min(rounds, key=lambda fmt: sorted(rounds[fmt])[4])
    slower = "ort" if faster == "onnx" else "onnx"
    assert len(out[("browser-wasm", ("teacher", "fp32", faster))]["cross_check"]["node-wasm"]["round_p50_ms"]) == 9
    assert "cross_check" not in out[("browser-wasm", ("teacher", "fp32", slower))]


def test_missing_chromium_is_a_skip_naming_the_setting(student_files, tmp_path):
    from eval.browser_bench import measure_browser
    from eval.targets import get_target

    models, rows = student_files
    out = measure_browser(_bench(models, tmp_path, browser_executable=str(tmp_path / "no-chromium")),
                          [get_target("browser-wasm")], rows)
    assert len(out) == len(rows)
    for entry in out.values():
        assert entry["status"] == "skipped"
    assert any("bench.browser_executable" in e["reason"] or "node" in e["reason"] for e in out.values())


def test_browser_settings_are_checked_when_the_config_loads():
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match="bench.browser_iterations"):
        config_from_dict({"bench": {"browser_iterations": 0}}, "t")


def _lat(p50: float | None) -> dict:
    if p50 is None:
        return {"browser-wasm": {"status": "failed", "reason": "onnxruntime-web: unsupported op"}}
    return {"browser-wasm": {"64": {"p50_ms": p50, "p90_ms": p50, "p99_ms": p50, "mean_ms": p50}}}


def test_browser_goals_read_the_bundle_rule_on_browser_rows():
    from eval.browser_goals import browser_goals

    def row(model, variant, fmt, acc, p50):
        return {"model": model, "variant": variant, "format": fmt, "accuracy": acc, "latency": _lat(p50)}

    rows = [row("teacher", "fp32", "onnx", 0.80, 40.0),
            row("student", "fp32", "onnx", 0.790, 5.0),
            row("student", "int8-static", "onnx", 0.786, 3.0),  # fastest within 1 point: the web pick
            row("student", "int8-dynamic", "ort", 0.770, 1.0),  # faster, but 2 points down: not eligible
            row("student", "int8-dynamic", "onnx", 0.789, None),  # failed in the browser
            row("student", "optimum-fp32", "onnx", 0.790, 6.0),
            row("student", "optimum-int8-dynamic", "onnx", 0.789, 4.0)]
    teacher_goal, peer_goal, node_goal = browser_goals(rows, 64, ["mobile-cpu", "browser-wasm"])
    assert teacher_goal["value"] == pytest.approx(3.0 / 40.0) and teacher_goal["met"] is True
    assert "int8-static .onnx" in teacher_goal["detail"]
    # the limit: <= 0.7x Optimum's faster file
    assert peer_goal["limit"] == 0.7 and "<= 0.7x Optimum's export" in peer_goal["goal"]
    assert peer_goal["value"] == pytest.approx(3.0 / 4.0) and peer_goal["met"] is False
    assert "optimum-int8-dynamic" in peer_goal["detail"] and "cross-check" not in peer_goal["detail"]
    assert node_goal["value"] is None and node_goal["met"] is None and "not measured" in node_goal["detail"]
    # with the Node cross-check on both files, the goal's detail gives the ratio there too, and so does its own goal
    for r, ms in ((rows[2], 2.0), (rows[6], 4.0)):
        r["latency"]["browser-wasm"]["cross_check"] = {"node-wasm": {"p50_ms": ms}}
    goals = browser_goals(rows, 64, ["browser-wasm"])
    assert "cross-check in Node (same WASM build): 0.5" in goals[1]["detail"]
    assert "Node cross-check" in goals[2]["goal"] and goals[2]["limit"] == 0.7
    assert goals[2]["value"] == pytest.approx(0.5) and goals[2]["met"] is True
    assert browser_goals(rows, 64, ["mobile-cpu"]) == []  # not configured: no goal rows
    # the teacher's faster fp32 file is the reference: its .ort, where the browser runs that faster
    rows.append(row("teacher", "fp32", "ort", 0.80, 30.0))
    teacher_goal = browser_goals(rows, 64, ["browser-wasm"])[0]
    assert teacher_goal["value"] == pytest.approx(3.0 / 30.0) and "vs teacher fp32 .ort (its faster file)" in \
        teacher_goal["detail"]
    unmeasured = browser_goals([row("student", "fp32", "onnx", 0.79, None)], 64, ["browser-wasm"])
    assert [g["met"] for g in unmeasured] == [None, None, None]


def test_browser_goals_compare_the_fastgelu_file_the_web_bundle_ships():
    """The export stage's browser-only FastGelu file is a timed row: the goals pick it when it is the fastest
    within the window (as the web bundle does); a FastGelu file that failed its check never counts."""
    from eval.browser_goals import browser_goals

    def row(variant, fmt, acc, p50, **extra):
        return {"model": "student", "variant": variant, "format": fmt, "accuracy": acc, "latency": _lat(p50), **extra}

    rows = [{"model": "teacher", "variant": "fp32", "format": "onnx", "accuracy": 0.8, "latency": _lat(40.0)},
            row("int8-dynamic", "ort", 0.790, 3.2),
            row("int8-dynamic-fastgelu", "ort", 0.786, 2.7),  # within 1 point of 0.790, faster: the pick
            row("optimized-fastgelu", "ort", 0.790, 1.0, status="failed"),  # failed its check: never the pick
            row("int8-static", "onnx", 0.700, 0.5),  # outside the window
            row("optimum-int8-dynamic", "onnx", 0.79, 4.0)]
    rows[2]["latency"]["browser-wasm"]["cross_check"] = {"node-wasm": {"p50_ms": 2.9}}
    rows[5]["latency"]["browser-wasm"]["cross_check"] = {"node-wasm": {"p50_ms": 4.0}}
    _, peer, node = browser_goals(rows, 64, ["browser-wasm"])
    assert "student int8-dynamic-fastgelu .ort" in peer["detail"]
    assert peer["value"] == pytest.approx(2.7 / 4.0) and peer["met"] is True
    assert node["value"] == pytest.approx(2.9 / 4.0) and node["met"] is False  # 0.725 > 0.7: both must hold
    assert "student int8-dynamic-fastgelu .ort" in node["detail"]


def test_node_goal_is_the_median_of_same_round_ratios():
    """The Node cross-check times both files in interleaved rounds (web/cross_check.mjs): the goal is the
    median of the same-round ratios, not the ratio of p50s pooled over rounds that drift hit unevenly."""
    from eval.browser_cross import PER_ROUND, plan
    from eval.browser_goals import browser_goals

    rows = [{"model": "teacher", "variant": "fp32", "format": "onnx", "accuracy": 0.8, "latency": _lat(40.0)},
            {"model": "student", "variant": "int8-dynamic-fastgelu", "format": "ort", "accuracy": 0.79, "latency": _lat(2.7)},
            {"model": "student", "variant": "optimum-int8-dynamic", "format": "onnx", "accuracy": 0.79, "latency": _lat(4.0)}]
    # a slow stretch hit ours in 2 rounds of 5: its pooled p50 (3.0 / 4.0 = 0.75) says the goal failed,
    # each round's ratio (0.65 in the quiet ones) says it held
    rows[1]["latency"]["browser-wasm"]["cross_check"] = {"node-wasm": {"p50_ms": 3.0, "round_p50_ms": [2.6, 2.6, 4.4, 2.6, 4.4]}}
    rows[2]["latency"]["browser-wasm"]["cross_check"] = {"node-wasm": {"p50_ms": 4.0, "round_p50_ms": [4.0, 4.0, 6.0, 4.0, 6.0]}}
    _, peer, node = browser_goals(rows, 64, ["browser-wasm"])
    assert node["value"] == pytest.approx(0.65) and node["met"] is True
    assert "median of 5 interleaved-round ratios (rounds 0.650-0.733)" in node["detail"]
    assert "WASM in Node, 1 thread" in node["detail"]  # no version recorded: none named
    # the engine decides the ratio (docs/results/2026-11-26-node-engine.md): the goal names the Node that ran
    rows[1]["latency"]["browser-wasm"]["cross_check"]["versions"] = {"node": "24.19.0", "onnxruntime-web": "1.30.0"}
    assert "WASM in Node 24.19.0, 1 thread" in browser_goals(rows, 64, ["browser-wasm"])[2]["detail"]
    assert "cross-check in Node (same WASM build): 0.65" in peer["detail"]
    # rounds that do not pair up (a file cut short by max_seconds_per_point): the p50s' ratio
    rows[2]["latency"]["browser-wasm"]["cross_check"]["node-wasm"]["round_p50_ms"] = [4.0, 4.0]
    _, _, node = browser_goals(rows, 64, ["browser-wasm"])
    assert node["value"] == pytest.approx(0.75) and "p50s' ratio" in node["detail"]
    # the cross-check's plan: bench.head_to_head_rounds rounds of at least PER_ROUND calls (0 rounds = 1)
    assert plan(10, 9) == (9, 9 * PER_ROUND) and plan(500, 9) == (9, 500) and plan(10, 0) == (1, PER_ROUND)


def _web_ctx(tmp_path, **bundle):
    from pipeline.config import config_from_dict
    from pipeline.task import StageContext

    cfg = config_from_dict({"bundle": bundle}, "t")
    from pipeline.stage import STAGES

    return StageContext(cfg, "web-bundle", tmp_path, tmp_path, STAGES["web-bundle"].deps)


def test_web_target_must_be_a_browser_target(tmp_path):
    from pipeline.tasks.classification import web as stages_web
    from pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match="bundle.web_target"):
        stages_web.stage_web_bundle(_web_ctx(tmp_path, web_target="mobile-cpu"))


def test_web_bundle_without_onnxruntime_web_is_a_skip_with_the_fix(tmp_path, monkeypatch):
    from export import web_bundle
    from pipeline.tasks.classification import web as stages_web

    monkeypatch.setattr(web_bundle, "ORT_DIST", tmp_path / "nowhere")
    out = stages_web.stage_web_bundle(_web_ctx(tmp_path))
    assert "make web-deps" in out["skipped"]
    assert "make web-deps" in (tmp_path / "README.md").read_text()
    assert "bundle.web = false" in stages_web.stage_web_bundle(_web_ctx(tmp_path, web=False))["skipped"]


def _choice_rows(fastgelu_status="passed", fastgelu_acc=0.786):
    """export / quantize rows and a report with browser-wasm p50s: the FastGelu .ort is the fastest file."""
    def row(variant, fmt, acc, **extra):
        return {"model": "student", "variant": variant, "format": fmt, "accuracy": acc, "size_bytes": 100,
                "status": "passed", "check": {}, **extra}

    rows = [row("int8-dynamic", "onnx", 0.790), row("int8-dynamic", "ort", 0.789),
            row("int8-dynamic-fastgelu", "ort", fastgelu_acc, status=fastgelu_status,
                check={"reason": "test accuracy 0.7 < 0.78", "gelu": {"passed": fastgelu_status == "passed"}},
                details={"source": "quantize/student/int8-dynamic.onnx"})]
    p50 = {("int8-dynamic", "onnx"): 3.5, ("int8-dynamic", "ort"): 3.2, ("int8-dynamic-fastgelu", "ort"): 2.7}
    results = {"plan": {"headline_length": 64}, "targets": {"browser-wasm": {"proxy": ""}},
               "rows": [{"model": "student", "variant": v, "format": f, "latency": {"browser-wasm": {"64": {"p50_ms": t}}}}
                        for (v, f), t in p50.items()]}
    return rows, results


@pytest.mark.parametrize("status, acc, shipped, why", [
    ("passed", 0.786, "int8-dynamic-fastgelu", None),
    ("failed", 0.786, "int8-dynamic", "the FastGelu file failed its check: int8-dynamic-fastgelu: test accuracy"),
    ("passed", 0.700, "int8-dynamic", "int8-dynamic-fastgelu passed its check but was not chosen: fastest browser-wasm"),
])
def test_web_choice_takes_the_measured_fastgelu_row(status, acc, shipped, why):
    """The web bundle chooses among the bench's rows (export/bundle.py's rule): the FastGelu file when it is the
    fastest within the window and passed its check; metadata's model.gelu says which form shipped and why."""
    from export.bundle import choose
    from export.web_bundle import FORMATS
    from export.web_model import gelu_record

    rows, results = _choice_rows(status, acc)
    row = choose(rows, results, "auto", "auto", 0.01, "c.toml", target="browser-wasm", formats=FORMATS)
    assert (row["variant"], row["format"]) == (shipped, "ort")
    rec = gelu_record(row, rows)
    if why is None:
        assert rec["form"] == "FastGelu (tanh approximation)" and rec["check"] == {"passed": True}
        assert rec["source"] == "quantize/student/int8-dynamic.onnx"
        assert [c["browser-wasm_p50_ms"] for c in row["choice"]["candidates"]] == [3.5, 3.2, 2.7]
    else:
        assert rec["form"] == "as trained (erf)" and rec["reason"].startswith(why), rec
        assert ("int8-dynamic-fastgelu" in [c["variant"] for c in row["choice"]["candidates"]]) == (status == "passed")
