"""Student architectures (a registry keyed by student.arch, each serving one or more run.task values)
and their initialisation from the teacher (student.init: random | teacher-pca | teacher-layers)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

import torch

from distill.embeddings import pca_rows
from distill.models import HFLogits
from pipeline.config import StudentSection, student_positions
from pipeline.errors import PipelineError


def default_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """Student layer i (1-based) -> teacher layer, spread uniformly (TinyBERT's g(m) = m * N / M)."""
    # half-up rounding (Python round() is half-to-even and would bunch layers: [2, 3, 4, 6] for 4 of 6)
    return [max(1, int((i + 1) * teacher_layers / student_layers + 0.5)) for i in range(student_layers)]


def check_layer_map(layer_map: list[int], student_layers: int, teacher_layers: int) -> list[int]:
    if not layer_map:
        return default_layer_map(student_layers, teacher_layers)
    if len(layer_map) != student_layers:
        raise PipelineError(f"distill.layer_map has {len(layer_map)} entries but the student has {student_layers} "
                            f"layers: give one teacher layer per student layer")
    bad = [t for t in layer_map if not 1 <= t <= teacher_layers]
    if bad:
        raise PipelineError(f"distill.layer_map names teacher layer(s) {bad}, but the teacher has layers "
                            f"1..{teacher_layers}")
    return list(layer_map)


def build_bert(s: StudentSection, teacher: HFLogits, labels: list[str], layer_map: list[int],
               attn_eager: bool = False) -> HFLogits:
    from transformers import BertConfig, BertForSequenceClassification

    tcfg = teacher.hf.config
    check_init(s, tcfg)
    cfg = BertConfig(
        vocab_size=tcfg.vocab_size, hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
        intermediate_size=s.ffn, max_position_embeddings=student_positions(s),
        # at least BERT's 2 token types, whatever the teacher has (RoBERTa 1, DeBERTa 0): tools that export a BERT
        # (Optimum, for the bench's optimum peer) feed token type 1 as well as 0; the student itself is fed zeros
        type_vocab_size=max(getattr(tcfg, "type_vocab_size", 2) or 0, 2), pad_token_id=tcfg.pad_token_id or 0,
        num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={v: i for i, v in enumerate(labels)},
        hidden_act="gelu", classifier_dropout=0.1,
    )
    if s.init == "teacher-layers":  # copied layers must compute what they computed in the teacher
        cfg.hidden_act, cfg.layer_norm_eps = tcfg.hidden_act, tcfg.layer_norm_eps
    if attn_eager:  # attention maps are only returned by the eager implementation
        cfg._attn_implementation = "eager"
    student = BertForSequenceClassification(cfg)
    if s.init == "random":
        return HFLogits(student)
    t_emb = teacher.hf.get_input_embeddings().weight.detach()  # (V, D_t)
    if t_emb.shape[0] != cfg.vocab_size:
        raise PipelineError("student.init needs the student to share the teacher's vocabulary")
    with torch.no_grad():
        if s.init == "teacher-pca":
            student.bert.embeddings.word_embeddings.weight.copy_(pca_rows(t_emb, s.hidden))
        elif s.init == "teacher-layers":
            _copy_bert_layers(student, teacher, layer_map)
    return HFLogits(student)


def teacher_layers_problem(s: StudentSection, tcfg) -> str | None:
    """Why the teacher's layers cannot be copied into this student (None: they can). Copying needs the
    same shapes: no projection is learned at init, so a width that differs cannot be bridged."""
    if tcfg.model_type != "bert":
        return f"a BERT teacher (this one is '{tcfg.model_type}')"
    same = [("student.hidden", s.hidden, tcfg.hidden_size, "hidden size"),
            ("student.heads", s.heads, tcfg.num_attention_heads, "attention heads"),
            ("student.ffn", s.ffn, tcfg.intermediate_size, "feed-forward width")]
    for key, mine, theirs, what in same:
        if mine != theirs:
            return f"{key} = {theirs}, the teacher's {what} (it is {mine})"
    if student_positions(s) > tcfg.max_position_embeddings:
        return (f"a student position table (student.max_positions, else max(student.max_length, 64)) of at most "
                f"{tcfg.max_position_embeddings} rows, the teacher's positions (it is {student_positions(s)})")
    return None


def embedding_width(tcfg) -> int:
    """Width of the teacher's input embedding table, what teacher-pca projects: narrower than hidden_size where
    the embedding is factorized (ALBERT, ELECTRA, MobileBERT: embedding_size; OPT-350m: word_embed_proj_dim)."""
    return getattr(tcfg, "embedding_size", None) or getattr(tcfg, "word_embed_proj_dim", None) or tcfg.hidden_size


def check_pca(s: StudentSection, tcfg) -> None:
    """student.init = 'teacher-pca' against the teacher's embedding width (either task; tcfg: its HF config)."""
    width = embedding_width(tcfg)
    if s.init == "teacher-pca" and s.hidden > width:
        raise PipelineError(f"student.init = 'teacher-pca' projects the teacher's {width}-wide embeddings (its "
                            f"embedding width) and needs student.hidden <= {width} (it is {s.hidden}); use 'random'")


def check_init(s: StudentSection, tcfg) -> None:
    """Fail before any training when student.init cannot work with this BERT-family teacher."""
    check_pca(s, tcfg)
    if s.init == "teacher-layers" and (problem := teacher_layers_problem(s, tcfg)):
        raise PipelineError(f"student.init = 'teacher-layers' copies teacher weights as they are and needs "
                            f"{problem}. Change that setting, or use student.init = 'teacher-pca' or 'random'")


def _copy_bert_layers(student, teacher: HFLogits, layer_map: list[int]) -> None:
    """DistilBERT-style init: embeddings and the mapped teacher layers copied as they are. The position
    table keeps the teacher's first rows: the student reads no further than its own max_length."""
    t, se = teacher.hf, student.bert.embeddings
    te = t.bert.embeddings
    n = min(se.position_embeddings.weight.shape[0], te.position_embeddings.weight.shape[0])
    se.word_embeddings.weight.copy_(te.word_embeddings.weight)
    se.position_embeddings.weight[:n].copy_(te.position_embeddings.weight[:n])
    se.token_type_embeddings.weight.copy_(te.token_type_embeddings.weight[: se.token_type_embeddings.weight.shape[0]])
    se.LayerNorm.load_state_dict(te.LayerNorm.state_dict())
    for i, tl in enumerate(layer_map):
        student.bert.encoder.layer[i].load_state_dict(t.bert.encoder.layer[tl - 1].state_dict())


def build_npu(s: StudentSection, teacher: HFLogits, labels: list[str], layer_map: list[int],
              attn_eager: bool = False):
    """The NPU-friendly student (distill/npu_student.py), initialised like the BERT student: word embeddings
    from the teacher's by PCA ('teacher-pca') or random (config load refuses 'teacher-layers' for it: it has no
    BERT layers to copy into). Its attention maps are always available."""
    from distill.npu_student import NpuStudent, NpuStudentConfig

    tcfg = teacher.hf.config
    student = NpuStudent(NpuStudentConfig(
        vocab_size=tcfg.vocab_size, num_labels=len(labels), hidden_size=s.hidden, num_hidden_layers=s.layers,
        num_attention_heads=s.heads, intermediate_size=s.ffn, max_position_embeddings=student_positions(s),
        pad_token_id=tcfg.pad_token_id or 0))
    if s.init == "teacher-pca":
        with torch.no_grad():
            student.word_embeddings.weight.copy_(pca_rows(teacher.hf.get_input_embeddings().weight, s.hidden))
    return student


def build_llama(s: StudentSection, teacher, vmap, max_positions: int):
    """The generation student: a LlamaForCausalLM (tied embeddings) with the [student] sizes over vmap's
    restricted vocabulary (distill/vocab.py); teacher is the causal teacher."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tc = teacher.config
    check_causal_init(s, tc)
    cfg = LlamaConfig(vocab_size=vmap.size, hidden_size=s.hidden, intermediate_size=s.ffn, num_hidden_layers=s.layers,
                      num_attention_heads=s.heads, num_key_value_heads=s.heads, max_position_embeddings=max_positions,
                      rope_theta=getattr(tc, "rope_theta", 10000.0), rms_norm_eps=1e-5, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, initializer_range=0.02)
    student = LlamaForCausalLM(cfg)
    if s.init == "random":
        return student.eval()
    emb = vmap.rows_of(teacher.get_input_embeddings().weight.detach().float())  # (V_s, D_t)
    with torch.no_grad():
        if s.init == "teacher-pca":
            student.model.embed_tokens.weight.copy_(pca_rows(emb, s.hidden))
        elif s.init == "teacher-layers":
            _copy_llama_layers(student, teacher, emb)
    student.tie_weights()
    return student.eval()


def llama_layers_problem(s: StudentSection, tcfg) -> str | None:
    """Why the teacher's layers cannot be copied into this Llama student (None: they can): copying needs a Llama
    teacher of the student's width and head layout."""
    fix = "or use student.init = 'teacher-pca' or 'random'"
    if tcfg.model_type != "llama":  # GPT-2, OPT, ... name their sizes otherwise: no shapes to compare
        return f"student.init = 'teacher-layers' copies Llama layers, and this teacher is '{tcfg.model_type}'; {fix}"
    theirs = (tcfg.hidden_size, tcfg.intermediate_size, tcfg.num_attention_heads)
    if theirs != (s.hidden, s.ffn, s.heads):
        return (f"student.init = 'teacher-layers' needs a Llama teacher of the student's width (this one has hidden "
                f"{theirs[0]}, ffn {theirs[1]}, heads {theirs[2]}; the student has {s.hidden}, {s.ffn}, {s.heads}): "
                f"set student.hidden, student.ffn and student.heads to the teacher's, {fix}")
    return None


def check_causal_init(s: StudentSection, tcfg) -> None:
    """Fail before any training when student.init cannot work with this causal teacher (tcfg: its HF config)."""
    check_pca(s, tcfg)
    if s.init == "teacher-layers" and (problem := llama_layers_problem(s, tcfg)):
        raise PipelineError(problem)


def _copy_llama_layers(student, teacher, emb: torch.Tensor) -> None:
    """Embeddings of the kept tokens and every k-th teacher layer (check_causal_init has checked the shapes)."""
    from transformers import LlamaForCausalLM

    tc, sc = teacher.config, student.config
    student.config.num_key_value_heads = tc.num_key_value_heads
    fresh = LlamaForCausalLM(student.config)
    student.model = fresh.model
    student.lm_head = fresh.lm_head
    n_t, n_s = tc.num_hidden_layers, sc.num_hidden_layers
    picks = [round(i * (n_t - 1) / max(1, n_s - 1)) for i in range(n_s)]  # first and last always kept
    for i, t in enumerate(picks):
        student.model.layers[i].load_state_dict(teacher.model.layers[t].state_dict())
    student.model.norm.load_state_dict(teacher.model.norm.state_dict())
    student.model.embed_tokens.weight.copy_(emb)


@dataclass(frozen=True)
class StudentArch:
    """build(s, teacher, *task_args): classification (labels, layer_map, attn_eager) -> a module mapping
    (input_ids, attention_mask) to logits; generation (vmap, max_positions) -> a causal LM."""
    build: Callable[..., torch.nn.Module]
    tasks: tuple[str, ...]


STUDENTS: dict[str, StudentArch] = {
    "bert": StudentArch(build_bert, ("classification",)),
    "npu": StudentArch(build_npu, ("classification",)),
    "llama": StudentArch(build_llama, ("generation",)),
}


class ArchNames:
    """The student.arch names one task takes, read when iterated, so an arch registered later counts
    (pipeline/tasks/classification/checks.py checks student.arch against CLASSIFICATION_STUDENTS)."""

    def __init__(self, task: str):
        self.task = task

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, arch in STUDENTS.items() if self.task in arch.tasks])


CLASSIFICATION_STUDENTS = ArchNames("classification")


def build_student(s: StudentSection, teacher, *task_args, task: str = "classification", **kwargs) -> torch.nn.Module:
    """Build student.arch for the task (see StudentArch for task_args), or one error listing what this task takes."""
    if task not in STUDENTS.get(s.arch, StudentArch(None, ())).tasks:
        what = f"does not serve run.task = '{task}'" if s.arch in STUDENTS else "is unknown"
        raise PipelineError(f"student.arch = '{s.arch}' {what}. Known for {task}: {', '.join(ArchNames(task))}")
    return STUDENTS[s.arch].build(s, teacher, *task_args, **kwargs)
