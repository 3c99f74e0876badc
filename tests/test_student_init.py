"""student.init from the teacher: teacher-layers copies weights when every shape matches (it used to crash
on the position table: 512 teacher rows vs the student's 64-128) and is one clear error otherwise, found
before the teacher trains."""
import dataclasses

import pytest
import torch

from distill.student import build_student, check_init, default_layer_map
from distill.teacher import load_for_classification
from pipeline.config import StudentSection
from pipeline.errors import PipelineError

LABELS = ["a", "b", "c"]
# the tiny teacher (tests/conftest.py): hidden 32, 2 heads, ffn 64, 2 layers, 128 positions
MATCHING = StudentSection(layers=1, hidden=32, heads=2, ffn=64, init="teacher-layers", max_length=32)


@pytest.fixture(scope="module")
def teacher(tiny_bert_dir):
    model, _ = load_for_classification(str(tiny_bert_dir), LABELS, fine_tune=True)
    return model.eval()


def test_teacher_layers_copies_embeddings_positions_and_layers(teacher):
    s = MATCHING
    layer_map = default_layer_map(s.layers, 2)
    student = build_student(s, teacher, LABELS, layer_map).eval()
    sb, tb = student.hf.bert, teacher.hf.bert
    n = sb.embeddings.position_embeddings.weight.shape[0]
    assert n == 64 < tb.embeddings.position_embeddings.weight.shape[0]
    assert torch.equal(sb.embeddings.position_embeddings.weight, tb.embeddings.position_embeddings.weight[:n])
    assert torch.equal(sb.embeddings.word_embeddings.weight, tb.embeddings.word_embeddings.weight)
    t_layer, s_layer = tb.encoder.layer[layer_map[0] - 1].state_dict(), sb.encoder.layer[0].state_dict()
    assert all(torch.equal(t_layer[k], v) for k, v in s_layer.items())
    ids = torch.tensor([[2, 10, 11, 3]])
    assert student(ids, torch.ones_like(ids)).shape == (1, 3)


@pytest.mark.parametrize("change,msg", [
    ({"hidden": 16, "heads": 2}, r"needs student.hidden = 32, the teacher's hidden size \(it is 16\)"),
    ({"heads": 4}, r"needs student.heads = 2"),
    ({"ffn": 128}, r"needs student.ffn = 64"),
    ({"max_length": 256}, r"of at most 128 rows, the teacher.s positions \(it is 256\)"),
])
def test_teacher_layers_that_cannot_fit_is_one_error(teacher, change, msg):
    s = dataclasses.replace(MATCHING, **change)
    with pytest.raises(PipelineError, match=r"student.init = 'teacher-layers' copies teacher weights.*" + msg):
        build_student(s, teacher, LABELS, default_layer_map(s.layers, 2))


def test_teacher_pca_wider_than_the_teacher(teacher):
    s = dataclasses.replace(MATCHING, init="teacher-pca", hidden=64, heads=2)
    with pytest.raises(PipelineError, match=r"needs student.hidden <= 32 \(it is 64\)"):
        check_init(s, teacher.hf.config)


def test_teacher_layers_may_repeat_teacher_layers(teacher):
    """A student deeper than the teacher reuses teacher layers (the default map repeats them)."""
    s = dataclasses.replace(MATCHING, layers=3)
    student = build_student(s, teacher, LABELS, default_layer_map(3, 2))
    assert len(student.hf.bert.encoder.layer) == 3


