"""Settings a run would refuse after training are refused when the config loads, by load_config and by
`python -m pipeline show-config` alike, with one message naming the key and a fix that itself loads."""
from __future__ import annotations

import re

import pytest

from pipeline.config import load_config
from pipeline.errors import PipelineError

GEN = ["run.task=generation"]
# (overrides, the key the message must name first, whether the message suggests a --set fix)
CASES = [
    (["bench.seq_lengths=[]"], "bench.seq_lengths", True),
    (["bench.headline_length=100"], "bench.headline_length", True),
    (GEN + ['lm.prompts=[""]'], "lm.prompts", True),
    (['bundle.web_target="host-cpu"'], "bundle.web_target", True),
    (['bench.targets=["host-cpu","browser-wasm"]', 'bundle.web_target="browser-wasm-mt"'], "bundle.web_target", True),
    (['export.ort_variants=["fp32","int8-dynamic"]', 'bundle.variant="int8-static"'], "bundle.variant", True),
    (['quantize.models=["teacher","student"]', 'bundle.model="lstm"'], "bundle.model", True),
    (['bundle.model="lstm"', 'bundle.variant="optimized"'], "bundle.variant", True),
    (['bundle.model="gpt"'], "bundle.model", True),
    (["bundle.sample_texts=0"], "bundle.sample_texts", False),
    (["quantize.npu_lengths=[]"], "quantize.npu_lengths", True),
    (['quantize.variants=["fp32","int8-dynamic"]'], "export.ort_variants", True),
    (['export.coreml_models=["teacher","student"]'], "export.coreml_models", True),
    (['quantize.skip_fusions=["skip_layer_nrom"]'], "quantize.skip_fusions", False),
    (['export.ort_disabled_optimizers=["NoSuchFusion"]'], "export.ort_disabled_optimizers", False),
    (GEN + ['quantize.models=["student","gru"]'], "quantize.models", False),
    (GEN + ["lm.prompts=[]"], "lm.prompts", True),
    (GEN + ['lm.prompts=["KING:"," "]'], "lm.prompts", True),
    (GEN + ['bundle.model="lstm"'], "bundle.model", True),
    (GEN + ['bundle.variant="int8-static"'], "bundle.variant", True),
    (GEN + ['quantize.models=["teacher","lstm"]'], "quantize.models", True),
    (GEN + ['quantize.variants=["fp16"]'], "quantize.variants", True),
    (GEN + ["teacher.fine_tune=true"], "teacher.fine_tune", True),
    (GEN + ['student.arch="bert"'], "student.arch", True),
    (GEN + ["lm.max_cache=64"], "lm.bench_prompt_tokens", True),
    (GEN + ["data.max_unlabeled=100"], "data.max_unlabeled", True),
    (GEN + ['bench.targets=["host-cpu","gpu"]'], "bench.targets", False),
    (GEN + ['bench.targets=["qnn-htp"]'], "bench.targets", False),
    (GEN + ['export.coreml_target="iOS17"'], "export.coreml_target", True),  # the student's KV cache is state
    (GEN + ['quantize.variants=["fp32","int8-static"]'], "quantize.variants", True),
    (GEN + ['export.ort_variants=["fp16"]'], "export.ort_variants", True),
    (GEN + ['export.coreml_models=["studnet"]'], "export.coreml_models", True),
    (GEN + ["student.hidden=6", "student.heads=2"], "student.hidden", True),
    (GEN + ["data.max_train=100"], "data.max_train", True),
    # refused only by the stage that reads them before (quantize, export, bench, teacher, phone-bench)
    (["quantize.opset=1"], "quantize.opset", False),
    (['export.coreml_target="iOS99"'], "export.coreml_target", False),
    (['export.coreml_target="iOS13"'], "export.coreml_target", False),  # too old for an mlprogram
    (['export.coreml_shapes="wide"'], "export.coreml_shapes", False),
    (['export.coreml_shapes="enumerated"'], "export.coreml_shapes", True),
    (["student.hidden=24", "quantize.embedding_bits=4"], "quantize.embedding_bits", True),
    (['bench.sweep_variants=["int4"]'], "bench.sweep_variants", False),
    (['phone.providers=["gpu"]'], "phone.providers", False),
    (['phone.remote_dir="x y"'], "phone.remote_dir", True),
    (["phone.seq_length=2"], "phone.seq_length", False),  # [CLS] [SEP] and no word piece to time
    (GEN + ['search.variants=["int8-static"]'], "search.variants", False),  # the generation task's own rule
    (["run.seed=4294967296"], "run.seed", False),
    (['teacher.model=""'], "teacher.model", False),
    (['data.text_column="label"', 'data.label_column="label"'], "data.text_column", False),
    (['quantize.models=["student","lstm","student"]'], "quantize.models", True),  # exported and reported twice
    (GEN + ['quantize.models=["student","lstm","lstm"]'], "quantize.models", True),
    # the run refused these only after training (the generation baseline, eval, quantize, export; the distill
    # stage; the quantize stage's 4-bit table), or timed no student at the headline length
    (GEN + ['baseline.cell="gru"'], "baseline.cell", True),
    (GEN + ['baseline.distill_loss="mse"'], "baseline.distill_loss", True),  # the cache holds the top-k only
    (GEN + ["lm.sample_tokens=256"], "lm.sample_tokens", True),
    (GEN + ["lm.check_tokens=300"], "lm.check_tokens", True),
    (GEN + ['export.coreml_variants=["bogus"]'], "export.coreml_variants", False),
    (['student.arch="npu"', 'student.init="teacher-layers"', "student.hidden=384", "student.heads=12",
      "student.ffn=1536"], "student.init", True),
    (["quantize.embedding_bits=4", "quantize.skip_fusions=[]"], "quantize.embedding_bits", True),
    (["bench.headline_length=256"], "bench.headline_length", True),
    # refused only by phone-bench on a Mac, or by the teacher stage after the data stage
    (['phone.compute_units=["GPU_ONLY"]'], "phone.compute_units", False),
    (['teacher.model="smollm2-package"'], "teacher.model", False),
    (GEN + ['teacher.model="minilm-package"'], "teacher.model", False),
    # beyond the packaged teacher's position table: refused by the teacher stage after the data stage, and for
    # generation by the logits stage after the teacher stage (about 80 s)
    (["teacher.max_length=1024"], "teacher.max_length", True),
    (GEN + ["lm.context_length=9000"], "lm.context_length", True),
    # found by an audit on 2026-11-27: refused by the data stage, the teacher stage (against the packaged teacher's
    # shape, now in its registry entry), or the quantize and bundle gates after training
    (["data.test_fraction=0"], "data.test_fraction", True),
    (GEN + ["data.test_fraction=0"], "data.test_fraction", True),
    (["data.max_train=1"], "data.max_train", True),
    (['data.source="csv"'], "data.train_path", False),
    (GEN + ['data.source="text"'], "data.train_path", False),
    (['data.source="hub"'], "data.hub_name", False),
    (['student.init="teacher-layers"'], "student.init", False),
    (["student.hidden=512"], "student.init", False),
    (["distill.layer_map=[1,2,3,7]"], "distill.layer_map", False),
    (["teacher.fine_tune=false"], "teacher.fine_tune", True),
    (GEN + ['student.init="teacher-layers"'], "student.init", False),
    (GEN + ["student.hidden=1024"], "student.init", False),
    (["data.max_test=80"], "data.max_test", True),
    (["data.max_test=50", "bundle.min_agreement=0.9"], "data.max_test", True),
    # the bench's prompt is cut from the held-out windows: it was timed shorter than the length it reported
    (GEN + ["lm.eval_windows=1", "lm.context_length=32", "lm.bench_prompt_tokens=100"], "lm.bench_prompt_tokens", True),
    # classification settings a generation run ignored without a word
    (GEN + ["distill.hidden_weight=1.0"], "distill.hidden_weight", True),
    (GEN + ["student.max_length=64"], "student.max_length", True),
    (GEN + ["bench.headline_length=32"], "bench.headline_length", True),
    # the misspelt name first: the 4-bit table's message suggested a skip_fusions list that kept it
    (["quantize.embedding_bits=4", 'quantize.skip_fusions=["skip_layer_nrom"]'], "quantize.skip_fusions", False),
    # 2 tokens leave room for [CLS] and [SEP] only: every text was the same input, trained without a word
    (["teacher.max_length=2"], "teacher.max_length", False),
    (["student.max_length=2"], "student.max_length", False),
]
# the suggested fix (a list of strings is shell-quoted), not the "[the value came from --set '...']" suffix
FIX = re.compile(r"(?<!came from )--set '?([a-z_]+\.[a-z_]+=(?:\[[^\]]*\]|\"[^\"]*\"|[^\s,)']+))")


