"""The quantize stage's check of an npu student's static files (export/npu.py check_variant) and what the later
stages do with a file that fails it: every length's file is run on every check text (a 32-token file is
checked even when no test text is longer than 16 tokens), a failed variant is recorded in npu.json and the
stage goes on, compile / bench / bundle skip it and say so, and each row records the opset its file was
written at (ORT raises the 16-bit QDQ files to 21)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import negate_logits, tiny_run_config
from pipeline.errors import PipelineError
from test_npu_student import texts, tiny_student


def test_a_length_no_text_reaches_is_still_checked(tmp_path):
    """Every check text is at most 13 tokens, so padded to the shortest file that holds it none would reach
    the 32-token file. A broken 32-token file must still fail the check, at 32, with the 16 file's numbers
    fine and every length run on every text."""
    from export.npu import NPU_VARIANTS, NpuRunner, check_variant, length_references, write_variant

    m = tiny_student()
    ids = texts(24, 13, seed=3)
    assert max(map(len, ids)) <= 13
    made = write_variant(m, tmp_path / "npu", "nnapi-int8", [16, 32], 17, texts(16, 16), 0, "student")
    refs = length_references(m, ids, [16, 32])
    good = check_variant(NpuRunner(made["files"], NPU_VARIANTS["nnapi-int8"], None), refs, 0, 0.9, "student")
    assert good["passed"] and set(good["by_length"]) == {"16", "32"}
    assert all(b["texts"] == 24 and b["cut"] == 0 and b["value"] >= 0.9 for b in good["by_length"].values())

    negate_logits(made["files"][32])
    bad = check_variant(NpuRunner(made["files"], NPU_VARIANTS["nnapi-int8"], None), refs, 0, 0.9, "student NPU x")
    assert bad["passed"] is False and bad["worst_length"] == 32
    assert bad["by_length"]["32"]["value"] < 0.2 and bad["by_length"]["16"]["value"] >= 0.9
    assert bad["value"] == bad["by_length"]["32"]["value"] and bad["max_abs_diff"] > 0
    assert "student NPU x: argmax agrees" in bad["reason"] and "at 32 tokens" in bad["reason"]


def test_an_npu_file_that_outputs_nan_fails_its_check():
    """A length's file whose logits are NaN picks class 0 under numpy's argmax: it agreed with every text the
    PyTorch model labels class 0, and the variant passed. NaN logits agree with nothing, and the recorded
    max_abs_diff says NaN whichever length had it."""
    from export.npu import check_variant

    class Runner:
        def at(self, n, ids, pad_id):
            return np.full(2, np.nan, np.float32) if n == 32 else np.array([1.0, 0.0], np.float32)

    ref = np.array([[1.0, 0.0]] * 10, np.float32)  # class 0 on every text
    refs = {n: {"ids": [[2, 5, 3]] * 10, "ref": ref, "cut": 0} for n in (16, 32)}
    check = check_variant(Runner(), refs, 0, 0.9, "student NPU x")
    assert check["passed"] is False and check["worst_length"] == 32 and check["by_length"]["32"]["value"] == 0.0
    assert check["by_length"]["16"]["value"] == 1.0 and np.isnan(check["max_abs_diff"])


def test_longer_texts_are_cut_to_each_length_with_sep_kept(tmp_path):
    """A text longer than a file's length reaches it cut to the length, its last token ([SEP]) kept, and the
    PyTorch reference is computed on the same cut ids."""
    from distill.batching import cut
    from export.npu import NPU_VARIANTS, NpuRunner, check_variant, length_references, torch_logits, write_variant

    assert cut([2, 7, 8, 9, 3], 4) == [2, 7, 8, 3] and cut([2, 7, 3], 4) == [2, 7, 3]
    m = tiny_student()
    ids = [[2] + list(range(10, 40)) + [3], [2, 11, 12, 3]]  # 32 and 4 tokens
    refs = length_references(m, ids, [16, 32])
    assert refs[16]["cut"] == 1 and refs[32]["cut"] == 0
    assert refs[16]["ids"][0] == [2] + list(range(10, 24)) + [3]
    assert np.allclose(refs[16]["ref"][0], torch_logits(m, [refs[16]["ids"][0]])[0])
    made = write_variant(m, tmp_path / "npu", "coreml-int8w", [16, 32], 17, texts(8, 16), 0, "student")
    check = check_variant(NpuRunner(made["files"], NPU_VARIANTS["coreml-int8w"], made["lookup"]), refs, 0, 0.5, "s")
    assert check["by_length"]["16"]["cut"] == 1 and check["by_length"]["16"]["max_abs_diff"] < 0.1


@pytest.fixture(scope="module")
def failed_npu_run(tiny_bert_dir, tiny_csv, tmp_path_factory):
    """An npu-student run through quantize with quantize.min_argmax_agreement above 1: every lossy check fails."""
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    d = tiny_run_config(tiny_bert_dir, tiny_csv, tmp_path_factory.mktemp("runs"))
    d["student"]["arch"] = "npu"
    d["quantize"] = {"models": ["student"], "variants": ["fp32", "optimized", "int8-dynamic", "int8-static", "w8a16-static"],
                     "npu_lengths": [16, 32], "check_samples": 24, "calibration_samples": 32,
                     "min_argmax_agreement": 1.01}
    cfg = config_from_dict(d, "tiny-npu-failed")
    run(cfg, ["quantize"])  # before the fix: "error: student NPU nnapi-int8 (...): argmax agrees ... only"
    return cfg


@pytest.mark.e2e
def test_failed_npu_variant_is_recorded_and_the_stage_goes_on(failed_npu_run):
    q = failed_npu_run.run_dir / "quantize"
    npu = json.loads((q / "npu.json").read_text())
    assert {r["variant"] for r in npu} == {"npu-nnapi-int8", "npu-coreml-int8w", "npu-qnn-w8a16"}
    for r in npu:
        c = r["check"]
        assert r["status"] == "failed" and c["passed"] is False and c["tolerance"] == 1.01
        assert 0 <= c["value"] <= 1 and set(c["by_length"]) == {"16", "32"}  # its numbers, every length
        assert all(b["texts"] == 24 for b in c["by_length"].values())
        assert "argmax agrees with the fp32 PyTorch model" in c["reason"]
        assert 0 <= r["accuracy"] <= 1 and all((failed_npu_run.run_dir / f).is_file() for f in r["files"].values())
    variants = {r["variant"]: r for r in json.loads((q / "variants.json").read_text())}
    assert variants["int8-dynamic"]["status"] == "failed" and variants["fp32"]["status"] == "passed"
    summary = json.loads((q / "manifest.json").read_text())["summary"]
    assert {f["variant"] for f in summary["failed"]} == {"int8-dynamic", "int8-static", "w8a16-static",
                                                         *(r["variant"] for r in npu)}


@pytest.mark.e2e
def test_rows_record_the_opset_their_file_was_written_at(failed_npu_run):
    """quantize.opset is 17; ORT's quantizer writes the 16-bit QDQ files at 21, and the rows say so."""
    import onnx

    run_dir = failed_npu_run.run_dir
    variants = {r["variant"]: r for r in json.loads((run_dir / "quantize" / "variants.json").read_text())}
    npu = {r["variant"]: r for r in json.loads((run_dir / "quantize" / "npu.json").read_text())}
    assert failed_npu_run.quantize.opset == 17
    want = {"fp32": 17, "int8-dynamic": 17, "int8-static": 17, "w8a16-static": 21}
    assert {v: r["opset"] for v, r in variants.items()} == want
    assert {v: r["opset"] for v, r in npu.items()} == {"npu-nnapi-int8": 17, "npu-coreml-int8w": 17,
                                                       "npu-qnn-w8a16": 21}
    for r in [*variants.values(), *npu.values()]:  # each matches its file
        declared = onnx.load(str(run_dir / r["file"]), load_external_data=False).opset_import
        assert r["opset"] == next(o.version for o in declared if o.domain in ("", "ai.onnx"))


