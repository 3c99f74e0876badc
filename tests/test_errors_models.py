"""Bad model input -> one PipelineError naming the problem and the fix, for the teacher and model loaders:

- the classification teacher (distill/teacher.py, distill/teacher_checks.py): a hub id offline, a local folder
  with an unreadable config.json, a tokenizer that does not load (a truncated tokenizer.json used to escape as the
  tokenizers library's bare Exception), weights that do not load (a corrupt pytorch_model.bin, a missing shard);
- the generation teacher (distill/teacher.py load_causal_teacher), through its stage: a hub id offline, a local
  folder with an unreadable config.json (it was told to use the packaged teacher offline), and a folder without
  weights, with truncated weights or without a tokenizer (each escaped as a raw OSError, SafetensorError or
  AttributeError);
- the saved generation model folders (load_causal_folder, pipeline/tasks/generation/common.py load_lm,
  distill/vocab.py VocabMap.load): a folder never written, truncated weights and a lost tokenizer (the last two
  escaped as raw SafetensorError / AttributeError), a lost vocab_map.json;
- the exporters: Optimum's peer export of a damaged folder (eval/peer.py), and the decoder export of a teacher type
  Optimum cannot export (export/onnx_export.py; it advised a higher quantize.opset, which cannot help).

Tiny random-weight models only (tests/conftest.py's BERT, a 1-layer Llama, a 1-layer StarCoder2)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.errors import PipelineError
from test_gpt_pipeline import _tokenizer

LABELS = ["a", "b"]
WORDS = ["[UNK]", "[EOS]", "to", "be", "or", "not", "that", "is", "the", "question"]


@pytest.fixture
def offline(monkeypatch):
    """Hub lookups fail at once, as under HF_HUB_OFFLINE=1 (read by the libraries when they are imported)."""
    import huggingface_hub.constants
    import transformers.utils.hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(transformers.utils.hub, "_is_offline_mode", True)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _truncate(path: Path) -> None:
    """What an interrupted copy or download leaves."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _raises(fn, *parts: str) -> str:
    """fn() raises one PipelineError whose message holds every part (literal text); returns the message."""
    with pytest.raises(PipelineError) as e:
        fn()
    msg = str(e.value)
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"
    return msg


# --- the classification teacher --------------------------------------------------------------------------------

def _classification_teacher(folder: Path):
    from distill.teacher import load_for_classification

    return load_for_classification(str(folder), LABELS, fine_tune=True)


def test_a_hub_teacher_offline_is_one_error(offline):
    _raises(lambda: _classification_teacher(Path("nobody-pf/no-such-encoder")),
            "teacher.model: cannot read a model config from 'nobody-pf/no-such-encoder'",
            "Offline? Use a local folder or 'minilm-package'")


def test_a_local_teacher_whose_config_json_does_not_parse(tmp_path, tiny_bert_dir):
    """The config load passes it on (teacher_config: unreadable -> None) to the teacher stage, which names the file;
    it was told to go offline-proof with a local folder, which it is."""
    d = _copy(tiny_bert_dir, tmp_path / "t")
    (d / "config.json").write_text('{"model_type": "bert", "hidden_size": 3')
    msg = _raises(lambda: _classification_teacher(d), f"cannot read a model config from '{d}'",
                  "config.json' is not a valid JSON file", "Save the model there again with save_pretrained()")
    assert "Offline" not in msg


@pytest.mark.parametrize("damage", ["truncated tokenizer.json", "another model's vocab.json"])
def test_a_teacher_tokenizer_that_does_not_load(tmp_path, tiny_bert_dir, damage):
    """The folder has a tokenizer file (check_folder_files lets it through) that does not make this tokenizer."""
    d = _copy(tiny_bert_dir, tmp_path / "t")
    (d / "vocab.txt").unlink()
    if damage == "truncated tokenizer.json":  # escaped as the tokenizers library's bare Exception
        _truncate(d / "tokenizer.json")
    else:  # a byte-level BPE's vocab.json copied without its merges, next to a BERT
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (d / f).unlink()
        (d / "vocab.json").write_text(json.dumps({w: i for i, w in enumerate(WORDS)}))
    _raises(lambda: _classification_teacher(d), f"teacher.model: cannot load a tokenizer from {d}",
            "Save it there with tokenizer.save_pretrained(folder)")


@pytest.mark.parametrize("damage,names", [
    ("corrupt pytorch_model.bin", "pytorch_model.bin"),
    ("missing shard", "model-00002-of-00002.safetensors"),
])
def test_teacher_weights_that_do_not_load(tmp_path, tiny_bert_dir, damage, names):
    d = _copy(tiny_bert_dir, tmp_path / "t")
    if damage == "corrupt pytorch_model.bin":  # the older file format, not a pickle at all
        (d / "model.safetensors").unlink()
        (d / "pytorch_model.bin").write_bytes(b"<html>Sign in to download</html>")
    else:  # a sharded checkpoint copied without its second file
        (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
            "embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors",
            "encoder.layer.0.output.dense.weight": "model-00002-of-00002.safetensors"}}))
    _raises(lambda: _classification_teacher(d), f"teacher.model: cannot load the weights in {d}", names,
            "Copy or download the model again")