@pytest.mark.parametrize("overrides,key,has_fix", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_refused_at_load_with_the_key_and_a_fix_that_loads(overrides, key, has_fix):
    with pytest.raises(PipelineError) as e:
        load_config(None, overrides)
    msg = str(e.value)
    assert re.search(rf"'{re.escape(key)}'|{re.escape(key)} ", msg), msg
    first = re.findall(r"'([a-z_]+\.[a-z_]+)'", msg) or re.findall(r"\b([a-z_]+\.[a-z_]+) ", msg)
    assert first[0] == key, msg  # the key at fault is named first, not another one
    fixes = FIX.findall(msg)
    assert bool(fixes) == has_fix, msg
    if fixes:
        load_config(None, [*overrides, fixes[0]])  # the suggested fix is accepted


@pytest.mark.parametrize("overrides,key,has_fix", CASES[:8] + CASES[15:18], ids=[" ".join(c[0]) for c in CASES[:8] + CASES[15:18]])
def test_show_config_refuses_the_same(overrides, key, has_fix, capsys, tmp_path):
    from pipeline.cli import main

    (tmp_path / "empty.toml").write_text("")  # the built-in defaults
    argv = ["show-config", "--config", str(tmp_path / "empty.toml")]
    for o in overrides:
        argv += ["--set", o]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and key in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("task,key", [("classification", "teacher.max_length"), ("generation", "lm.context_length")])
def test_a_length_beyond_a_local_teacher_folders_positions_is_refused_at_load(tmp_path, task, key):
    """A local folder's config.json gives the position table (its 128 rows here) before any stage runs."""
    from transformers import LlamaConfig

    from conftest import tiny_bert_config

    folder = tmp_path / "teacher"
    # no weights: the config load reads config.json alone (a decoder's for generation, whose teacher must be one)
    config = tiny_bert_config() if task == "classification" else LlamaConfig(max_position_embeddings=128)
    config.save_pretrained(folder)
    base = [f'teacher.model="{folder}"', f'run.task="{task}"', 'student.init="random"', "lm.max_cache=256"]
    base = base if task == "generation" else base[:-1]
    assert load_config(None, [*base, f"{key}=128"]).value(key) == 128
    with pytest.raises(PipelineError, match=rf"^<defaults>: '{key}' = 129, but the teacher \({config.model_type}\) "
                                            rf"has positions for 128 tokens only; set {key} <= 128"):
        load_config(None, [*base, f"{key}=129"])


def test_an_unknown_npu_device_profile_is_refused_at_load():
    with pytest.raises(PipelineError, match="unknown NPU device profile 'nosuch' in bench.npu_device"):
        load_config(None, ['bench.npu_device="nosuch"'])


def test_fp16_training_without_cuda_is_refused_at_load(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PipelineError, match="'train.precision' = 'fp16' needs a CUDA GPU"):
        load_config(None, ['train.precision="fp16"'])


@pytest.mark.parametrize("dist", ["{runs}", "{runs}/tiny/sub", "{root}"])
def test_a_dist_dir_that_would_replace_the_run_folder_is_refused(tmp_path, dist):
    """Publishing replaces <dist_dir>/<run> whole: the run folder itself, a folder inside it or one holding it
    would be deleted with the run's stages in it."""
    runs = tmp_path / "tiny"  # the run folder: tmp/tiny/tiny; dist_dir = tmp publishes tmp/tiny, which holds it
    d = dist.format(runs=runs, root=tmp_path)
    with pytest.raises(PipelineError, match="'bundle.dist_dir' = .* the run folder .* would delete the run"):
        load_config(None, [f'run.runs_dir="{runs}"', 'run.name="tiny"', f'bundle.dist_dir="{d}"'])


def test_a_file_where_a_folder_goes_is_refused_and_an_uncreatable_folder_named(tmp_path):
    from pipeline.lock import run_lock

    (tmp_path / "f").write_text("x")
    for key in ("run.runs_dir", "bundle.dist_dir"):
        with pytest.raises(PipelineError, match=f"'{key}' = .* is a file, not a folder"):
            load_config(None, [f'{key}="{tmp_path / "f"}"'])
    with pytest.raises(PipelineError, match=r"cannot create the folder .*f/sub/r .*Point run.runs_dir at a folder"):
        with run_lock(tmp_path / "f" / "sub" / "r", "test"):
            pass


def test_set_items_are_named_as_such_and_a_number_for_a_name_gets_the_quoting(tmp_path):
    with pytest.raises(PipelineError, match=r"^--set 'run.nosuch=1': unknown key 'run.nosuch'"):
        load_config(None, ["run.nosuch=1"])
    with pytest.raises(PipelineError, match=r"^--set 'run.name=2024': 'run.name': expected a string, got 2024 "
                                            r"\(a name: write it in quotes, \"2024\"\)"):
        load_config(None, ["run.name=2024"])


def test_a_checked_value_from_set_is_traced_to_it_and_a_second_line_is_not_dropped(tmp_path):
    """The value is checked after merging into the file's: the message names the file (where the run's other
    values are) and the --set item that gave the bad one. A --set with a newline once parsed as TOML with the
    second line a key of its own, silently dropped."""
    cfg = tmp_path / "mine.toml"
    cfg.write_text("[bench]\nseq_lengths = [16, 32]\nheadline_length = 32\n")
    with pytest.raises(PipelineError, match=r"^.*mine.toml: 'bench.headline_length' = 64 .* \[the value came from "
                                            r"--set 'bench.headline_length=64'\]$"):
        load_config(cfg, ["distill.epochs=2", "bench.headline_length=64"])
    with pytest.raises(PipelineError) as e:  # the file's own bad value is not blamed on an unrelated --set
        cfg.write_text("[bench]\nseq_lengths = [16, 32]\nheadline_length = 64\n")
        load_config(cfg, ["distill.epochs=2"])
    assert "came from --set" not in str(e.value)
    with pytest.raises(PipelineError, match=r"^--set 'distill.epochs=2\\ndistill.lr=0.1': one section.key=value "
                                            r"per --set; .*\('distill.lr=0.1'\)"):
        load_config(None, ["distill.epochs=2\ndistill.lr=0.1"])
    assert load_config(None, [*GEN, 'lm.prompts=["a\\nb"]']).lm.prompts == ["a\nb"]  # an escaped newline is a value


@pytest.mark.parametrize("argv", [["show-config", "--config", ""], ["run", "--until", ""]])
def test_an_empty_config_or_until_is_an_error_not_the_defaults(argv, capsys):
    from pipeline.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {argv[1]} is empty (an unset variable?)") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["status", "show-config"])
def test_force_is_refused_where_no_stage_runs(command, capsys):
    from pipeline.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--force"])
    assert e.value.code == 2 and "unrecognized arguments: --force" in capsys.readouterr().err
    assert build_parser().parse_args(["distill", "--force"]).force  # a stage command still takes it


def test_run_until_search_checks_the_request_before_training(tmp_path, capsys, monkeypatch):
    from pipeline import stage
    from pipeline.cli import main

    monkeypatch.setattr(stage, "run", lambda *a, **k: pytest.fail("a stage ran before the request was checked"))
    (tmp_path / "c.toml").write_text(f'[run]\nruns_dir = "{tmp_path}"\n')
    assert main(["run", "--config", str(tmp_path / "c.toml"), "--until", "search"]) == 2
    assert "search: no target" in capsys.readouterr().err


def test_search_refuses_an_empty_validation_split_before_training(tmp_path, capsys, monkeypatch):
    from pipeline import stage
    from pipeline.cli import main

    monkeypatch.setattr(stage, "run", lambda *a, **k: pytest.fail("a stage ran before the request was checked"))
    (tmp_path / "c.toml").write_text(f'[run]\nruns_dir = "{tmp_path}"\n[data]\nvalidation_fraction = 0.0\n')
    argv = ["run", "--config", str(tmp_path / "c.toml"), "--until", "search", "--set", 'search.target="host-cpu"',
            "--set", "search.budget_ms=2"]
    assert main(argv) == 2
    assert "search: candidates are scored on the validation split" in capsys.readouterr().err
    from pipeline.search import request_of

    fixed = load_config(tmp_path / "c.toml", ['search.target="host-cpu"', "search.budget_ms=2",
                                              "data.validation_fraction=0.1"])
    assert request_of(fixed).target == "host-cpu"  # the fix the message gives is accepted


def test_known_library_noise_is_dropped_and_other_warnings_kept():
    import logging

    from pipeline.cli import _not_quiet

    def record(name, msg):
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, (), None)

    assert not _not_quiet(record("coremltools", "Failed to load _MLModelProxy: No module named 'x'"))
    assert not _not_quiet(record("coremltools", "Failed to load _MLCPUComputeDeviceProxy: No module named 'x'"))
    assert not _not_quiet(record("coremltools", "Torch version 2.13.0+cpu has not been tested with coremltools."))
    assert not _not_quiet(record("coremltools", "Core ML embedding (gather) layer does not support any inputs "
                                                "besides the weights and indices. Those given will be ignored."))
    assert not _not_quiet(record("root", "Please consider to run pre-processing before quantization. Refer ..."))
    assert _not_quiet(record("coremltools", "Failed to convert op 'gelu'"))


