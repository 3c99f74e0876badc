"""Student architectures (a registry keyed by student.arch) and their initialisation from the teacher."""
from __future__ import annotations

from typing import Callable

import torch

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


def _pca_projection(weight: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k principal directions of the rows of weight: (mean (D,), components (D, k))."""
    mean = weight.mean(0)
    _, _, v = torch.pca_lowrank(weight - mean, q=k, center=False, niter=4)
    return mean, v[:, :k]


def build_bert(s: StudentSection, teacher: HFLogits, labels: list[str], layer_map: list[int],
               attn_eager: bool) -> HFLogits:
    from transformers import BertConfig, BertForSequenceClassification

    tcfg = teacher.hf.config
    check_init(s, tcfg)
    cfg = BertConfig(
        vocab_size=tcfg.vocab_size, hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
        intermediate_size=s.ffn, max_position_embeddings=student_positions(s),
        type_vocab_size=getattr(tcfg, "type_vocab_size", 2) or 1, pad_token_id=tcfg.pad_token_id or 0,
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
        se = student.bert.embeddings
        if s.init == "teacher-pca":
            se.word_embeddings.weight.copy_(_pca_embeddings(s, teacher))
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


def check_init(s: StudentSection, tcfg) -> None:
    """Fail before any training when student.init cannot work with this teacher (tcfg: its HF config)."""
    if s.init == "teacher-pca" and s.hidden > tcfg.hidden_size:
        raise PipelineError(f"student.init = 'teacher-pca' projects the teacher's {tcfg.hidden_size}-wide embeddings "
                            f"and needs student.hidden <= {tcfg.hidden_size} (it is {s.hidden}); use 'random'")
    if s.init == "teacher-layers":
        problem = teacher_layers_problem(s, tcfg)
        if problem:
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


def build_npu(s: StudentSection, teacher: HFLogits, labels: list[str], layer_map: list[int], attn_eager: bool):
    """The NPU-friendly student (distill/npu_student.py), initialised like the BERT student: word embeddings
    from the teacher's by PCA ('teacher-pca') or random. Its attention maps are always available."""
    from distill.npu_student import NpuStudent, NpuStudentConfig

    if s.init == "teacher-layers":
        raise PipelineError("student.init = 'teacher-layers' copies BERT layers, which the 'npu' student does not "
                            "have (its layer norms are decomposed); use 'teacher-pca' or 'random'")
    tcfg = teacher.hf.config
    student = NpuStudent(NpuStudentConfig(
        vocab_size=tcfg.vocab_size, num_labels=len(labels), hidden_size=s.hidden, num_hidden_layers=s.layers,
        num_attention_heads=s.heads, intermediate_size=s.ffn, max_position_embeddings=max(s.max_length, 64),
        pad_token_id=tcfg.pad_token_id or 0))
    if s.init == "teacher-pca":
        with torch.no_grad():
            student.word_embeddings.weight.copy_(_pca_embeddings(s, teacher))
    return student


def _pca_embeddings(s: StudentSection, teacher: HFLogits) -> torch.Tensor:
    """The teacher's word embeddings projected on their top student.hidden principal directions, rescaled to
    BERT's init std (0.02): (V, student.hidden)."""
    t_emb = teacher.hf.get_input_embeddings().weight.detach()  # (V, D_t)
    if s.hidden > t_emb.shape[1]:
        raise PipelineError(f"student.init = 'teacher-pca' needs student.hidden <= teacher hidden "
                            f"({t_emb.shape[1]}); use 'random'")
    mean, comp = _pca_projection(t_emb.float(), s.hidden)
    proj = (t_emb - mean) @ comp  # (V, H)
    return proj * (0.02 / proj.std())


# arch -> builder; every student maps (input_ids, attention_mask) to logits
STUDENTS: dict[str, Callable[..., torch.nn.Module]] = {"bert": build_bert, "npu": build_npu}


def build_student(s: StudentSection, teacher: HFLogits, labels: list[str], layer_map: list[int],
                  attn_eager: bool = False) -> torch.nn.Module:
    if s.arch not in STUDENTS:
        raise PipelineError(f"unknown student.arch '{s.arch}'. Known: {', '.join(STUDENTS)}")
    return STUDENTS[s.arch](s, teacher, labels, layer_map, attn_eager)
