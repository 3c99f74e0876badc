import pytest
import torch

from distill.teacher import load_for_classification, resolve
from distill.train import fit
from pipeline.errors import PipelineError


def test_teacher_folder_checks(tmp_path, tiny_bert_dir):
    with pytest.raises(PipelineError, match="no config.json"):
        resolve(str(tmp_path))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(PipelineError, match="is not a folder"):
        resolve(str(tmp_path / "f.txt"))
    model, tok = load_for_classification(str(tiny_bert_dir), ["a", "b", "c"], fine_tune=True)
    x = tok(["good day"], return_tensors="pt")
    assert model(x["input_ids"], x["attention_mask"]).shape == (1, 3)
    assert model.hf.config.id2label == {0: "a", 1: "b", 2: "c"}


def test_decoder_and_unknown_types_are_refused(tmp_path):
    from transformers import GPT2Config, T5Config

    GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10).save_pretrained(tmp_path / "gpt")
    with pytest.raises(PipelineError, match="'gpt2' decoder"):
        load_for_classification(str(tmp_path / "gpt"), ["a", "b"], True)
    T5Config(num_layers=1, d_model=8).save_pretrained(tmp_path / "t5")
    with pytest.raises(PipelineError, match="model type 't5' is not supported"):
        load_for_classification(str(tmp_path / "t5"), ["a", "b"], True)


def test_labels_must_match_when_not_fine_tuning(tiny_bert_dir):
    with pytest.raises(PipelineError, match="teacher.fine_tune = false"):
        load_for_classification(str(tiny_bert_dir), ["x", "y"], fine_tune=False)


def test_nan_loss_stops_training_with_a_hint():
    lin = torch.nn.Linear(1, 1)
    with pytest.raises(PipelineError, match=r"loss became nan at step 2/3.*distill.lr"):
        fit(lin, [[1], [2], [3]], lambda m, b: m.weight.sum() * (float("nan") if b == [2] else 1.0), total_steps=3,
            lr=0.1, weight_decay=0.0, warmup_fraction=0.0, desc="t", lr_hint="distill.lr")
