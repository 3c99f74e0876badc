import pytest
import torch

from distill.teacher import load_for_classification
from distill.teachers import resolve
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


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_config(folder, **changes):
    import json

    c = json.loads((folder / "config.json").read_text())
    c.update(changes)
    (folder / "config.json").write_text(json.dumps(c))


def test_truncated_weights_are_one_clear_error(tmp_path, tiny_bert_dir):
    d = _copy(tiny_bert_dir, tmp_path / "t")
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    with pytest.raises(PipelineError, match="is not a readable safetensors file.*truncated"):
        load_for_classification(str(d), ["a", "b"], True)


def test_missing_weights_or_tokenizer(tmp_path, tiny_bert_dir):
    d = _copy(tiny_bert_dir, tmp_path / "w")
    (d / "model.safetensors").unlink()
    with pytest.raises(PipelineError, match="has no weights"):
        load_for_classification(str(d), ["a", "b"], True)
    d = _copy(tiny_bert_dir, tmp_path / "t")
    for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (d / f).unlink()
    with pytest.raises(PipelineError, match="has no tokenizer.*tokenizer.save_pretrained"):
        load_for_classification(str(d), ["a", "b"], True)


@pytest.mark.parametrize("changes", [
    {"num_hidden_layers": 3},  # a layer the weights do not have would start random
    {"num_hidden_layers": 1},  # a saved layer would be left out
    {"intermediate_size": 48},  # a width that differs would be re-initialised (ignore_mismatched_sizes)
])
def test_config_that_disagrees_with_the_weights_is_an_error(tmp_path, tiny_bert_dir, changes):
    d = _copy(tiny_bert_dir, tmp_path / "c")
    _edit_config(d, **changes)
    with pytest.raises(PipelineError, match="do not fit its config.json"):
        load_for_classification(str(d), ["a", "b"], True)


def test_only_the_classification_head_is_new(tiny_bert_dir, capsys):
    model, _ = load_for_classification(str(tiny_bert_dir), ["a", "b"], True)
    assert "new classification head for 2 labels: classifier.bias, classifier.weight" in capsys.readouterr().out


def test_max_length_beyond_the_position_table(tiny_bert_dir):
    with pytest.raises(PipelineError, match=r"teacher.max_length = 200.*positions for 128 tokens.*<= 128"):
        load_for_classification(str(tiny_bert_dir), ["a", "b"], True, max_length=200)
    load_for_classification(str(tiny_bert_dir), ["a", "b"], True, max_length=128)


@pytest.mark.parametrize("model_type", ["roberta", "mpnet"])
def test_roberta_position_table_counts_its_offset(model_type):
    """RoBERTa and MPNet number positions from pad_token_id + 1: 514 rows hold 512 tokens (513 crashed in the
    embedding lookup for MPNet after the check let it through)."""
    from transformers import AutoConfig

    from distill.teacher_checks import check_max_length, position_limit

    cfg = AutoConfig.for_model(model_type, max_position_embeddings=514, pad_token_id=1)
    assert position_limit(cfg) == 512
    with pytest.raises(PipelineError, match="positions for 512 tokens"):
        check_max_length(cfg, 513)


def test_the_registry_knows_each_packaged_teachers_config():
    """The config load checks lengths, student.init, distill.layer_map and teacher.fine_tune against TEACHERS'
    config fields without reading the model: they must be the packaged files' own."""
    from transformers import AutoConfig

    from distill.teachers import TEACHERS

    minilm = AutoConfig.from_pretrained(TEACHERS["minilm-package"].locate())
    assert {k: getattr(minilm, k) for k in TEACHERS["minilm-package"].config} == TEACHERS["minilm-package"].config
    gguf = pytest.importorskip("gguf")
    fields = gguf.GGUFReader(TEACHERS["smollm2-package"].locate()).fields

    def value(key):
        f = fields[key]
        part = f.parts[f.data[0]]
        return bytes(part).decode() if key == "general.architecture" else int(part[0])

    arch = value("general.architecture")
    assert {"model_type": arch, "architectures": ["LlamaForCausalLM"], "hidden_size": value(f"{arch}.embedding_length"),
            "num_hidden_layers": value(f"{arch}.block_count"),
            "num_attention_heads": value(f"{arch}.attention.head_count"),
            "intermediate_size": value(f"{arch}.feed_forward_length"),
            "max_position_embeddings": value(f"{arch}.context_length")} == TEACHERS["smollm2-package"].config


def test_a_packaged_teacher_of_the_other_task_is_one_clear_error():
    from distill.teacher import load_causal_teacher

    with pytest.raises(PipelineError, match=r"'smollm2-package' is a generation teacher; run.task = 'classification' "
                                            r"takes a model folder, a hub id or one of: minilm-package"):
        resolve("smollm2-package", "classification")
    with pytest.raises(PipelineError, match=r"'minilm-package' is a classification teacher.*one of: smollm2-package"):
        load_causal_teacher("minilm-package")