# --- the generation teacher ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A 'pretrained' causal LM folder: a 1-layer Llama with random weights and a word-level tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    tok = _tokenizer(folder)  # test_gpt_pipeline's word-level tokenizer, saved in the folder
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
                     ).save_pretrained(folder, safe_serialization=True)
    return folder


def _generation_teacher_stage(tmp_path: Path, model: str) -> None:
    """The config loads (a local folder's config.json is all it reads), then the generation teacher stage runs."""
    from pipeline.config import config_from_dict
    from pipeline.stage import STAGES
    from pipeline.task import StageContext
    from pipeline.tasks.generation.train import stage_teacher

    cfg = config_from_dict({"run": {"task": "generation", "runs_dir": str(tmp_path / "runs")},
                            "teacher": {"model": model},
                            "student": {"init": "random", "hidden": 16, "heads": 2, "ffn": 32}})
    out = tmp_path / "out"
    try:
        stage_teacher(StageContext(cfg, "teacher", out, tmp_path / "runs", STAGES["teacher"].deps))
    finally:
        assert not (out / "model").exists()  # nothing half-written for the next stage


def test_the_generation_teacher_stage_takes_the_good_folder(tmp_path, tiny_llama_dir):
    """The fixture itself is fine: the failures below are the damage alone."""
    from pipeline.config import config_from_dict
    from pipeline.stage import STAGES
    from pipeline.task import StageContext
    from pipeline.tasks.generation.train import stage_teacher

    cfg = config_from_dict({"run": {"task": "generation", "runs_dir": str(tmp_path / "runs")},
                            "teacher": {"model": str(tiny_llama_dir)},
                            "student": {"init": "random", "hidden": 16, "heads": 2, "ffn": 32}})
    summary = stage_teacher(StageContext(cfg, "teacher", tmp_path / "out", tmp_path / "runs", STAGES["teacher"].deps))
    assert summary["model_type"] == "llama" and (tmp_path / "out" / "model" / "pocketformer.json").is_file()


def test_a_generation_hub_teacher_offline_is_one_error(tmp_path, offline):
    _raises(lambda: _generation_teacher_stage(tmp_path, "nobody-pf/no-such-decoder"),
            "teacher.model = 'nobody-pf/no-such-decoder' is neither a local model folder nor a reachable hub id",
            "Use 'smollm2-package' offline")


@pytest.mark.parametrize("damage,parts", [
    # it was "neither a local model folder nor a reachable hub id ... Use 'smollm2-package' offline"
    ("config.json that does not parse", ["teacher.model: cannot read the model config in {d}",
                                         "config.json' is not a valid JSON file",
                                         "Save the model there again with save_pretrained()"]),
    # these three escaped from from_pretrained as OSError, SafetensorError and AttributeError
    ("no weights", ["teacher.model: {d} has no weights (model.safetensors or pytorch_model.bin)",
                    "Save the model there with save_pretrained()"]),
    ("truncated weights", ["teacher.model: {d}/model.safetensors is not a readable safetensors file",
                           "truncated. Copy or download it again"]),
    ("no tokenizer", ["teacher.model: {d} has no tokenizer", "Save it there with tokenizer.save_pretrained(folder)"]),
])
def test_a_damaged_generation_teacher_folder_is_one_error(tmp_path, tiny_llama_dir, damage, parts):
    d = _copy(tiny_llama_dir, tmp_path / "teacher")
    if damage == "config.json that does not parse":
        (d / "config.json").write_text('{"model_type": "llama", "hidden_size": 1')
    elif damage == "no weights":
        (d / "model.safetensors").unlink()
    elif damage == "truncated weights":
        _truncate(d / "model.safetensors")
    else:  # the tokenizer's config kept, its vocabulary (tokenizer.json) not copied
        (d / "tokenizer.json").unlink()
    msg = _raises(lambda: _generation_teacher_stage(tmp_path, str(d)), *[p.format(d=d) for p in parts])
    assert "smollm2-package" not in msg  # a local folder: no advice about hub ids offline


def test_a_generation_teacher_whose_weights_do_not_load(tmp_path, tiny_llama_dir):
    """Files present and a readable header, but not this model's weights: a shard the index names is missing."""
    from distill.teacher import load_causal_teacher

    d = _copy(tiny_llama_dir, tmp_path / "teacher")
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.norm.weight": "model-00002-of-00002.safetensors"}}))
    _raises(lambda: load_causal_teacher(str(d)), f"teacher.model: cannot load the weights in {d}",
            "model-00002-of-00002.safetensors", "Copy or download the model again")


# --- saved generation model folders ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_teacher(tmp_path_factory, tiny_llama_dir) -> Path:
    """runs/<run>/teacher/model as the generation teacher stage writes it."""
    from distill.teacher import load_causal_teacher, save_causal

    folder = tmp_path_factory.mktemp("run") / "teacher" / "model"
    save_causal(folder, *load_causal_teacher(str(tiny_llama_dir)), {"source": str(tiny_llama_dir)})
    return folder


