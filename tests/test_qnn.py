"""The Qualcomm HTP compiler check (eval/qnn.py) and the compile stage: a tiny uint8 QDQ model compiled for
an HTP and run on the emulator against the CPU, a model with a node the HTP refuses, the stage's qnn.json
rows, and the skip where onnxruntime-qnn is missing. Compile and emulator tests skip where it is absent."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from eval import qnn

MISSING = qnn.unavailable_reason()
needs_qnn = pytest.mark.skipif(MISSING is not None, reason=f"HTP compiler unavailable: {MISSING}")


def tiny_qdq(path: Path, extra_erf: bool = False) -> Path:
    """A float MatMul + Add + Relu (+ Erf, which the HTP refuses on its own) quantized to uint8 QDQ."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r" if extra_erf else "logits"], name="relu")]
    if extra_erf:
        nodes.append(helper.make_node("Erf", ["r"], ["logits"], name="my_erf"))
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32), "W"),
                               numpy_helper.from_array(rng.normal(size=(8,)).astype(np.float32), "B")])
    fp32 = path.with_suffix(".fp32.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.normal(size=(1, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(fp32), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)
    return path


def test_chip_registry_and_config_check():
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError

    assert (qnn.CHIPS["8gen3"].soc_model, qnn.CHIPS["8gen3"].htp_arch) == ("57", "75")
    assert qnn.DEFAULT_CHIPS == ["8gen2", "8gen3", "8elite"]
    with pytest.raises(PipelineError, match="unknown Snapdragon chip 'sd865' in 'npu.chips'.*8gen2, 8gen3, 8elite"):
        config_from_dict({"npu": {"chips": ["8gen3", "sd865"]}})


def test_parse_log_names_refused_nodes_not_fusion_attempts():
    log = ("\x1b[1;31m2026-11-24 14:33:54.9 [E:onnxruntime:, qnn_execution_provider.cc:2453 GetCapabilityImpl] "
           "Unsupported nodes in QNN EP: { name: emb/Gather, type: Gather }{ name: l0/Erf, type: Erf }\x1b[m\n"
           "2026 [W:onnxruntime:, x.cc:1 F] QNN.backendValidateOpConfig() failed for node `emb/Gather` of type "
           "`Gather` with error code 3110\n"
           "2026 [W:onnxruntime:, x.cc:1 F] [GeluFusion] ValidateOnQnn failed for GELU pattern (target Erf='l0/Erf'):"
           " QNN.backendValidateOpConfig() failed for node `l0/Div` of type `Gelu` with error code 3110\n")
    got = qnn.parse_log(log)
    assert got["unsupported"] == [{"name": "emb/Gather", "type": "Gather", "error_code": 3110},
                                  {"name": "l0/Erf", "type": "Erf"}]
    assert not any("Gelu" in m for m in got["messages"])
    assert got["messages"][0].startswith("Unsupported nodes in QNN EP")


@needs_qnn
def test_tiny_qdq_compiles_and_the_emulator_agrees_with_the_cpu(tmp_path):
    model = tiny_qdq(tmp_path / "tiny.onnx")
    rec = qnn.compile_htp(model, "8gen3", tmp_path / "ctx", "tiny-16")
    assert rec["compiled"] is True and rec["unsupported"] == []
    assert rec["nodes_on_htp"] == rec["nodes_total"] > 0
    assert set(rec["context_files"]) == {"tiny-16_ctx.onnx", "tiny-16_ctx_qnn.bin"}
    assert rec["context_bytes"] == sum(p.stat().st_size for p in (tmp_path / "ctx").iterdir())
    feeds = [{"x": np.random.default_rng(i).normal(size=(1, 16)).astype(np.float32)} for i in range(8)]
    num = qnn.emulate(Path(rec["context"]), model, "8gen3", feeds)
    assert num["samples"] == 8 and num["argmax_agreement"] >= 0.875
    assert 0 <= num["max_abs_diff"] < 0.5  # uint8 QDQ on the HTP vs ORT's CPU QDQ kernels


@needs_qnn
def test_relative_paths_are_the_callers_not_the_workers(tmp_path, monkeypatch):
    """The worker process runs from the repository root: a run folder or bundle given relative to where the user
    is (the default run.runs_dir = "runs", `verify-bundle dist/demo`) must still be found, and nothing written
    into the repository."""
    from pipeline.qnn_worker import emulator_logits

    monkeypatch.chdir(tmp_path)
    model = tiny_qdq(Path("tiny.onnx"))
    rec = qnn.compile_htp(model, "8gen3", Path("ctx"), "tiny-16")
    assert rec["compiled"] is True and set(rec["context_files"]) == {"tiny-16_ctx.onnx", "tiny-16_ctx_qnn.bin"}
    assert (tmp_path / "ctx" / "tiny-16_ctx.onnx").is_file()
    feeds = [{"x": np.random.default_rng(i).normal(size=(1, 16)).astype(np.float32)} for i in range(2)]
    assert qnn.emulate(Path(rec["context"]), model, "8gen3", feeds)["samples"] == 2
    chip = qnn.get_chip("8gen3")
    assert emulator_logits(Path(rec["context"]), chip.soc_model, chip.htp_arch, feeds).shape[0] == 2


@needs_qnn
def test_a_refused_node_gives_compiled_false_and_names_it(tmp_path):
    rec = qnn.compile_htp(tiny_qdq(tmp_path / "erf.onnx", extra_erf=True), "8gen2", tmp_path / "ctx")
    assert rec["compiled"] is False and rec["context"] is None and rec["context_files"] == {}
    assert {"name": "my_erf", "type": "Erf"} in rec["unsupported"]
    assert any("fallback to CPU EP has been explicitly disabled" in m for m in rec["message"])
    assert rec["nodes_on_htp"] < rec["nodes_total"]


def test_a_crashing_compiler_is_a_record_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(qnn, "_worker", lambda job, timeout_s: (None, "the QNN process died (signal 6)\n"
                                                                      "QNN_COMMON_ERROR_MEM_ALLOC"))
    rec = qnn.compile_htp(tmp_path / "x.onnx", "8elite", tmp_path)
    assert rec["compiled"] is False and rec["message"][0] == "the QNN process died (signal 6)"


def test_a_compile_that_could_not_write_fails_the_stage_instead_of_recording_a_refusal(tmp_path, monkeypatch):
    """A full disk while the compiler wrote its context cache was recorded as "not compiled", and the finished
    stage never tried again."""
    from pipeline.errors import PipelineError

    monkeypatch.setattr(qnn, "_worker", lambda job, timeout_s: ({
        "compiled": False, "error": "[ONNXRuntimeError] : 1 : FAIL : Failed to write context cache file.",
        "nodes_on_htp": 3, "nodes_total": 5, "htp_partitions": 1, "cpu_nodes": [], "compile_seconds": 1.0}, ""))
    with pytest.raises(PipelineError, match=r"the HTP compile of x.onnx for .* could not write .* \(Failed to write "
                                            r"context cache file.\): a full disk or a folder it may not write"):
        qnn.compile_htp(tmp_path / "x.onnx", "8elite", tmp_path)


def test_an_emulator_past_its_time_is_an_error_not_a_traceback(tmp_path):
    """verify-bundle's emulator replay and the compile stage's share one worker call: a worker past its timeout
    is a message either way (subprocess.TimeoutExpired reached verify-bundle's user as a traceback before)."""
    from pipeline.qnn_worker import emulator_logits

    feeds = [{"x": np.zeros((1, 16), np.float32)}]
    with pytest.raises(RuntimeError, match=r"^timed out after 0 s"):
        emulator_logits(tmp_path / "x_ctx.onnx", "60", "v75", feeds, timeout_s=0.01)
    got = qnn.emulate(tmp_path / "x_ctx.onnx", tmp_path / "x.onnx", "8gen3", feeds, timeout_s=0.01)
    assert got["error"].startswith("timed out after 0 s")


def _fixture_run(tmp_path: Path) -> Path:
    """A run folder with what the compile stage reads: data/test.jsonl, quantize/variants.json + one
    tokenizer, and a tiny QDQ file standing in for the student's int8-static (its input is x, fed zeros)."""
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "test.jsonl").write_text("".join(json.dumps({"text": f"text {i}", "label": "a"}) + "\n"
                                                     for i in range(4)))
    q = run / "quantize" / "student"
    (q / "tokenizer").mkdir(parents=True)
    tiny_qdq(q / "int8-static.onnx")
    (run / "quantize" / "variants.json").write_text(json.dumps([
        {"model": "student", "variant": "int8-static", "format": "onnx", "status": "passed",
         "file": "quantize/student/int8-static.onnx"},
        {"model": "teacher", "variant": "int8-static", "format": "onnx", "status": "passed",
         "file": "quantize/teacher/int8-static.onnx"}]))
    return run