def test_the_teacher_stage_refuses_a_student_it_cannot_build(tiny_cfg_dict):
    """The mismatch is found when the teacher loads, before its fine-tune; the stage leaves nothing."""
    from pipeline.cli import _stages
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    _stages()
    tiny_cfg_dict["student"].update({"layers": 2})
    tiny_cfg_dict["distill"].update({"layer_map": [1, 5]})
    tiny_cfg_dict["teacher"]["epochs"] = 100.0  # would take minutes if it trained before the check
    with pytest.raises(PipelineError, match=r"distill.layer_map names teacher layer\(s\) \[5\], but the teacher "
                                            r"has layers 1..2"):
        config_from_dict(tiny_cfg_dict, "tiny")  # a local folder's config.json is read when the config loads
    tiny_cfg_dict["distill"]["layer_map"] = [1, 2]
    cfg = config_from_dict(tiny_cfg_dict, "tiny")
    # past the load check, as a hub teacher is (its depth is known once the stage loads it)
    cfg = dataclasses.replace(cfg, distill=dataclasses.replace(cfg.distill, layer_map=[1, 5]))
    with pytest.raises(PipelineError, match=r"distill.layer_map names teacher layer\(s\) \[5\]"):
        run(cfg, ["teacher"])
    assert not (cfg.run_dir / "teacher").exists()


@pytest.mark.parametrize("teacher_config,student,msg", [
    ({}, {"init": "teacher-layers", "hidden": 16, "heads": 2}, "needs student.hidden = 32"),
    ({"model_type": "distilbert", "dim": 32, "n_heads": 2, "hidden_dim": 64, "n_layers": 2},
     {"init": "teacher-layers", "hidden": 32, "heads": 2, "ffn": 64}, r"needs a BERT teacher \(this one is 'distilbert'\)"),
    # ALBERT's table is 16 wide (embedding_size) under a 32-wide encoder: PCA projects the table
    ({"model_type": "albert", "embedding_size": 16, "hidden_size": 32, "num_attention_heads": 2,
      "intermediate_size": 64}, {"init": "teacher-pca", "hidden": 24, "heads": 2},
     r"teacher's 16-wide embeddings \(its embedding width\) and needs student.hidden <= 16 \(it is 24\)"),
])
def test_a_student_init_the_local_teacher_cannot_take_is_refused_at_load(tiny_cfg_dict, tmp_path, teacher_config,
                                                                          student, msg):
    """show-config refuses what the teacher stage would: the local teacher folder's config is read at load."""
    import json

    from pipeline.config import config_from_dict

    if teacher_config:  # a config.json is all the check reads
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "config.json").write_text(json.dumps(teacher_config))
        tiny_cfg_dict["teacher"]["model"] = str(tmp_path / "t")
    tiny_cfg_dict["student"].update(student)
    with pytest.raises(PipelineError, match=msg):
        config_from_dict(tiny_cfg_dict, "tiny")


def test_the_student_has_two_token_types_whatever_the_teacher_has(teacher):
    """A RoBERTa teacher has one token type (DeBERTa none): the BERT student still gets BERT's two, since tools
    that export a BERT (Optimum, for the bench's optimum peer) feed type 1 too."""
    import copy

    one_type = copy.deepcopy(teacher)
    one_type.hf.config.type_vocab_size = 1
    s = dataclasses.replace(MATCHING, init="random")
    assert build_student(s, one_type, LABELS, [1]).hf.config.type_vocab_size == 2


def test_the_registry_names_the_archs_of_the_runs_task(teacher):
    """An arch that is unknown, or that serves the other task, is one error listing what this task takes."""
    with pytest.raises(PipelineError, match=r"student.arch = 'llama' does not serve run.task = 'classification'\. "
                                            r"Known for classification: bert, npu"):
        build_student(dataclasses.replace(MATCHING, arch="llama"), teacher, LABELS, [1])
    with pytest.raises(PipelineError, match=r"'gru' is unknown\. Known for generation: llama"):
        build_student(dataclasses.replace(MATCHING, arch="gru"), teacher, task="generation")