def test_a_model_folder_never_written(tmp_path):
    from distill.teacher import load_causal_folder
    from pipeline.tasks.generation.common import load_lm

    _raises(lambda: load_causal_folder(tmp_path / "teacher" / "model"),  # the logits, distill and search steps
            f"teacher: {tmp_path / 'teacher' / 'model'} is not a saved model folder",
            "run the stage that writes it first")
    _raises(lambda: load_lm(tmp_path / "distill" / "student", "student"),  # eval, quantize, bench, bundle
            f"student: {tmp_path / 'distill' / 'student'} is not a saved model folder",
            "run the stage that writes it first")


@pytest.mark.parametrize("damage", ["truncated weights", "no tokenizer"])
def test_a_damaged_saved_model_folder_is_one_error(tmp_path, saved_teacher, damage):
    """Both escaped load_causal_folder as SafetensorError / AttributeError; load_lm reads the teacher through it."""
    from pipeline.tasks.generation.common import load_lm

    d = _copy(saved_teacher, tmp_path / "model")
    if damage == "truncated weights":
        _truncate(d / "model.safetensors")
    else:
        (d / "tokenizer.json").unlink()
    _raises(lambda: load_lm(d, "teacher"), f"teacher: the checkpoint in {d} is missing or corrupt", "re-run its stage")


def test_a_lost_vocab_map_is_one_error(tmp_path):
    """The distill and baseline stages and the search read the logits stage's restricted vocabulary."""
    from distill.vocab import VocabMap

    (tmp_path / "logits").mkdir()
    _raises(lambda: VocabMap.load(tmp_path / "logits"), f"{tmp_path / 'logits'} has no vocab_map.json",
            "re-run the stage that wrote it")


# --- exporters -------------------------------------------------------------------------------------------------

def test_the_optimum_peer_of_a_damaged_folder_is_one_error(tmp_path):
    """The peer stage reads the trained folders with Optimum's own loader: a student folder damaged since its stage
    ran is one error naming the folder and how to benchmark without the peer."""
    from transformers import BertForSequenceClassification

    from eval.peer import export_peer
    from conftest import tiny_bert_config, write_tokenizer

    folder = tmp_path / "student"
    BertForSequenceClassification(tiny_bert_config(num_labels=3)).save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder)
    _truncate(folder / "model.safetensors")
    _raises(lambda: export_peer(folder, tmp_path / "peer", 17), f"Optimum could not export {folder} (SafetensorError",
            "set bench.optimum_peer = false to benchmark without the peer")


def test_the_optimum_peer_of_a_damaged_compact_embedding_student_is_one_error(tmp_path):
    """A restricted-vocabulary student is folded into a stock folder before Optimum sees it (eval/peer.py
    plain_folder): a damaged one is the same one error every stage gives it (was a raw SafetensorError), and the
    peer stage's folder keeps no half-written fold."""
    from transformers import BertForSequenceClassification

    from conftest import make_texts, tiny_bert_config, write_tokenizer
    from distill.embeddings import compact_embeddings
    from distill.models import HFLogits, save_model
    from distill.vocab import training_vocab
    from eval.peer import peer_rows

    tok = write_tokenizer(tmp_path / "tok")
    hf = BertForSequenceClassification(tiny_bert_config(num_labels=3))
    compact_embeddings(hf, training_vocab(tok, [t for t, _ in make_texts(10)], 32, cap=12)[0], 8, tok.pad_token_id)
    folder = tmp_path / "student"
    save_model(folder, HFLogits(hf), tok, ["negative", "neutral", "positive"], "hf", 32)
    _truncate(folder / "model.safetensors")
    out = tmp_path / "peer"
    out.mkdir()
    _raises(lambda: peer_rows({"student": folder}, out, "peer", 17, ["a"], np.array([0]), 3, 1, {}),
            f"student: the checkpoint in {folder} is missing or corrupt", "re-run its stage")
    assert list(out.iterdir()) == []


def test_a_decoder_type_optimum_cannot_export_names_the_fix_that_works(tmp_path):
    """A StarCoder2 teacher loads, scores and generates (check_causal takes any *ForCausalLM), and then the quantize
    stage cannot export it: Optimum has no ONNX config for the type. The error advised a higher quantize.opset, which
    no opset fixes; it names the type and the quantize.models that leaves the teacher out."""
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    from export.onnx_export import export_decoder

    torch.manual_seed(0)
    Starcoder2ForCausalLM(Starcoder2Config(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32,
                                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
                          ).save_pretrained(tmp_path / "teacher")
    msg = _raises(lambda: export_decoder(tmp_path / "teacher", tmp_path / "onnx", 17),
                  f"ONNX export of the decoder in {tmp_path / 'teacher'} failed",
                  "no KV-cache export (text-generation-with-past) for model type 'starcoder2'",
                  'quantize.models = ["student", "lstm"]')
    assert "opset" not in msg
    # the fix it names is a config the generation task takes
    from pipeline.config import config_from_dict

    cfg = config_from_dict({"run": {"task": "generation"}, "quantize": {"models": ["student", "lstm"]}})
    assert cfg.quantize.models == ["student", "lstm"]