def _ctx(run: Path, cfg):
    from pipeline.task import StageContext

    (run / "compile").mkdir()
    return StageContext(cfg, "compile", run / "compile", run, ("data", "quantize"))


@needs_qnn
def test_the_stage_writes_a_row_per_file_length_and_chip(tmp_path, monkeypatch):
    from pipeline.config import config_from_dict
    from pipeline.tasks.classification import compile as C

    run = _fixture_run(tmp_path)
    monkeypatch.setattr("eval.npu.fix_shapes", lambda src, dst, b, n: Path(src))  # the tiny graph is [1, 16]
    monkeypatch.setattr(C, "feeds", lambda job, path, texts: [{"x": np.full((1, 16), i / 4, np.float32)}
                                                              for i in range(len(texts))])
    cfg = config_from_dict({"quantize": {"npu_lengths": [16]}, "npu": {"chips": ["8gen2", "8elite"],
                                                                       "emulator_samples": 3}})
    summary = C.stage_compile(_ctx(run, cfg))
    doc = json.loads((run / "compile" / "qnn.json").read_text())
    assert summary["rows"] == 2 and summary["emulator_samples"] == 3
    assert [(r["model"], r["variant"], r["length"], r["chip"]) for r in doc["rows"]] == \
        [("student", "int8-static", 16, "8gen2"), ("student", "int8-static", 16, "8elite")]  # no teacher
    for r in doc["rows"]:
        assert r["status"] == "passed" and r["compiled"] and r["nodes_on_htp"] == r["nodes_total"]
        assert r["emulator"]["samples"] == 3 and r["emulator"]["argmax_agreement"] >= 0.9
        assert r["context"] == f"compile/qnn/student/{r['chip']}/int8-static-16_ctx.onnx"
        assert (run / r["context"]).is_file() and r["context_bytes"] > 0 and r["compile_seconds"] >= 0
    assert "timings are not a phone's" in doc["emulator_note"]
    # the emulator gives 8 Elite the same logits as 8 Gen 2 on the probe text: its numerics are reused
    assert doc["rows"][1]["emulator"]["numerics_from"] == "8gen2" and doc["emulator_chips"] == "probe"


