"""Runtime faults that used to end in a traceback or pass silently: a full disk or a read-only folder while a
stage or a bundle is written, quality gates on too few texts, a PCA start over a tiny vocabulary, fewer
training windows than asked for, a context longer than the teacher's positions. Each is one PipelineError
(or a recorded warning) naming the numbers and the fix."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError, mount_point
from conftest import use_toy_stages

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def _toy(monkeypatch, fn):
    use_toy_stages(monkeypatch, [("a", fn, (), ("data",))])


def _cfg(tmp_path: Path, **sections):
    return config_from_dict({"run": {"runs_dir": str(tmp_path / "runs"), "name": "r"}, **sections})


# ---- a full disk -----------------------------------------------------------------------------------------

def test_full_disk_while_a_stage_writes_is_one_error_and_leaves_no_partial(monkeypatch, tmp_path):
    from pipeline.stage import run

    def fills_the_disk(ctx):
        (ctx.out / "big.bin").write_bytes(b"x" * 5000)
        raise OSError(errno.ENOSPC, "No space left on device", str(ctx.out / "more.bin"))

    _toy(monkeypatch, fills_the_disk)
    cfg = _cfg(tmp_path)
    with pytest.raises(PipelineError) as e:
        run(cfg, ["a"])
    msg = str(e.value)
    assert f"no space left on the disk mounted at {mount_point(tmp_path)} while writing" in msg
    assert f".a.partial ({cfg.run_dir / '.a.partial' / 'more.bin'})" in msg
    assert "4.9 KB at least" in msg and "free there" in msg and "run.runs_dir" in msg
    assert not (cfg.run_dir / ".a.partial").exists() and not (cfg.run_dir / "a").exists()


def test_full_disk_while_publishing_a_bundle_names_its_size_and_removes_the_copy(monkeypatch, tmp_path):
    from export import publish as P
    from export import procs

    src = tmp_path / "bundle"
    (src / "model").mkdir(parents=True)
    (src / "model" / "m.onnx").write_bytes(b"w" * 3000)
    (src / "metadata.json").write_text("{}")
    dest = tmp_path / "dist" / "run"
    real = shutil.copyfile

    def copyfile(s, d, *a, **k):  # the write of one file's bytes fills the disk
        if os.fspath(s).endswith("m.onnx"):  # as shutil's copy says it: the source first, the destination second
            raise OSError(errno.ENOSPC, "No space left on device", str(s), None, str(d))
        return real(s, d, *a, **k)

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    with pytest.raises(PipelineError) as e:
        P.publish(src, dest)
    msg = str(e.value)
    # where it could not write (the destination's disk and the file there), not the bundle it copied from
    assert msg.startswith(f"no space left on the disk mounted at {mount_point(dest)} while writing {dest} "
                          f"({dest.parent / f'.run.partial-{procs.tag()}' / 'model' / 'm.onnx'}): "
                          f"it needs 2.9 KB (the bundle's size), ")
    assert str(src) not in msg and "bundle.dist_dir" in msg and "free there" in msg
    assert not dest.exists() and list((tmp_path / "dist").iterdir()) == []  # no hidden partial copy left


def test_other_copy_failures_keep_their_traceback(monkeypatch, tmp_path):
    from export import publish as P

    src = tmp_path / "bundle"
    src.mkdir()
    (src / "a.txt").write_text("a")

    def broken(s, d, *a, **k):
        raise OSError(errno.EIO, "Input/output error", str(s))

    monkeypatch.setattr(shutil, "copyfile", broken)
    with pytest.raises(OSError, match="Input/output error") as e:
        P.publish(src, tmp_path / "dist" / "r")
    assert not isinstance(e.value, PipelineError)


# ---- a read-only runs or dist folder -----------------------------------------------------------------------

def test_read_only_runs_folder_names_the_folder_and_the_setting(monkeypatch, tmp_path):
    from pipeline.stage import run

    _toy(monkeypatch, lambda ctx: {})
    cfg = _cfg(tmp_path)
    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self == cfg.run_dir:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PipelineError, match=r"cannot write .*runs/r: Permission denied .*run\.runs_dir.*chmod"):
        run(cfg, ["a"])


def test_read_only_lock_file_or_partial_folder(monkeypatch, tmp_path):
    from pipeline import lock
    from pipeline.stage import run

    _toy(monkeypatch, lambda ctx: {})
    cfg = _cfg(tmp_path)
    real_open = os.open

    def ro_open(path, *a, **k):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(lock.os, "open", ro_open)
    with pytest.raises(PipelineError, match=r"cannot write .*runs/r \(.*\.lock\): Read-only file system"):
        run(cfg, ["a"])
    monkeypatch.setattr(lock.os, "open", real_open)

    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self.name == ".a.partial":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PipelineError, match=r"cannot write .*\.a\.partial: Permission denied.*run\.runs_dir"):
        run(cfg, ["a"])


def test_read_only_dist_folder(monkeypatch, tmp_path):
    from export import publish as P

    src = tmp_path / "bundle"
    src.mkdir()
    (src / "a.txt").write_text("a")
    dest = tmp_path / "dist" / "run"
    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self == dest.parent:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PipelineError, match=r"cannot write .*dist/run \(.*dist\): Permission denied.*bundle\.dist_dir"):
        P.publish(src, dest)


@pytest.mark.skipif(ROOT, reason="root ignores file permissions")
def test_read_only_folders_with_chmod(monkeypatch, tmp_path):
    from export import publish as P
    from pipeline.stage import run

    _toy(monkeypatch, lambda ctx: {})
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        cfg = config_from_dict({"run": {"runs_dir": str(ro / "runs"), "name": "r"}})
        with pytest.raises(PipelineError, match=r"cannot write .*run\.runs_dir"):
            run(cfg, ["a"])
        src = tmp_path / "bundle"
        src.mkdir()
        (src / "a.txt").write_text("a")
        with pytest.raises(PipelineError, match=r"cannot write .*bundle\.dist_dir"):
            P.publish(src, ro / "dist" / "r")
    finally:
        ro.chmod(0o755)


# ---- generation: a tiny vocabulary, too few windows, a context beyond the teacher's positions ----------------

from test_gpt_pipeline import corpus, gen_cfg, tiny_llama_dir  # noqa: E402,F401  (module fixtures, reused)


def test_pca_start_over_a_vocabulary_smaller_than_the_student_width():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from distill.student import build_llama
    from distill.vocab import VocabMap
    from pipeline.config import StudentSection

    torch.manual_seed(0)
    teacher = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1))
    vmap = VocabMap.build(torch.tensor([3, 5, 7, 9, 3]).numpy(), 40, restrict=True, always=(0,))
    assert vmap.size == 6  # five kept ids and "other", fewer than student.hidden
    s = StudentSection(arch="llama", layers=1, hidden=16, heads=2, ffn=32, init="teacher-pca")
    student = build_llama(s, teacher, vmap, 32)  # crashed in torch.pca_lowrank (q=16 > 6 rows) before
    w = student.model.embed_tokens.weight.detach()
    assert w.shape == (6, 16) and torch.isfinite(w).all()
    assert w[:, 6:].abs().max() == 0 and w[:, :5].abs().sum(0).min() > 0  # 6 directions at most, then zeros
    # the full-size case is unchanged: same numbers as before for a vocabulary of at least student.hidden rows
    from distill.embeddings import pca_rows

    torch.manual_seed(1)
    big = torch.randn(50, 32)
    torch.manual_seed(2)
    got = pca_rows(big, 16)
    torch.manual_seed(2)
    mean = big.mean(0)
    _, _, v = torch.pca_lowrank(big - mean, q=16, center=False, niter=4)
    ref = (big - mean) @ v[:, :16]
    assert torch.equal(got, ref * (0.02 / ref.std()))


def test_tiny_vocabulary_distills_and_says_what_pca_did(tmp_path, tiny_llama_dir, caplog):
    from pipeline.manifest import read_manifest
    from pipeline.stage import run

    small = tmp_path / "small"
    small.mkdir()
    for i in range(6):  # distinct texts (a document in two splits leaves training), the same few words
        (small / f"p{i}.txt").write_text("ROMEO : my love .\n" * (60 + i))
    d = gen_cfg(tmp_path, small, tiny_llama_dir, distill__epochs=1.0, lm__extra_windows=0, lm__teacher_windows=0)
    cfg = config_from_dict(d, "tiny-gen")
    with caplog.at_level("WARNING", logger="pocketformer"):
        run(cfg, ["distill"])
    rows = read_manifest(cfg.run_dir / "logits")["summary"]["student_vocab"]
    assert rows < 16
    note = read_manifest(cfg.run_dir / "distill")["summary"]["init_note"]
    assert f"restricted vocabulary has {rows} rows, fewer than student.hidden = 16" in note
    assert f"{16 - rows} zero columns" in note and "lm.restrict_vocab = false" in note
    assert note in caplog.text


def test_fewer_windows_than_asked_are_warned_and_recorded(tmp_path, corpus, tiny_llama_dir, caplog):
    from pipeline.manifest import read_manifest
    from pipeline.stage import run

    cfg = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir, lm__teacher_windows=5000,
                                   lm__extra_windows=3000), "tiny-gen")
    with caplog.at_level("WARNING", logger="pocketformer"):
        run(cfg, ["logits"])
    s = read_manifest(cfg.run_dir / "logits")["summary"]
    n = s["windows"]
    assert 0 < n < 5000 and s["extra_windows"] == 0  # every window went to the teacher: none left over
    assert s["windows_asked"] == {"teacher_windows": 5000, "extra_windows": 3000}
    short = s["window_shortfall"]
    assert len(short) == 2
    assert short[0].startswith(f"lm.teacher_windows = 5000, but the training split holds {n} windows")
    assert short[1].startswith(f"lm.extra_windows = 3000, but only 0 windows were left after the {n}")
    assert all(line in caplog.text for line in short)


def test_enough_windows_record_no_shortfall():
    from pipeline.tasks.generation.train import window_shortfall

    assert window_shortfall(48, 32, 48, 32, 16) == []
    assert window_shortfall(200, 0, 0, 0, 16) == []  # 0 = all of them
    assert window_shortfall(48, 90, 48, -1, 16) == []  # -1 = the rest
    # lm.offset_windows' shifted windows are counted apart from the split's own
    assert window_shortfall(90, 0, 100, 0, 16, shifted=40) == [
        "lm.teacher_windows = 100, but the training split holds 50 windows of lm.context_length + 1 tokens (and 40 "
        "more shifted by half a context, lm.offset_windows): the teacher scored 90. Give more training text or lower "
        "lm.context_length (16), or lower lm.teacher_windows"]


def test_context_beyond_the_teachers_positions_is_refused(tmp_path, corpus, tiny_llama_dir):
    """A local teacher folder's positions are checked when the config loads; the logits stage checks again once
    the teacher is loaded (a hub teacher's are known only then)."""
    import dataclasses

    from pipeline.stage import run

    settings = gen_cfg(tmp_path, corpus, tiny_llama_dir, lm__context_length=300, lm__max_cache=512,
                       lm__teacher_windows=2, lm__extra_windows=0)
    with pytest.raises(PipelineError, match=r"'lm.context_length' = 300, but the teacher \(llama\) has positions "
                                            r"for 256 tokens only; set lm.context_length <= 256"):
        config_from_dict(settings, "tiny-gen")
    cfg = config_from_dict({**settings, "lm": {**settings["lm"], "context_length": 256}}, "tiny-gen")
    cfg = dataclasses.replace(cfg, lm=dataclasses.replace(cfg.lm, context_length=300))  # past the load check
    with pytest.raises(PipelineError, match=r"lm.context_length = 300, but the teacher \(llama\) has positions for "
                                            r"256 tokens only .*Set lm.context_length <= 256"):
        run(cfg, ["logits"])
    assert not (cfg.run_dir / "logits").exists() and not (cfg.run_dir / ".logits.partial").exists()


# ---- quality gates on too few texts ------------------------------------------------------------------------

def _one_text_run(tmp_path: Path, check_samples: int = 16):
    """A run folder whose data stage holds a test split of one text (and what the gates read first)."""
    import json

    from pipeline.data import write_jsonl

    d = {"run": {"runs_dir": str(tmp_path / "runs"), "name": "r", "threads": 1},
         "quantize": {"check_samples": check_samples}}
    cfg = config_from_dict(d, "cfg")
    data = cfg.run_dir / "data"
    data.mkdir(parents=True)
    (data / "labels.json").write_text(json.dumps(["negative", "positive"]))
    write_jsonl(data / "test.jsonl", [{"text": "a fine movie", "label": "positive"}])
    return cfg


def _ctx(cfg, name: str):
    from pipeline.stage import STAGES
    from pipeline.task import StageContext

    out = cfg.run_dir / f".{name}.partial"
    out.mkdir(parents=True, exist_ok=True)
    return StageContext(cfg, name, out, cfg.run_dir, STAGES[name].deps)


def test_argmax_and_diff_checks_refuse_fewer_texts_than_check_samples(tiny_bert_dir):
    import numpy as np
    from transformers import AutoTokenizer

    from export.checks import argmax_check, check_inputs, max_abs_diff_check

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    fn = lambda ids, mask: np.zeros((ids.shape[0], 2), np.float32)  # noqa: E731
    msg = (r"would be decided on 1 test text\(s\), but quantize.check_samples = 16 needs at least 16.*bigger test "
           r"split.*set quantize.check_samples <= 1")
    with pytest.raises(PipelineError, match=msg):
        check_inputs(tok, ["good"], 16, wanted=16)
    # inputs built without the minimum, then checked with it: the checks themselves refuse
    inputs = check_inputs(tok, ["good"], 16)
    inputs.wanted = 16
    with pytest.raises(PipelineError, match=msg):
        argmax_check(fn, fn, inputs, 0.9, "student int8", fatal=False)
    with pytest.raises(PipelineError, match=msg):
        max_abs_diff_check(fn, fn, inputs, 1e-4, "student fp32")
    ok = check_inputs(tok, ["good"] * 16, 16, wanted=16)
    r = argmax_check(fn, fn, ok, 0.9, "student int8")
    assert r["passed"] and r["texts"] == 16 and r["check_samples"] == 16
    assert max_abs_diff_check(fn, fn, ok, 1e-4, "x")["texts"] == 16


def test_a_file_that_outputs_nan_fails_the_argmax_check():
    """numpy's argmax of an all-NaN row is 0, so a lossy file whose logits are NaN "agreed" with every text the
    reference labels class 0: 90% of this split, a 90% gate passed. A NaN row agrees with nothing."""
    import numpy as np

    from export.checks import CheckInputs, argmax_check

    ref_logits = np.array([[2.0, 0.0]] * 18 + [[0.0, 2.0]] * 2, np.float32)  # (20, 2), class 0 on 18 texts
    inputs = CheckInputs([(np.zeros((20, 3), np.int64), np.ones((20, 3), np.int64))], "20 test texts", 20)
    ref = lambda ids, mask: ref_logits  # noqa: E731
    nan = lambda ids, mask: np.full((ids.shape[0], 2), np.nan, np.float32)  # noqa: E731
    r = argmax_check(nan, ref, inputs, 0.9, "student int8-dynamic", fatal=False)
    assert r["passed"] is False and r["value"] == 0.0 and "agrees with the fp32 PyTorch model on only 0.0%" in r["reason"]
    one = ref_logits.copy()
    one[0, 1] = np.nan  # one NaN logit in a text both pick class 0 on: that text disagrees, the other 19 agree
    assert argmax_check(lambda ids, mask: one, ref, inputs, 0.9, "x", fatal=False)["value"] == 19 / 20


def test_quantize_and_export_refuse_a_test_split_smaller_than_check_samples(tmp_path):
    import json

    from pipeline.tasks.classification.ship import stage_export, stage_quantize

    cfg = _one_text_run(tmp_path)
    with pytest.raises(PipelineError, match=r"the quantize stage's checks would be decided on 1 test text\(s\), "
                                            r"but quantize.check_samples = 16"):
        stage_quantize(_ctx(cfg, "quantize"))
    (cfg.run_dir / "quantize").mkdir()
    (cfg.run_dir / "quantize" / "variants.json").write_text(json.dumps([]))
    with pytest.raises(PipelineError, match=r"the export stage's checks would be decided on 1 test text\(s\)"):
        stage_export(_ctx(cfg, "export"))


def test_agreement_gates_need_enough_texts_for_their_share():
    from export.checks import agreement_texts

    assert [agreement_texts(m) for m in (0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)] == [1, 2, 10, 20, 100, 100, 100]


def test_web_bundle_refuses_a_one_text_tokenizer_gate(tmp_path, monkeypatch):
    import json

    import export.bundle as EB
    from export import web_bundle as W
    from pipeline.tasks.classification.web import stage_web_bundle

    cfg = _one_text_run(tmp_path)
    tok = cfg.run_dir / "quantize" / "student" / "tokenizer"
    tok.mkdir(parents=True)
    (tok / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")  # the page's WordPiece specials
    (tok / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    (cfg.run_dir / "quantize" / "variants.json").write_text("[]")
    for stage, name in (("export", "variants.json"), ("report", "results.json")):
        (cfg.run_dir / stage).mkdir()
        (cfg.run_dir / stage / name).write_text("[]" if stage == "export" else "{}")
    monkeypatch.setattr(W, "runtime_missing", lambda: None)
    monkeypatch.setattr(EB, "choose", lambda *a, **k: {"model": "student", "variant": "int8-dynamic", "format": "ort",
                                                        "file": "export/student/int8-dynamic.ort", "choice": {}})
    with pytest.raises(PipelineError, match=r"the web bundle's tokenizer agreement check would be decided on 1 test "
                                            r"text\(s\), but bundle.min_agreement = 0.99 needs at least 100.*lower "
                                            r"bundle.min_agreement"):
        stage_web_bundle(_ctx(cfg, "web-bundle"))
