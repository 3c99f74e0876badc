"""The app bundle's HTP context binaries (export/qnn_bundle.py): only compile rows that passed are shipped,
one variant per chip at every length it passed, with the metadata an app needs; verify-bundle re-runs them on
the HTP emulator against the stored reference logits and refuses edited metadata; the Kotlin sample picks
the chip by Build.SOC_MODEL and falls back to the CPU .ort with a log line. Emulator parts skip where
onnxruntime-qnn is absent."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from eval import qnn
from export.qnn_bundle import add_qnn_files

MISSING = qnn.unavailable_reason()
needs_qnn = pytest.mark.skipif(MISSING is not None, reason=f"HTP compiler unavailable: {MISSING}")


def token_classifier(path: Path, n: int, classes: int = 3) -> Path:
    """A tiny uint8 QDQ classifier over int32 input_ids / attention_mask [1, n] (ids cast to float, masked,
    one MatMul): the inputs and outputs of the npu student's files, without a Gather."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Cast", ["input_ids"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xf", "mf"], ["xm"]),
             helper.make_node("Mul", ["xm", "S"], ["xs"]),
             helper.make_node("MatMul", ["xs", "W"], ["logits"])]
    graph = helper.make_graph(nodes, "tok", [helper.make_tensor_value_info(k, TensorProto.INT32, [1, n])
                                             for k in ("input_ids", "attention_mask")],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
                              [numpy_helper.from_array(np.array(0.01, dtype=np.float32), "S"),
                               numpy_helper.from_array(rng.normal(size=(n, classes)).astype(np.float32), "W")])
    fp32 = path.with_suffix(".fp32.onnx")
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input_ids": rng.integers(0, 200, size=(1, n)).astype(np.int32),
                             "attention_mask": np.ones((1, n), dtype=np.int32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(fp32), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)
    return path


def fake_run(tmp: Path, rows: list[dict]) -> Path:
    (tmp / "compile").mkdir(parents=True, exist_ok=True)
    (tmp / "compile" / "qnn.json").write_text(json.dumps({"compiler": {"onnxruntime-qnn": "2.7.0"},
                                                          "emulator_note": "no latency", "rows": rows}))
    return tmp


def test_nothing_shipped_says_why(tmp_path):
    run = fake_run(tmp_path, [{"model": "student", "variant": "int8-static", "length": 64, "chip": "8gen3",
                               "status": "not compiled", "compiled": False,
                               "unsupported": [{"name": "g", "type": "Gather"}, {"name": "e", "type": "Erf"}]},
                              {"model": "student", "variant": "npu-x", "length": 64, "chip": "8gen3",
                               "status": "failed: disagrees", "compiled": True, "unsupported": [],
                               "context": "compile/qnn/student/8gen3/x_ctx.onnx"}])
    got = add_qnn_files(run, run / "compile", "student", tmp_path / "out", fallback="model/s.ort")
    assert got["shipped"] is False
    assert "failed: disagrees" in got["reason"] and "Erf, Gather" in got["reason"]
    assert not (tmp_path / "out").exists()  # a graph that disagreed is never copied
    skipped = tmp_path / "s"
    (skipped / "compile").mkdir(parents=True)
    (skipped / "compile" / "qnn.json").write_text(json.dumps({"skipped": "onnxruntime-qnn is not installed", "rows": []}))
    assert add_qnn_files(skipped, skipped / "compile", "student", tmp_path / "o2", "m.ort") == {
        "shipped": False, "reason": "the compile stage was skipped: onnxruntime-qnn is not installed"}