def test_the_stage_records_why_when_onnxruntime_qnn_is_missing(tmp_path, monkeypatch, caplog):
    from pipeline.config import config_from_dict
    from pipeline.tasks.classification import compile as C

    run = tmp_path / "run"
    (run / "quantize").mkdir(parents=True)
    (run / "data").mkdir()
    why = "onnxruntime-qnn is not installed (pip install '.[qnn]'; wheels exist for Linux x86_64)"
    monkeypatch.setattr(qnn, "unavailable_reason", lambda: why)
    summary = C.stage_compile(_ctx(run, config_from_dict({})))
    assert summary == {"skipped": why}
    assert json.loads((run / "compile" / "qnn.json").read_text()) == {"skipped": why, "rows": []}
    assert why in caplog.text


def test_unavailable_reason_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "onnxruntime_qnn" else real(n, *a))
    assert qnn.unavailable_reason().startswith("onnxruntime-qnn is not installed (pip install '.[qnn]'")
    assert qnn.compiler_state() == "absent"


def test_compiler_state_is_the_version_or_the_kind_of_failure(monkeypatch):
    """What the compile stage is keyed on: the installed version where the compiler runs, else that version and
    the kind of failure (never the message, which can name paths), so the same install gives the same state."""
    import importlib.metadata
    import importlib.util
    import types

    import onnxruntime

    if not hasattr(onnxruntime, "register_execution_provider_library"):
        pytest.skip(f"onnxruntime {onnxruntime.__version__} loads no plugins")
    real_spec, real_version = importlib.util.find_spec, importlib.metadata.version
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: object() if n == "onnxruntime_qnn" else real_spec(n, *a))
    monkeypatch.setattr(importlib.metadata, "version", lambda n: "9.9.9" if n == "onnxruntime-qnn" else real_version(n))
    fake = types.ModuleType("onnxruntime_qnn")
    fake.get_qnn_htp_path = lambda: __file__
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", fake)

    def broken():
        raise OSError("libQnnHtp.so: cannot open shared object file at /some/where")

    fake.get_library_path = broken
    assert qnn.compiler_state() == "9.9.9, does not load (OSError)"
    assert qnn.unavailable_reason().startswith("onnxruntime-qnn does not load (OSError: libQnnHtp.so")
    fake.get_library_path = lambda: "/no/such/libonnxruntime_providers_qnn.so"
    assert qnn.compiler_state() == "9.9.9, lacks libonnxruntime_providers_qnn.so"
    fake.get_library_path = lambda: __file__
    assert qnn.compiler_state() == "9.9.9" and qnn.unavailable_reason() is None


