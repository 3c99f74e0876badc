"""Student search spaces (a registry keyed by name): which classification student shapes the search
(pipeline/search.py) may sample, and how one Optuna trial turns into a [student] section, or a [baseline]
section for a recurrent candidate (arch lstm / gru: the baseline stage's distilled RNN).

Every parameter has the same choices in every trial of a study (Optuna's TPE needs a fixed distribution per
name), so widths that must agree are sampled as ratios: heads always divide hidden (every hidden below is a
multiple of every head count), ffn = hidden * ffn_ratio, embedding_dim = hidden * embedding_ratio (0 = off).
vocab_size_max is sampled only when vocab = "training" (a conditional parameter, which TPE handles); the
rnn_* parameters only for an RNN arch, the transformer ones only for a transformer arch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeline.config import BaselineSection, StudentSection
from pipeline.errors import PipelineError, lookup


@dataclass(frozen=True)
class SearchSpace:
    layers: tuple[int, ...]
    hidden: tuple[int, ...]
    heads: tuple[int, ...]
    ffn_ratio: tuple[int, ...]
    embedding_ratio: tuple[float, ...]  # 0.0 = no factorized embedding
    vocab: tuple[str, ...]  # "teacher" | "training"
    vocab_size_max: tuple[int, ...]  # the cap when vocab = "training"
    arch: tuple[str, ...]  # distill.student.STUDENTS keys serving classification, or RNN_CELLS
    description: str = ""
    # recurrent candidates (arch lstm / gru): [baseline] embed_dim, hidden, layers, bidirectional
    rnn_layers: tuple[int, ...] = ()
    rnn_hidden: tuple[int, ...] = ()
    rnn_embed: tuple[int, ...] = ()
    rnn_bidirectional: tuple[bool, ...] = (True, False)


RNN_CELLS = ("lstm", "gru")  # baseline.cell values: a candidate with one of these arches is a distilled RNN


SPACES: dict[str, SearchSpace] = {
    "default": SearchSpace(layers=(1, 2, 3, 4, 6), hidden=(64, 128, 192, 256, 384), heads=(2, 4, 8),
                           ffn_ratio=(2, 4), embedding_ratio=(0.0, 0.5, 0.25), vocab=("teacher", "training"),
                           vocab_size_max=(4096, 8192, 16384), arch=("bert", "npu", "lstm", "gru"),
                           rnn_layers=(1, 2), rnn_hidden=(64, 128, 256), rnn_embed=(64, 128),
                           description="phone-sized encoders (1-6 layers, 64-384 wide) and distilled LSTM / GRU"),
    # seconds per trial on a laptop core: for tests and a first look at a new dataset
    "tiny": SearchSpace(layers=(1, 2), hidden=(16, 32), heads=(2, 4), ffn_ratio=(2, 4), embedding_ratio=(0.0, 0.5),
                        vocab=("teacher", "training"), vocab_size_max=(16, 32), arch=("bert", "npu"),
                        description="1-2 layers, 16-32 wide (tests, quick looks)"),
    "tiny-rnn": SearchSpace(layers=(1,), hidden=(16,), heads=(2,), ffn_ratio=(2,), embedding_ratio=(0.0,),
                            vocab=("teacher", "training"), vocab_size_max=(16, 32), arch=("lstm", "gru"),
                            rnn_layers=(1, 2), rnn_hidden=(8, 16), rnn_embed=(8, 16),
                            description="distilled LSTM / GRU only, 8-16 wide (tests, quick looks)"),
}


# The generation task's spaces (run.task = "generation"): decoder shapes of the generation student registry
# (arch "llama"); the vocabulary is the logits stage's restricted one (lm.restrict_vocab), so vocab,
# vocab_size_max and embedding_ratio are not sampled. Same names as the classification spaces they mirror.
LM_SPACES: dict[str, SearchSpace] = {
    "default": SearchSpace(layers=(1, 2, 3, 4, 6), hidden=(64, 128, 192, 256, 384), heads=(2, 4, 8),
                           ffn_ratio=(2, 3, 4), embedding_ratio=(), vocab=(), vocab_size_max=(), arch=("llama",),
                           description="phone-sized decoders (1-6 layers, 64-384 wide, 2-8 heads)"),
    "tiny": SearchSpace(layers=(1, 2), hidden=(16, 32), heads=(2, 4), ffn_ratio=(2, 4), embedding_ratio=(),
                        vocab=(), vocab_size_max=(), arch=("llama",),
                        description="decoders of 1-2 layers, 16-32 wide (tests, quick looks)"),
}
TASK_SPACES = {"classification": SPACES, "generation": LM_SPACES}


def get_space(name: str, task: str = "classification") -> SearchSpace:
    space = lookup(TASK_SPACES[task], name, f"search space '{name}' (--space) for run.task = '{task}'")
    bad = [h for h in space.hidden for n in space.heads if h % n]
    if bad:  # a registry entry written wrong, caught before any trial
        raise PipelineError(f"search space '{name}': hidden sizes {sorted(set(bad))} are not divisible by every "
                            f"head count {space.heads}")
    if any(a in RNN_CELLS for a in space.arch) and not (space.rnn_layers and space.rnn_hidden and space.rnn_embed):
        raise PipelineError(f"search space '{name}': RNN arches need rnn_layers, rnn_hidden and rnn_embed")
    return space


def sample_decoder(trial, space: SearchSpace, base: StudentSection) -> StudentSection:
    """A generation [student] section (a decoder: arch, layers, hidden, heads, ffn) from the trial's choices."""
    return _sampled(trial, space, base, trial.suggest_categorical("hidden", list(space.hidden)))