@needs_qnn
def test_passed_binaries_ship_verify_on_the_emulator_and_an_edit_is_refused(tmp_path):
    from export.app_samples.android import npu_classifier
    from pipeline.errors import PipelineError
    from pipeline.tasks.classification.replay import qnn_logits
    from pipeline.tasks.classification.verify import _qnn
    from pipeline.verify_bundle_meta import check_qnn

    run = tmp_path / "run"
    rows = []
    for n in (8, 16):
        src = token_classifier(run / "quantize" / f"tok-{n}.onnx", n)
        for chip in ("8gen3", "8elite"):
            rec = qnn.compile_htp(src, chip, run / "compile" / "qnn" / "student" / chip, f"npu-tok-{n}")
            assert rec["compiled"], rec["message"]
            rows.append({"model": "student", "variant": "npu-tok", "length": n, "file": f"quantize/tok-{n}.onnx",
                         **rec, "context": Path(rec["context"]).relative_to(run).as_posix(), "status": "passed",
                         "emulator": {"samples": 4, "argmax_agreement": 1.0, "max_abs_diff": 0.01}})
    # a second variant that passed at one length only: the one passed at both lengths is shipped
    rows.append({**rows[0], "variant": "npu-other", "length": 8})
    fake_run(run, rows)
    out = tmp_path / "bundle"
    entry = add_qnn_files(run, run / "compile", "student", out, fallback="model/s.ort", pad_id=0)
    assert entry["shipped"] is True and set(entry["chips"]) == {"8gen3", "8elite"}
    chip = entry["chips"]["8gen3"]
    assert (chip["variant"], chip["lengths"], chip["android_soc_model"]) == ("npu-tok", [8, 16], "SM8650")
    spec = chip["files"]["8"]
    assert spec["file"] == "npu/qnn/8gen3/npu-tok-8_ctx.onnx" and (out / spec["binary"]).is_file()
    assert [i["name"] for i in spec["inputs"]] == ["input_ids", "attention_mask"]
    assert spec["inputs"][0]["type"] == "tensor(int32)" and spec["outputs"][0]["shape"] == [1, 3]

    # samples: one fits both lengths, one only 16; reference logits are the emulator's own
    samples = [{"text": "a", "token_ids": [101, 7, 9, 102], "expected_label": "x"},
               {"text": "b", "token_ids": list(range(100, 112)), "expected_label": "y"}]
    refs = qnn_logits(out, entry, samples)
    assert refs["npu/qnn/8gen3/npu-tok-8_ctx.onnx"][1] is None  # 12 ids do not fit 8
    assert all(r is not None for r in refs["npu/qnn/8gen3/npu-tok-16_ctx.onnx"])
    for i, s in enumerate(samples):
        s["reference_logits"] = {rel: rows[i] for rel, rows in refs.items() if rows[i] is not None}
    files = {p.relative_to(out).as_posix(): "sha" for p in out.rglob("*") if p.is_file()}
    meta = {"labels": ["x", "y", "z"], "qnn": entry, "files": files, "samples_file": "samples.json"}
    check_qnn(out, meta)
    got = _qnn(out, meta, samples)
    assert got["qnn:npu/qnn/8gen3/npu-tok-8_ctx.onnx"]["samples_compared"] == 1
    assert got["qnn:npu/qnn/8elite/npu-tok-16_ctx.onnx"]["max_abs_logit_diff"] < 1e-4
    # a reference edited by more than the tolerance is named
    samples[0]["reference_logits"]["npu/qnn/8gen3/npu-tok-16_ctx.onnx"][0] += 1.0
    with pytest.raises(PipelineError, match="npu-tok-16_ctx.onnx logit x of sample 1"):
        _qnn(out, meta, samples)
    # a binary missing from 'files' would escape the hash check
    del files["npu/qnn/8elite/npu-tok-16_ctx_qnn.bin"]
    with pytest.raises(PipelineError, match=r"qnn.chips.8elite.files.16.binary .* is not in 'files'"):
        check_qnn(out, meta)

    kt = npu_classifier({"run": "t", "labels": ["x", "y", "z"], "qnn": entry, "versions": {"onnxruntime": "1.32.0"},
                         "model": {"name": "student"}, "samples": samples,
                         "models": {"ort": {"file": "model/s.ort", "inputs": [
                             {"name": "input_ids", "type": "tensor(int64)"}, {"name": "attention_mask", "type": "tensor(int64)"}]}}})
    assert '"SM8650" to Chip("8gen3", listOf(8, 16), "npu-tok")' in kt
    assert '"SM8750" to Chip("8elite", listOf(8, 16), "npu-tok")' in kt
    assert 'addConfigEntry("session.disable_cpu_ep_fallback", "1")' in kt and "libQnnHtp.so" in kt
    assert "NPU path off, running s.ort on the CPU: $why" in kt
    assert "IntBuffer.wrap(x)" in kt and "LongBuffer.wrap(LongArray(ids.size)" in kt  # int32 NPU, int64 .ort
    # copies of the binaries are per install (an app update never runs the old ones) and written whole
    assert "getPackageInfo(context.packageName, 0).lastUpdateTime" in kt and "val dst = File(copies, path)" in kt
    assert "part.renameTo(dst)" in kt and kt.index("private val copies") < kt.index("init {")
    assert "assets.open(\"s.ort\")" in kt and "to assets/s.ort" in kt
    assert kt.count("{") == kt.count("}")


def test_no_kotlin_npu_sample_without_binaries():
    from export.app_samples.android import npu_classifier

    assert npu_classifier({"qnn": {"shipped": False, "reason": "x"}}) == ""
    assert npu_classifier({}) == ""


def test_pick_prefers_lengths_then_agreement_then_accuracy_then_size():
    from export.qnn_bundle import _pick

    def row(v, n, agree=1.0, size=100):
        return {"variant": v, "length": n, "emulator": {"argmax_agreement": agree}, "context_bytes": size}

    both = [row("a", 16), row("a", 64), row("b", 16, size=50), row("b", 64, size=50)]
    assert _pick(both, {"a": 0.75, "b": 0.74})[0] == "a"  # same lengths and agreement: the more accurate
    assert _pick(both, {})[0] == "b"  # accuracy unknown: the smaller context binaries
    assert _pick(both + [row("c", 16), row("c", 32), row("c", 64)], {"a": 0.9})[0] == "c"  # passed at more lengths
    assert _pick([row("a", 16, agree=0.99), row("b", 16)], {"a": 0.9})[0] == "b"  # a closer emulator first
    assert _pick([], {}) is None