def test_decoder_student_starts_from_the_kept_teacher_rows():
    """The generation student: kept rows + 'other' (the mean of the rest), then PCA or copied as they are."""
    import numpy as np
    from transformers import LlamaConfig, LlamaForCausalLM

    from distill.vocab import VocabMap

    torch.manual_seed(0)
    t = LlamaForCausalLM(LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)).eval()
    vmap = VocabMap.build(np.arange(0, 60, 2), 60, restrict=True)
    w = t.get_input_embeddings().weight.detach()
    s = StudentSection(arch="llama", layers=2, hidden=32, heads=4, ffn=64, init="teacher-layers")
    student = build_student(s, t, vmap, 64, task="generation")
    emb = student.get_input_embeddings().weight
    assert emb.shape == (31, 32) and torch.equal(emb[:30], w[0::2]) and torch.allclose(emb[30], w[1::2].mean(0))
    assert torch.equal(student.model.layers[1].mlp.up_proj.weight, t.model.layers[2].mlp.up_proj.weight)
    pca = build_student(dataclasses.replace(s, hidden=16, ffn=32, init="teacher-pca"), t, vmap, 64, task="generation")
    assert pca.get_input_embeddings().weight.shape == (31, 16)
    assert abs(pca.get_input_embeddings().weight.std().item() - 0.02) < 1e-3
    with pytest.raises(PipelineError, match=r"needs a Llama teacher of the student's width \(this one has hidden "
                                            r"32, ffn 64, heads 4; the student has 16, 32, 4\)"):
        build_student(dataclasses.replace(s, hidden=16, ffn=32), t, vmap, 64, task="generation")
    with pytest.raises(PipelineError, match=r"needs student.hidden <= 32 \(it is 48\)"):
        build_student(dataclasses.replace(s, hidden=48, ffn=96, init="teacher-pca"), t, vmap, 64, task="generation")


def test_a_decoder_student_that_cannot_start_from_a_local_teacher_is_refused_at_load(tmp_path):
    """The generation student's init against a local teacher folder's config.json, as show-config sees it; the
    packaged or hub teacher gets the same check in the teacher stage, before the logits pass."""
    from transformers import GPT2Config, LlamaConfig

    from pipeline.config import load_config

    LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2).save_pretrained(tmp_path / "teacher")
    base = ["run.task=generation", f'teacher.model="{tmp_path / "teacher"}"', "student.hidden=32", "student.heads=4",
            "student.ffn=64"]
    load_config(None, [*base, 'student.init="teacher-layers"'])
    with pytest.raises(PipelineError, match=r"needs a Llama teacher of the student's width"):
        load_config(None, [*base, 'student.init="teacher-layers"', "student.ffn=128"])
    with pytest.raises(PipelineError, match=r"needs student.hidden <= 32 \(it is 64\)"):
        load_config(None, [*base, 'student.init="teacher-pca"', "student.hidden=64"])
    # a GPT-2 teacher names its sizes otherwise (no intermediate_size): one line, not an AttributeError
    GPT2Config(n_embd=32, n_head=4, n_layer=2, vocab_size=60).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(PipelineError, match=r"copies Llama layers, and this teacher is 'gpt2'; or use"):
        load_config(None, [*base[:1], f'teacher.model="{tmp_path / "gpt2"}"', *base[2:], 'student.init="teacher-layers"'])


def test_the_npu_student_position_table_follows_max_positions(teacher):
    """student.max_positions sets the NPU student's table as the BERT student's (it was max(max_length, 64)
    whatever it said, and a text past that crashed the eval stage)."""
    s = dataclasses.replace(MATCHING, arch="npu", init="random", max_length=32, max_positions=100)
    student = build_student(s, teacher, LABELS, default_layer_map(s.layers, 2)).eval()
    ids = torch.randint(5, teacher.hf.config.vocab_size, (1, 100))
    assert student(ids, torch.ones_like(ids)).shape == (1, 3)
    default = build_student(dataclasses.replace(s, max_positions=0), teacher, LABELS, [1]).eval()
    with pytest.raises(RuntimeError, match="size of tensor"):
        default(ids, torch.ones_like(ids))  # 100 tokens, past its 64 rows
