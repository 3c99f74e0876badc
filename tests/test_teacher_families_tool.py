"""tools/teacher_families.py without the pipeline: the teacher folders it writes load through transformers' Auto
classes as the family they claim to be, with the family's special-token quirks; its configs are configs the
pipeline accepts, with every output inside OUT_DIR; an unknown family is one usage error."""
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

from pipeline.config import load_config
from tools import teacher_families as tf

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("families")


def _load(folder: Path):
    return AutoConfig.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def test_configs_load_and_write_inside_out_dir(out):
    for task in ("classification", "generation"):
        path, texts = tf.prepare(task, out / task)
        cfg = load_config(path)
        assert Path(cfg.run.runs_dir).is_relative_to(out) and Path(cfg.bundle.dist_dir).is_relative_to(out)
        assert cfg.run.threads == 1 and cfg.export.coreml_min_weight_elements == 64
        assert texts and all(t.strip() for t in texts)
    assert cfg.run.task == "generation"
    assert "**" not in texts[0]  # the decoders' tokenizer trains on the text the pipeline reads: markup stripped


def test_roberta_teacher_has_pad_one_and_no_token_types(out):
    _, texts = tf.prepare("classification", out / "classification")
    folder = out / "classification" / "teachers" / "roberta"
    assert tf.build_teacher("classification", "roberta", folder, texts) == "roberta"
    cfg, tok = _load(folder)
    assert cfg.model_type == "roberta" and cfg.pad_token_id == 1 == tok.pad_token_id
    assert cfg.type_vocab_size == 1 and cfg.vocab_size == len(tok)
    enc = tok("good day")
    assert "token_type_ids" not in enc
    assert enc["input_ids"][0] == tok.bos_token_id == 0 and enc["input_ids"][-1] == tok.eos_token_id == 2


def test_gpt2_teacher_has_no_pad_and_eos_as_bos(out):
    _, texts = tf.prepare("generation", out / "generation")
    folder = out / "generation" / "teachers" / "gpt2"
    assert tf.build_teacher("generation", "gpt2", folder, texts, steps=1) == "gpt2"
    cfg, tok = _load(folder)
    assert cfg.model_type == "gpt2" and cfg.n_layer == 2
    assert tok.pad_token is None and cfg.pad_token_id is None
    assert tok.bos_token_id == tok.eos_token_id == cfg.eos_token_id
    ids = tok("ROMEO : my love")["input_ids"]
    assert tok.bos_token_id not in ids  # GPT-2 adds no special token
    assert cfg.vocab_size == len(tok)


def test_gemma_teacher_adds_bos_and_a_padded_vocab_is_kept_where_the_family_has_one(out):
    _, texts = tf.prepare("generation", out / "generation")
    gemma, qwen = out / "generation" / "teachers" / "gemma", out / "generation" / "teachers" / "qwen2"
    assert tf.build_teacher("generation", "gemma", gemma, texts, steps=0) == "gemma"
    cfg, tok = _load(gemma)
    assert cfg.model_type == "gemma" and cfg.head_dim == 16
    ids = tok("ROMEO : my love")["input_ids"]
    assert ids[0] == tok.bos_token_id == cfg.bos_token_id and tok.convert_ids_to_tokens(ids[0]) == "<bos>"
    assert tok.pad_token == "<pad>" and tok.pad_token_id == cfg.pad_token_id == 0
    assert tf.build_teacher("generation", "qwen2", qwen, texts, steps=0) == "qwen2"
    cfg, tok = _load(qwen)
    assert cfg.vocab_size == len(tok) + 8 and tok.bos_token is None  # real Qwen2: embedding rows > tokens, no bos
    # trained as pretrained: every window starts with the <bos> where the tokenizer adds one, and only there
    gemma_tok = AutoTokenizer.from_pretrained(gemma)
    with_bos, plain = tf.training_windows(gemma_tok, texts[:3]), tf.training_windows(tok, texts[:3])
    assert {w[0] for w in with_bos} == {gemma_tok.bos_token_id} and {len(w) for w in with_bos + plain} == {33}
    assert not any(gemma_tok.bos_token_id in w[1:] for w in with_bos)
    ids = sum((tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts[:3]), [])
    assert sum(plain, []) == ids[: len(plain) * 33]  # no start token: the plain 33-token cut of before


def test_help_and_an_unknown_family(out):
    run = [sys.executable, "-m", "tools.teacher_families"]
    done = subprocess.run(run + ["--help"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0
    assert "--families" in done.stdout and "deberta-v2" in done.stdout and "gpt_bigcode" in done.stdout
    bad = out / "bad"
    done = subprocess.run(run + [str(bad), "--task", "classification", "--families", "roberta", "gpt2"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "unknown family 'gpt2' for --task classification" in done.stderr
    assert not bad.exists()  # refused before anything is written
    (out / "a-file").write_text("")
    done = subprocess.run(run + [str(out / "a-file"), "--families", "bert"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "cannot make it a folder (File exists); give a folder path" in done.stderr


def test_a_failed_command_reports_its_stage_and_error_line(tmp_path):
    """The row names the stage that was running and the exception, not the clean-up chatter printed after it."""
    script = ("print('[data] running (not run yet)'); print('[data] done in 0.1 s -> x');"
              "print('[teacher] running (not run yet)'); import sys; sys.stdout.flush();"
              "import atexit; atexit.register(print, 'W: a warning at exit'); raise ValueError('boom')")
    with open(tmp_path / "log", "w") as log:
        rc, stage, error = tf.run_logged([sys.executable, "-c", script], log, "fam")
    assert rc == 1 and stage == "teacher" and error == "ValueError: boom"
    assert "W: a warning at exit" in (tmp_path / "log").read_text()
    row = {"task": "classification", "family": "fam", "passed": False, "stage": stage, "error": error,
           "seconds": 3.2}
    assert "| classification | fam | - | failed at teacher: ValueError: boom | - | - | - | 3 |" in tf.table([row])