def _sampled(trial, space: SearchSpace, base: StudentSection, hidden: int, **keys) -> StudentSection:
    """base with arch, layers, heads and ffn from the trial's choices, hidden and keys; init stays as in the
    user's config, but "teacher-layers" becomes "teacher-pca" (copying teacher layers needs the teacher's own
    width: not searchable)."""
    s = dataclasses.replace(
        base, arch=trial.suggest_categorical("arch", list(space.arch)),
        layers=trial.suggest_categorical("layers", list(space.layers)), hidden=hidden,
        heads=trial.suggest_categorical("heads", list(space.heads)),
        ffn=hidden * trial.suggest_categorical("ffn_ratio", list(space.ffn_ratio)), **keys)
    return dataclasses.replace(s, init="teacher-pca") if s.init == "teacher-layers" else s


def _vocab(trial, space: SearchSpace, cap: int) -> dict:
    """vocab from the trial's choices, and vocab_size_max: sampled for a "training" vocabulary, else cap."""
    vocab = trial.suggest_categorical("vocab", list(space.vocab))
    if vocab == "training":
        cap = trial.suggest_categorical("vocab_size_max", list(space.vocab_size_max))
    return {"vocab": vocab, "vocab_size_max": cap}


DECODER_SHAPE_KEYS = ("arch", "layers", "hidden", "heads", "ffn", "init")  # what build_llama reads of [student]


def sample_candidate(trial, space: SearchSpace, base: StudentSection, base_rnn: BaselineSection):
    """A [student] section (transformer arch) or a [baseline] section (lstm / gru) from the trial's choices.
    A space without RNN arches samples exactly as before they existed (same order, same numbers)."""
    if not any(a in RNN_CELLS for a in space.arch) \
            or (arch := trial.suggest_categorical("arch", list(space.arch))) not in RNN_CELLS:
        return sample_student(trial, space, base)
    vocab = _vocab(trial, space, base_rnn.vocab_size_max)
    return dataclasses.replace(
        base_rnn, cell=arch, layers=trial.suggest_categorical("rnn_layers", list(space.rnn_layers)),
        hidden=trial.suggest_categorical("rnn_hidden", list(space.rnn_hidden)),
        embed_dim=trial.suggest_categorical("rnn_embed", list(space.rnn_embed)),
        bidirectional=trial.suggest_categorical("rnn_bidirectional", list(space.rnn_bidirectional)), **vocab)


def sample_student(trial, space: SearchSpace, base: StudentSection) -> StudentSection:
    """One [student] section from the trial's choices; what the space does not sample (init, max_length,
    max_positions) stays as in the user's config."""
    hidden = trial.suggest_categorical("hidden", list(space.hidden))
    vocab = _vocab(trial, space, base.vocab_size_max)
    emb = int(hidden * trial.suggest_categorical("embedding_ratio", list(space.embedding_ratio)))
    return _sampled(trial, space, base, hidden, embedding_dim=emb, **vocab)


RNN_SHAPE_KEYS = ("embed_dim", "hidden", "layers", "bidirectional", "vocab", "vocab_size_max", "max_length")
SHAPE_KEYS = ("arch", "layers", "hidden", "heads", "ffn", "embedding_dim", "vocab", "vocab_size_max", "init",
              "max_length", "max_positions")


def shape_of(s: StudentSection | BaselineSection) -> dict:
    """The settings that decide a candidate's graph (its latency and file size): [student] keys, or for an RNN
    "arch" (= baseline.cell) and [baseline] keys."""
    if isinstance(s, BaselineSection):
        return {"arch": s.cell, **{k: getattr(s, k) for k in RNN_SHAPE_KEYS}}
    return {k: getattr(s, k) for k in SHAPE_KEYS}


def config_keys(shape: dict) -> dict:
    """A candidate's shape as the keys of its config section ([student], or [baseline] for an RNN: arch is
    baseline.cell there)."""
    if shape["arch"] in RNN_CELLS:
        return {"cell" if k == "arch" else k: v for k, v in shape.items() if k != "max_length"}
    return dict(shape)