@pytest.mark.e2e
def test_failed_npu_variant_is_not_compiled(failed_npu_run, monkeypatch, tmp_path, capsys):
    import eval.qnn
    from pipeline.tasks.classification import compile as C

    q = failed_npu_run.run_dir / "quantize"
    todo = C.jobs(q, [16, 32])
    npu_jobs = [j for j in todo if j["variant"].startswith("npu-")]
    assert len(npu_jobs) == 6 and all("failed its check in the quantize stage (quantize/npu.json" in j["failed"]
                                      for j in npu_jobs)
    assert [j["variant"] for j in todo if not j["variant"].startswith("npu-")] == ["int8-static"] * 2 + ["w8a16-static"] * 2
    assert all(j["failed"] for j in todo)

    def no_compile(*a, **k):
        raise AssertionError("a file that failed its quantize check was compiled")

    monkeypatch.setattr(eval.qnn, "compile_htp", no_compile)
    ctx = SimpleNamespace(run_dir=failed_npu_run.run_dir, cfg=failed_npu_run)
    rows = C._compile_job(ctx, npu_jobs[0], ["8gen2", "8gen3"], tmp_path, ["a text"], False, str)
    assert [(r["chip"], r["status"], r["compiled"]) for r in rows] == [("8gen2", "skipped", False),
                                                                      ("8gen3", "skipped", False)]
    assert rows[0]["reason"].startswith("not compiled: it failed its check in the quantize stage")
    assert "skipped, not compiled" in capsys.readouterr().out