def test_the_compile_stage_is_keyed_on_the_compilers_state(monkeypatch, tmp_path):
    """Classification's compile records onnxruntime-qnn's state with its sources, so a skip made without it re-runs
    once it is installed; generation's compile never runs the compiler and is not keyed on it."""
    from pipeline.config import config_from_dict
    from pipeline.stage import source_digests

    monkeypatch.setattr(qnn, "compiler_state", lambda cfg=None: "absent")
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    assert source_digests(cfg, "compile") == {"onnxruntime-qnn": "absent"}
    monkeypatch.setattr(qnn, "compiler_state", lambda cfg=None: "2.7.0")
    assert source_digests(cfg, "compile") == {"onnxruntime-qnn": "2.7.0"}
    assert source_digests(cfg, "quantize") == {}
    gen = config_from_dict({"run": {"runs_dir": str(tmp_path), "task": "generation"}})
    assert source_digests(gen, "compile") == {}


def test_report_verdict_is_one_row_per_model_variant_with_lengths_per_chip():
    from eval.report import _qnn_htp

    def row(model, variant, n, chip, status, **kw):
        base = {"model": model, "variant": variant, "length": n, "chip": chip, "status": status,
                "nodes_on_htp": 10, "nodes_total": 10 if status == "passed" else 11, "unsupported": []}
        return {**base, **kw}

    emu = {"argmax_agreement": 1.0, "samples": 8, "max_abs_diff": 0.01}
    rows = [row("student", "npu-x", n, c, "passed", context_bytes=100 + n, emulator=emu)
            for n in (16, 64) for c in ("8gen2", "8gen3")]
    rows[-1] = row("student", "npu-x", 64, "8gen3", "failed: disagrees", context_bytes=164,
                   emulator={**emu, "argmax_agreement": 0.5})
    rows += [row("lstm", "int8-static", 16, c, "not compiled",
                 unsupported=[{"name": "a", "type": "DynamicQuantizeLSTM"}, {"name": "b", "type": "DynamicQuantizeLSTM"}])
             for c in ("8gen2", "8gen3")]
    blocks = _qnn_htp({"qnn_htp": {"chips": {"8gen2": "Snapdragon 8 Gen 2", "8gen3": "Snapdragon 8 Gen 3"},
                                   "rows": rows, "compiler": {"onnxruntime-qnn": "2.7.0"}, "numerics": "n",
                                   "emulator_note": "no latency", "min_argmax_agreement": 0.99}})
    assert blocks[0][0] == "p" and "COMPILER VERDICT" in blocks[0][1] and "onnxruntime-qnn 2.7.0" in blocks[0][1]
    kind, header, table = blocks[1]
    assert header[2:4] == ["Snapdragon 8 Gen 2: lengths", "Snapdragon 8 Gen 3: lengths"]
    assert table[0][:4] == ["student", "npu-x", "16, 64", "16 (failed: disagrees at the others)"]
    assert table[0][5:8] == ["none", "116-164", "50.0% (of 8 each)"]
    assert table[1][:4] == ["lstm", "int8-static", "no", "no"] and table[1][5] == "DynamicQuantizeLSTM x2"
    assert len(blocks) == 2  # no variant was skipped whole: no note under the table
    why = "not compiled: it failed its check in the quantize stage (argmax agreement 0.91 < 0.95)"
    failed = [row("student", "nnapi-int8", n, c, "skipped", reason=why, nodes_total=None)
              for n in (16, 64) for c in ("8gen2", "8gen3")]
    blocks = _qnn_htp({"qnn_htp": {"chips": {"8gen2": "Snapdragon 8 Gen 2", "8gen3": "Snapdragon 8 Gen 3"},
                                   "rows": rows + failed}})
    assert blocks[1][2][2][:4] == ["student", "nnapi-int8", "no", "no"] and blocks[2] == ("p", f"student nnapi-int8: {why}")
    assert _qnn_htp({"qnn_htp": {"skipped": "onnxruntime-qnn is not installed", "rows": []}}) == [
        ("p", "Qualcomm HTP compiler: not run (onnxruntime-qnn is not installed).")]