def test_library_loggers_and_onnxruntime_are_quieted_where_the_stages_run(capfd, tmp_path):
    """transformers and optimum print through handlers of their own, and onnxruntime's C++ log for the
    sessions its quantizer opens never reaches Python logging: their known notes are dropped before the stages
    run, while a warning that matters still shows."""
    import logging

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from optimum.utils import logging as optimum_logging
    from transformers.utils import logging as hf_logging

    from pipeline.cli import _quiet_libraries

    # an Identity graph with an initializer no node reads: ONNX Runtime removes it, warning at level 2
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                              [helper.make_tensor("unused_w", TensorProto.FLOAT, [1], [1.0])])
    path = tmp_path / "unused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    ort.set_default_logger_severity(2)
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert "Removing initializer 'unused_w'" in capfd.readouterr().err  # the control: it does warn
    _quiet_libraries()
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert "Removing initializer" not in capfd.readouterr().err
    notes = {"transformers": "`torch_dtype` is deprecated! Use `dtype` instead!",
             "optimum": "Opset 17 is lower than the recommended minimum opset (18) to export bert."}
    for root in (hf_logging.get_logger(), optimum_logging.get_logger()):
        assert root.handlers  # the library's own handler (it does not propagate to the root's)
        for handler in root.handlers:
            note = logging.LogRecord(root.name, logging.WARNING, __file__, 1, notes[root.name], (), None)
            other = logging.LogRecord(root.name, logging.WARNING, __file__, 1, "Some weights of X were new", (), None)
            assert not handler.filter(note) and handler.filter(other)


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`show-config | head`: the pipe closes before the config is printed."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "show-config"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    proc.stdout.close()  # long before the interpreter has started: the write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_optimum_peer_of_a_compact_embedding_student_computes_what_ours_does(tmp_path, capfd):
    """A restricted-vocabulary, factorized student is no layout transformers knows: Optimum's exporter loaded it
    with random word embeddings, and its files scored 0.394 on the demo. The peer now gets the embedding folded
    into a stock table: Optimum's fp32 file gives our logits, its row scores our accuracy and counts the folded
    table's parameters, and the folded folder is not left in the peer stage's output."""
    import numpy as np
    import torch
    from transformers import BertForSequenceClassification

    from distill.embeddings import compact_embeddings
    from distill.models import HFLogits, count_params, load_model, save_model
    from distill.vocab import training_vocab
    from eval.peer import onnx_logits, peer_rows
    from tests.conftest import make_texts, tiny_bert_config, write_tokenizer

    torch.manual_seed(0)
    tok = write_tokenizer(tmp_path / "tok")
    data = make_texts(40)
    texts, gold = [t for t, _ in data], np.array([["negative", "neutral", "positive"].index(y) for _, y in data])
    hf = BertForSequenceClassification(tiny_bert_config(num_labels=3))
    vmap, _ = training_vocab(tok, texts[:10], 32, cap=12)  # a few rows kept, the rest "other"
    compact_embeddings(hf, vmap, 8, tok.pad_token_id)  # factorized: 8 -> 32
    folder = tmp_path / "student"
    save_model(folder, HFLogits(hf), tok, ["negative", "neutral", "positive"], "hf", 32)
    ours = load_model(folder)
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
        want = ours.model(enc["input_ids"], enc["attention_mask"]).numpy()
    out = tmp_path / "peer"
    out.mkdir()
    state = torch.random.get_rng_state()  # the caller's random state, which the export must leave as it was
    rows = peer_rows({"student": folder}, out, "peer", 17, texts, gold, 3, 1,
                     {"student": count_params(ours.model)})
    assert torch.equal(torch.random.get_rng_state(), state)
    fp32 = next(r for r in rows if r["variant"] == "optimum-fp32")
    got = onnx_logits(fp32["_path"], tok, texts, 32, 1)
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert fp32["accuracy"] == float(np.mean(want.argmax(1) == gold)) and fp32["folded_embedding"] is True
    mine = count_params(ours.model)  # the folded table replaces ours: every tokenizer id x hidden
    assert fp32["params"] == mine["non_embedding_params"] + (len(tok) + 128 + 2) * 32  # word, position, type rows
    assert fp32["non_embedding_params"] == mine["non_embedding_params"]
    assert sorted(p.name for p in out.iterdir()) == ["student"]
    assert "newly initialized" not in capfd.readouterr().err  # every weight of the folded folder loads


def test_a_teacher_path_that_is_no_model_folder_is_refused_at_load_and_a_missing_one_left_to_its_stage(tmp_path):
    """A file, or a folder without config.json, is refused when the config loads. A folder that is gone (moved
    after training) is not: status, report, bundle and phone-bench never read it; the teacher stage refuses it."""
    from pipeline.stage import status

    (tmp_path / "weights.bin").write_bytes(b"x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PipelineError, match=r"teacher.model = '.*weights.bin' is not a folder"):
        load_config(None, [f'teacher.model="{tmp_path / "weights.bin"}"'])
    with pytest.raises(PipelineError, match=r"teacher.model = '.*empty' has no config.json"):
        load_config(None, [f'teacher.model="{tmp_path / "empty"}"'])
    cfg = load_config(None, [f'teacher.model="{tmp_path / "gone"}"', f'run.runs_dir="{tmp_path / "runs"}"'])
    assert status(cfg, "teacher") == (False, "not run yet")
    from distill.teachers import resolve

    with pytest.raises(PipelineError, match=r"teacher.model = '.*gone' does not exist"):
        resolve(cfg.teacher.model)