@pytest.mark.e2e
def test_failed_npu_variant_is_not_timed_or_shipped(failed_npu_run, tmp_path, capsys):
    import eval.bench as B
    import eval.targets as T
    from export.npu_bundle import add_npu_files, not_shipped

    q = failed_npu_run.run_dir / "quantize"
    assert add_npu_files(failed_npu_run.run_dir, q, "student", tmp_path / "bundle") is None
    assert not (tmp_path / "bundle" / "npu").exists()
    gone = not_shipped(q, "student")
    assert {g["variant"] for g in gone} == {"nnapi-int8", "coreml-int8w", "qnn-w8a16"}
    assert all("argmax agrees" in g["reason"] for g in gone)
    assert "student npu nnapi-int8: not shipped, it failed its check" in capsys.readouterr().out

    bench = B.Bench(failed_npu_run, B.Models({}, {}), [], {"peak_gflops_fp32": {"1": 1.0}}, tmp_path)
    for r in json.loads((q / "npu.json").read_text()):
        entry, readiness = bench.row_target(T.get_target("edge-npu"), {**r, "_path": q.parent / r["file"]})
        assert entry["status"] == "skipped" and readiness is None
        assert entry["reason"].startswith("not timed: the file failed its check (argmax agreement")


def test_qnn_agreement_probe_skips_a_file_that_failed_its_quantize_check(tmp_path, monkeypatch, capsys):
    """The probe measures what the compile stage would compile: a file that failed its quantize check is named
    with its reason and never compiled, and a run with nothing else says so instead of "no file"."""
    import eval.qnn
    from tools import qnn_agreement

    monkeypatch.setattr(eval.qnn, "unavailable_reason", lambda: None)
    monkeypatch.setattr(eval.qnn, "compile_htp", lambda *a, **k: pytest.fail("a failed file was compiled"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.jsonl").write_text(json.dumps({"text": "good day", "label": 1}) + "\n")
    (tmp_path / "quantize").mkdir()
    (tmp_path / "quantize" / "npu.json").write_text(json.dumps([
        {"model": "student", "variant": "npu-int8", "files": {"64": "quantize/student/npu-int8-64.onnx"},
         "status": "failed", "check": {"value": 0.5, "tolerance": 0.9}}]))
    with pytest.raises(PipelineError, match=r"no npu-student file at 64 tokens that passed its quantize check "
                                         r"\(failed: npu-int8\)"):
        qnn_agreement.main([str(tmp_path), "--length", "64"])
    out = capsys.readouterr().out
    assert "npu-int8" in out and "not compiled: it failed its check in the quantize stage" in out