def test_report_node_counts_come_from_the_longest_length_that_compiled():
    """A length past the model's maximum is a skip without node counts: the column shows the longest one that has
    them (it was blank whenever the longest listed length was such a skip)."""
    from eval.report import _qnn_htp

    rows = [{"model": "student", "variant": "int8-static", "length": n, "chip": "8gen2", "status": status,
             "nodes_on_htp": nodes, "nodes_total": nodes, "unsupported": []}
            for n, status, nodes in ((16, "passed", 170), (32, "passed", 175), (64, "skipped: past max_length", None))]
    table = _qnn_htp({"qnn_htp": {"chips": {"8gen2": "Snapdragon 8 Gen 2"}, "rows": rows}})[1][2]
    assert table[0][3] == "175/175"


def test_other_chips_reuse_the_first_chips_numerics_only_where_their_probe_logits_are_identical(monkeypatch):
    """npu.emulator_chips = "probe": the second chip runs one text; identical logits -> numerics_from the first
    chip; different logits -> every text on that chip too. "all" runs every text everywhere."""
    from pipeline.tasks.classification import compile as C

    calls = []
    logits = {"a": np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.2]]), "b": None}

    def fake_emulate(context, src, chip, feeds):
        calls.append((chip, len(feeds)))
        got = logits[chip if chip in logits and logits[chip] is not None else "a"][: len(feeds)]
        if chip == "c":
            got = got + 1e-6  # a chip whose numerics differ in the last bits
        want = logits["a"][: len(feeds)]
        return {"samples": len(feeds), "argmax_agreement": float(np.mean(got.argmax(-1) == want.argmax(-1))),
                "max_abs_diff": float(np.abs(got - want).max()), "emulator_seconds_per_inference": 0.1,
                "logits": got, "cpu_logits": want}

    monkeypatch.setattr("eval.qnn.emulate", fake_emulate)
    monkeypatch.setattr(C, "feeds", lambda job, path, texts: [{"x": np.zeros(1)} for _ in texts])
    recs = {c: {"compiled": True, "context": f"/x/{c}.onnx"} for c in ("a", "b", "c")}
    recs["d"] = {"compiled": False, "context": None}
    nums = C.emulate_compiled(recs, {}, Path("src.onnx"), ["t1", "t2", "t3"], workers=1)
    assert sorted(calls) == [("a", 3), ("b", 1), ("c", 1), ("c", 3)]
    assert set(nums) == {"a", "b", "c"}
    assert nums["b"]["numerics_from"] == "a" and nums["b"]["probe_texts"] == 1 and nums["b"]["samples"] == 3
    assert "numerics_from" not in nums["c"] and nums["c"]["samples"] == 3 and nums["c"]["max_abs_diff"] > 0
    assert all("logits" not in n and "cpu_logits" not in n for n in nums.values())  # JSON-ready
    calls.clear()
    C.emulate_compiled(recs, {}, Path("src.onnx"), ["t1", "t2", "t3"], every_chip=True, workers=1)
    assert sorted(calls) == [("a", 3), ("b", 3), ("c", 3)]