def test_check_qnn_refuses_edited_chip_ids(tmp_path):
    from pipeline.errors import PipelineError
    from pipeline.verify_bundle_meta import check_qnn

    (tmp_path / "a_ctx.onnx").write_bytes(b"x")
    (tmp_path / "a_ctx_qnn.bin").write_bytes(b"y")
    spec = {"file": "a_ctx.onnx", "binary": "a_ctx_qnn.bin", "inputs": [{"name": "input_ids"}],
            "outputs": [{"name": "logits"}]}
    meta = {"files": {"a_ctx.onnx": "s", "a_ctx_qnn.bin": "s"},
            "qnn": {"shipped": True, "chips": {"8gen3": {"soc_model": "57", "htp_arch": "75", "files": {"16": spec}}}}}
    check_qnn(tmp_path, meta)
    meta["qnn"]["chips"]["8gen3"]["soc_model"] = "57; rm -rf /"
    with pytest.raises(PipelineError, match="soc_model and .htp_arch must be QNN's numeric ids"):
        check_qnn(tmp_path, meta)
    meta["qnn"] = {"shipped": "yes"}
    with pytest.raises(PipelineError, match="'qnn' must say whether it was shipped"):
        check_qnn(tmp_path, meta)


def test_each_context_binary_replays_only_the_first_samples_that_fit_it(monkeypatch):
    """qnn_logits: per file, the first QNN_SAMPLES samples that fit its length get emulator logits, the rest
    None (the same rule at bundle time and in verify-bundle), and files run side by side keep their order."""
    import numpy as np

    from pipeline.tasks.classification import replay

    fed = {}

    def fake(path, soc, arch, feeds):
        fed[path.name] = len(feeds)
        return np.full((len(feeds), 2), float(len(path.name)))

    monkeypatch.setattr("pipeline.qnn_worker.emulator_logits", fake)
    spec = lambda n: {"file": f"npu/qnn/c/v-{n}_ctx.onnx", "inputs": [{"name": "input_ids", "type": "int64"},  # noqa: E731
                                                                        {"name": "attention_mask", "type": "int64"}]}
    qnn = {"pad_id": 0, "chips": {"c": {"soc_model": "43", "htp_arch": "73", "files": {"4": spec(4), "16": spec(16)}}}}
    samples = [{"token_ids": [1] * k} for k in (8, 2, 3, 4, 1)]
    out = replay.qnn_logits(Path("/b"), qnn, samples)
    assert replay.QNN_SAMPLES == 2 and fed == {"v-4_ctx.onnx": 2, "v-16_ctx.onnx": 2}
    assert [r is not None for r in out["npu/qnn/c/v-4_ctx.onnx"]] == [False, True, True, False, False]
    assert [r is not None for r in out["npu/qnn/c/v-16_ctx.onnx"]] == [True, True, False, False, False]


def test_the_verify_line_says_how_many_of_the_fitting_samples_the_emulator_replayed(monkeypatch):
    """verify-bundle replays only the first QNN_SAMPLES samples that fit a context binary: its line said
    "2/8 samples fit its length" when all 8 fit."""
    import importlib.util

    from pipeline.tasks.classification import replay
    from pipeline.tasks.classification.verify import _lines, _qnn

    f16, f2 = "npu/qnn/c/v-16_ctx.onnx", "npu/qnn/c/v-2_ctx.onnx"
    row = [0.1, 0.2, 0.3]
    samples = [{"text": str(k), "token_ids": [1] * k, "expected_label": "x", "reference_logits": {f16: row}}
               for k in (2, 3, 4, 30)]
    spec = lambda n: {"file": f"npu/qnn/c/v-{n}_ctx.onnx", "inputs": [], "outputs": []}  # noqa: E731
    qnn = {"shipped": True, "chips": {"c": {"files": {"16": spec(16), "2": spec(2)}}}}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # as if onnxruntime-qnn were here
    monkeypatch.setattr(replay, "qnn_logits", lambda b, q, s: {f16: [row, row, None, None],
                                                               f2: [row, None, None, None]})
    samples[0]["reference_logits"][f2] = row
    lines = _lines({"samples": 4, "app_samples": 1, "models": _qnn(Path("/b"), {"labels": ["x", "y", "z"], "qnn": qnn}, samples)})
    assert lines[0].startswith(f"qnn:{f16}: {f16}: 2/4 samples replayed (the first 2 of the 3 that fit its "
                               f"length: the HTP emulator takes seconds per text), max |logit - reference|")
    assert lines[1].startswith(f"qnn:{f2}: {f2}: 1/4 samples fit its length, max")  # all that fit ran