def test_a_flip_within_the_emulators_own_logit_difference_is_a_near_tie():
    """The demo student's int8-static file at 32 tokens failed on every chip on one flip in 8 texts: a text whose
    logits span 0.08, CPU margin 0.0127 against a difference of 0.0164. Such a flip is a near tie and counts as
    agreeing; a flip with a wider margin, or one whose difference is large against the logits' spread, does not."""
    from eval.report import _worst_agreement
    from pipeline.tasks.classification.compile import _row

    want = np.array([[2.0, -1.0, 0.5]] * 7 + [[0.01, 0.0227, -0.05]], dtype=np.float32)
    got = want.copy()
    got[7] = [0.0264, 0.0227, -0.05]  # +0.0164 on class 0: the emulator picks it, the CPU led with 1 by 0.0127
    num = qnn.summarize(got, want)
    assert num["argmax_agreement"] == 7 / 8 and num["near_ties"] == 1
    far = got.copy()
    far[7] = [0.5, 0.0227, -0.05]  # the same flip from a difference of 0.49: 16% of the logits' spread (3.0)
    assert qnn.summarize(far, want)["near_ties"] == 0
    wide = want.copy()
    wide[6] = [-1.0, 2.0, 0.5]  # a confident text whose label changes: margin 3.0, no tie
    assert qnn.summarize(wide, want)["near_ties"] == 0
    assert qnn.near_ties(got[:0], want[:0]) == 0

    nan = np.full_like(want, np.nan)  # NaN rows pick class 0 under numpy's argmax, as the CPU does on 7 of 8
    assert qnn.summarize(nan, want)["argmax_agreement"] == 0.0 and qnn.summarize(nan, want)["near_ties"] == 0

    base = {"model": "student", "variant": "int8-static", "length": 32}
    rec = {"chip": "8gen2", "compiled": True, "context": None, "nodes_on_htp": 9, "nodes_total": 9, "unsupported": []}
    assert _row(base, rec, num, str, 0.9)["status"] == "passed"  # 7/8 + 1 near tie
    failed = _row(base, rec, {**num, "near_ties": 0}, str, 0.9)
    assert failed["status"] == "failed: disagrees" and "87.5% of 8 test texts; the minimum is 90.0%" in failed["reason"]
    two = _row(base, rec, {**num, "argmax_agreement": 0.75, "near_ties": 1}, str, 0.9)
    assert "75.0% of 8 test texts (87.5% with its 1 near tie(s)); the minimum" in two["reason"]
    assert _worst_agreement([{**num}, {"argmax_agreement": 1.0, "samples": 8}]) == \
        "87.5% (of 8 each; 1 near tie, counted as agreeing)"
    assert _worst_agreement([{"argmax_agreement": 1.0, "samples": 8}]) == "100.0% (of 8 each)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_the_pipeline_that_started_it(tmp_path):
    """A `kill` of the pipeline left its QNN workers compiling into the dead run's folder, beside the next run:
    each worker now asks the kernel to kill it when its parent dies."""
    import signal
    import subprocess
    import time

    child = tmp_path / "child.pid"
    (tmp_path / "worker.py").write_text(
        "import os, sys, time\nfrom pipeline.qnn_worker import die_with_parent\n"
        f"die_with_parent(int(sys.argv[1]))\nopen({str(child)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    (tmp_path / "parent.py").write_text(
        f"import os, subprocess, sys\nsubprocess.run([sys.executable, {str(tmp_path / 'worker.py')!r}, "
        f"str(os.getpid())])\n")
    repo = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], cwd=repo,
                              env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    deadline = time.time() + 30
    while not child.exists() or not child.read_text():
        assert time.time() < deadline and parent.poll() is None, "the worker never started"
        time.sleep(0.05)
    pid = int(child.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text():
        assert time.time() < deadline, "the worker outlived its parent"
        time.sleep(0.05)


def test_the_bench_is_keyed_on_where_each_target_runs_here(monkeypatch, tmp_path):
    """The bench of either task records where each of bench.targets runs on this machine, so a target skipped for
    want of Chromium or a GPU is timed once they are there, and the web bundle records whether its page check can
    drive Chromium; no path or reason is recorded (the same machine gives the same words every time)."""
    import eval.browser as B
    import eval.targets as T
    from pipeline.config import config_from_dict
    from pipeline.stage import source_digests

    missing = {"browser": "no Chromium on PATH", "cuda": None}
    monkeypatch.setattr(B, "unavailable_reason", lambda configured="": missing["browser"])
    monkeypatch.setattr(T, "cuda_backend", lambda: missing["cuda"])
    monkeypatch.setattr(T, "mobile_provider", lambda: "CPUExecutionProvider")
    targets = ["host-cpu", "mobile-cpu", "browser-wasm", "desktop-gpu"]
    for task in ("classification", "generation"):
        cfg = config_from_dict({"run": {"runs_dir": str(tmp_path), "task": task}, "bench": {"targets": targets}})
        missing.update(browser="no Chromium on PATH", cuda=None)
        assert source_digests(cfg, "bench") == {"bench runtimes": "host-cpu: runs, mobile-cpu: CPUExecutionProvider, "
                                                "browser-wasm: cannot run, desktop-gpu: cannot run"}
        missing.update(browser=None, cuda="ort-cuda")
        assert source_digests(cfg, "bench") == {"bench runtimes": "host-cpu: runs, mobile-cpu: CPUExecutionProvider, "
                                                "browser-wasm: runs, desktop-gpu: ort-cuda"}
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}, "bench": {"targets": ["host-cpu"]},
                            "bundle": {"web": False}})
    assert source_digests(cfg, "bench") == {"bench runtimes": "host-cpu: runs"}
    assert source_digests(cfg, "web-bundle") == {"browser": "can drive Chromium"}
    missing["browser"] = "no Chromium on PATH"
    assert source_digests(cfg, "web-bundle") == {"browser": "cannot drive Chromium"}
