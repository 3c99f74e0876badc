"""`python -m tools.teacher_families OUT_DIR [--task classification|generation|both] [--families a b ...] [--keep]`:
does a teacher of every model family the project claims to support get through the whole pipeline to a bundle
that `verify-bundle` accepts?

distill/teacher_checks.py names the supported types (ENCODER_TYPES for classification, DECODER_TYPES for
generation) but the tests only ever use a tiny BERT and a tiny Llama. For each family this writes a tiny teacher
folder with that family's own config class and a tokenizer with the family's special-token quirks (RoBERTa's
pad id 1 and position offset, ALBERT's narrow embeddings, DeBERTa's relative positions, MobileBERT's bottlenecks,
sentencepiece (Unigram) tokenizers for XLM-R / CamemBERT / ALBERT / DeBERTa-v2; GPT-2's missing pad and eos-as-bos,
OPT's </s> as bos, Gemma's added bos, padded vocabularies, partial rotary, local / sliding-window attention),
then runs `python -m pipeline bundle` and `python -m pipeline verify-bundle` on it, one family at a time, each
as a subprocess of its own (a crash or a leaked global in one family cannot touch the next).

OUT_DIR gets, per task (classification/, generation/):
    reviews.csv or plays/      the data, generated here (labelled reviews / a small corpus of "plays")
    config.toml                a tiny run: threads 1, short epochs; runs_dir and bundle.dist_dir inside OUT_DIR
    teachers/<family>/         the teacher folder (random weights for encoders, which the pipeline fine-tunes;
                               decoders are trained for a few steps, as teacher.fine_tune = false uses them as is)
    logs/<family>.log          everything the two commands printed
    runs/<family>/, dist/      the run folder and published bundle: removed once a family passed, unless --keep
and OUT_DIR/families.json plus OUT_DIR/families.md: per family passed, or the stage it failed at with the
error's last line; the teacher's (and student's) test accuracy or perplexity; whether the classification bundle
has a string-in (`-text.onnx`) model, or why not; seconds taken. Both are rewritten after every family, so an
interrupted sweep keeps what finished. Each family's run folder is removed before it runs: the seconds are a
whole run's, not an up-to-date skip's. Exit status 1 if any family failed.

Takes ~10-20 minutes for both tasks on one core (`nice -n 10` on a shared machine). The family tables below
are the ones the audits that found the non-BERT / non-Llama bugs used (hidden 32, 2 layers).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from tools.cli import ToolParser

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------------------
# Data: written here rather than imported from tests/ (the tool must run from a checkout without the tests
# on the path, and the data must not change under it when a test fixture does).

# Reviews whose label is decided by which word list dominates: learnable by every tiny encoder (tests/conftest.py
# uses the same recipe). The WordPiece families' vocabulary is exactly these words.
POS = ["good", "great", "love", "happy", "excellent", "nice", "wonderful", "fun"]
NEG = ["bad", "awful", "hate", "sad", "terrible", "poor", "boring", "ugly"]
NEU = ["table", "car", "road", "window", "paper", "city", "train", "phone"]
FILLER = ["the", "a", "this", "is", "was", "my", "day", "movie", "food", "really", "very", "so"]
WORDS = POS + NEG + NEU + FILLER
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LABEL_WORDS = {"positive": POS, "negative": NEG, "neutral": NEU}


def write_reviews(path: Path, n: int = 600, seed: int = 0) -> Path:
    rng = random.Random(seed)
    labels = sorted(LABEL_WORDS)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "sentiment"])
        for i in range(n):
            label = labels[i % 3]
            words = rng.choices(FILLER, k=rng.randint(2, 8)) + rng.choices(LABEL_WORDS[label], k=rng.randint(1, 3))
            rng.shuffle(words)
            w.writerow([" ".join(words), label])
    return path


# "Plays" in markdown (bold speaker, lines "w w w , w w w ."), each word mostly followed by a fixed successor: a
# bigram structure a tiny decoder learns in seconds, so perplexities mean something. RARE appears only in the
# last two plays: it exercises the restricted vocabulary's "other" id.
NAMES = ["ROMEO", "JULIET", "KING", "QUEEN"]
PLAY_WORDS = ["love", "night", "sweet", "death", "crown", "lord", "my", "thy", "the", "is", "of", "and", "to", "a",
              "in", "fair", "sword", "blood", "heart", "speak", "come", "go", "hence", "now"]
RARE = "zounds"
TRAIN_PLAYS = "play0[0-7].md"  # what the teacher is pre-trained on


def _line(rng: random.Random) -> list[str]:
    w = [rng.choice(PLAY_WORDS)]
    while len(w) < 6:
        nxt = PLAY_WORDS[(PLAY_WORDS.index(w[-1]) * 7 + 3) % len(PLAY_WORDS)]
        w.append(nxt if rng.random() < 0.8 else rng.choice(PLAY_WORDS))
    return w


def _play(rng: random.Random, speeches: int, rare: bool) -> str:
    lines = []
    for _ in range(speeches):
        lines.append(f"**{rng.choice(NAMES)}**  ")
        for _ in range(rng.randint(1, 2)):
            w = _line(rng)
            if rare and rng.random() < 0.3:
                w[2] = RARE
            lines.append(f"{w[0]} {w[1]} {w[2]} , {w[3]} {w[4]} {w[5]} .  ")
        lines.append("")
    return "# A Play\n\n## ACT I\n\n_Enter all_\n\n" + "\n".join(lines)


def write_plays(folder: Path, n: int = 10, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for i in range(n):
        (folder / f"play{i:02d}.md").write_text(_play(rng, 40, rare=i >= 8))
    return folder


def play_texts(folder: Path) -> list[str]:
    """The training plays as the pipeline reads them (markup stripped): the teachers' tokenizer and LM data."""
    from pipeline.tasks.generation.data import strip_markdown

    return [strip_markdown(p.read_text()) for p in sorted(folder.glob(TRAIN_PLAYS))]


# ---------------------------------------------------------------------------------------------------------
# Run configs: the test suite's tiny runs (tests/conftest.py tiny_run_config, tests/test_gpt_pipeline.py gen_cfg)

def classification_config(root: Path) -> dict:
    return {
        "run": {"name": "tiny", "seed": 3, "runs_dir": str(root / "runs"), "threads": 1},
        "data": {"source": "csv", "train_path": str(root / "reviews.csv"), "text_column": "review",
                 "label_column": "sentiment", "validation_fraction": 0.1, "test_fraction": 0.2},
        "teacher": {"model": str(root / "teachers" / "bert"), "max_length": 32, "epochs": 6.0, "batch_size": 16,
                    "lr": 2e-3, "eval_batch_size": 32},
        "augment": {"copies": 1},
        "student": {"layers": 2, "hidden": 16, "heads": 2, "ffn": 32, "max_length": 32},
        "distill": {"epochs": 3.0, "batch_size": 16, "lr": 3e-3},
        "baseline": {"embed_dim": 16, "hidden": 16, "epochs": 3.0, "batch_size": 16, "lr": 5e-3},
        # the tiny models' weights are all below coremltools' 2048 elements: int8 Core ML would compress nothing
        "export": {"coreml_min_weight_elements": 64},
        "bundle": {"dist_dir": str(root / "dist")},
    }


def generation_config(root: Path) -> dict:
    return {
        "run": {"name": "tinygen", "task": "generation", "seed": 5, "runs_dir": str(root / "runs"), "threads": 1},
        "data": {"source": "text", "train_path": str(root / "plays"), "validation_fraction": 0.1,
                 "test_fraction": 0.2},
        "teacher": {"model": str(root / "teachers" / "llama"), "fine_tune": False},
        "lm": {"context_length": 16, "teacher_windows": 48, "extra_windows": 32, "top_k": 8, "eval_windows": 12,
               "eval_batch_size": 8, "prompts": ["ROMEO : my love", "KING : the crown"], "sample_tokens": 6,
               "max_cache": 64, "check_tokens": 10, "bench_prompt_tokens": 16, "bench_decode_tokens": 4,
               "bench_iterations": 1},
        "student": {"arch": "llama", "layers": 2, "hidden": 16, "heads": 2, "ffn": 32, "init": "teacher-pca"},
        "distill": {"epochs": 6.0, "batch_size": 16, "lr": 1e-2, "temperature": 1.0, "alpha": 0.5},
        "baseline": {"cell": "lstm", "embed_dim": 16, "hidden": 32, "epochs": 6.0, "batch_size": 16, "lr": 1e-2},
        "train": {"checkpoint_every": 0},
        "quantize": {"models": ["teacher", "student", "lstm"], "variants": ["fp32", "int8-dynamic"]},
        "export": {"coreml_models": ["student", "lstm"], "coreml_variants": ["fp16"], "coreml_target": "iOS18",
                   "ort_variants": ["fp32", "int8-dynamic"], "coreml_min_weight_elements": 64},
        "bench": {"targets": ["host-cpu", "mobile-cpu", "edge-npu"]},
        "bundle": {"dist_dir": str(root / "dist")},
    }


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def write_toml(path: Path, cfg: dict) -> Path:
    import tomllib

    lines = []
    for section, values in cfg.items():
        lines += [f"[{section}]", *(f"{k} = {_toml_value(v)}" for k, v in values.items()), ""]
    text = "\n".join(lines)
    if tomllib.loads(text) != cfg:  # the writer is minimal: never hand the pipeline a config it did not mean
        raise AssertionError(f"{path}: TOML round trip changed the config")
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------------------
# Encoder families (classification). Random weights (AutoModel, no head): the teacher stage fine-tunes them, as
# it does a downloaded checkpoint. Each builder gets (scratch folder for tokenizer files, training texts) and
# returns (config, tokenizer).

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _wp_vocab(d: Path, specials: list[str]) -> str:
    """A WordPiece vocab.txt of the review words: what BERT-style families tokenize with."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "vocab.txt").write_text("\n".join(specials + WORDS) + "\n")
    return str(d / "vocab.txt")


def _bpe(d: Path, texts: list[str], specials: list[str]) -> tuple[str, str]:
    """A byte-level BPE (vocab.json + merges.txt), as RoBERTa and DeBERTa (v1) ship."""
    from tokenizers import ByteLevelBPETokenizer

    d.mkdir(parents=True, exist_ok=True)
    b = ByteLevelBPETokenizer()
    b.train_from_iterator(texts, vocab_size=300, min_frequency=1, special_tokens=specials, show_progress=False)
    b.save_model(str(d))
    return str(d / "vocab.json"), str(d / "merges.txt")


def _unigram(texts: list[str], specials: list[str], unk: str, template: tuple[str, str]):
    """A sentencepiece-style Unigram tokenizer with the family's [CLS]/<s> ... [SEP]/</s> template (RoBERTa-style
    families put two separators between a pair)."""
    from tokenizers import SentencePieceUnigramTokenizer, processors

    u = SentencePieceUnigramTokenizer()
    u.train_from_iterator(texts, vocab_size=200, special_tokens=specials, unk_token=unk, show_progress=False)
    t = u._tokenizer
    cls, sep = template
    t.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {sep} $B {sep}" if cls == "<s>" else f"{cls} $A {sep} $B {sep}",
        special_tokens=[(cls, t.token_to_id(cls)), (sep, t.token_to_id(sep))])
    return t


def _bert(d, texts):
    import transformers as T

    tok = T.BertTokenizerFast(vocab_file=_wp_vocab(d, SPECIAL), do_lower_case=True)
    return T.BertConfig(vocab_size=len(tok), max_position_embeddings=128, pad_token_id=0, **SMALL), tok


def _distilbert(d, texts):  # no token_type_ids
    import transformers as T

    tok = T.DistilBertTokenizerFast(vocab_file=_wp_vocab(d, SPECIAL), do_lower_case=True)
    return T.DistilBertConfig(vocab_size=len(tok), dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                              max_position_embeddings=128, pad_token_id=0), tok


def _electra(d, texts):  # embeddings narrower than the encoder (a projection between)
    import transformers as T

    tok = T.ElectraTokenizerFast(vocab_file=_wp_vocab(d, SPECIAL), do_lower_case=True)
    return T.ElectraConfig(vocab_size=len(tok), embedding_size=16, max_position_embeddings=128, **SMALL), tok


def _mobilebert(d, texts):  # bottleneck layers, stacked feed-forwards, narrow embeddings
    import transformers as T

    tok = T.MobileBertTokenizerFast(vocab_file=_wp_vocab(d, SPECIAL), do_lower_case=True)
    return T.MobileBertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, embedding_size=16, true_hidden_size=16, intra_bottleneck_size=16,
                              num_feedforward_networks=2, max_position_embeddings=128), tok


def _mpnet(d, texts):  # WordPiece with RoBERTa's <s>/<pad>/</s> specials: pad id 1, positions offset by it
    import transformers as T

    v = _wp_vocab(d, ["<s>", "<pad>", "</s>", "<unk>"] + SPECIAL[1:4])
    with open(v, "a") as f:
        f.write("<mask>\n")
    tok = T.MPNetTokenizerFast(vocab_file=v, do_lower_case=True)
    return T.MPNetConfig(vocab_size=len(tok), max_position_embeddings=130, pad_token_id=1, **SMALL), tok


def _roberta(d, texts):  # byte-level BPE, pad id 1, positions start at pad + 1, one token type
    import transformers as T

    vj, mg = _bpe(d, texts, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok = T.RobertaTokenizerFast(vocab_file=vj, merges_file=mg)
    return T.RobertaConfig(vocab_size=len(tok), max_position_embeddings=130, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2, type_vocab_size=1, **SMALL), tok


def _deberta(d, texts):  # byte-level BPE with [CLS]/[SEP]; relative positions only, no token types
    import transformers as T

    vj, mg = _bpe(d, texts, ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"])
    tok = T.DebertaTokenizerFast(vocab_file=vj, merges_file=mg)
    return T.DebertaConfig(vocab_size=len(tok), max_position_embeddings=128, relative_attention=True,
                           max_relative_positions=-1, position_biased_input=False, pos_att_type=["c2p", "p2c"],
                           type_vocab_size=0, pad_token_id=0, **SMALL), tok


def _xlm_roberta(d, texts):  # sentencepiece, RoBERTa's ids
    import transformers as T

    t = _unigram(texts, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<unk>", ("<s>", "</s>"))
    tok = T.XLMRobertaTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                    cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    return T.XLMRobertaConfig(vocab_size=len(tok), max_position_embeddings=130, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2, type_vocab_size=1, **SMALL), tok


def _camembert(d, texts):  # sentencepiece with camembert-base's unused <s>NOTUSED / </s>NOTUSED first ids
    import transformers as T

    t = _unigram(texts, ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<s>", "</s>", "<mask>"], "<unk>",
                 ("<s>", "</s>"))
    tok = T.CamembertTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    return T.CamembertConfig(vocab_size=len(tok), max_position_embeddings=130, pad_token_id=1, bos_token_id=5,
                             eos_token_id=6, type_vocab_size=1, **SMALL), tok


def _albert(d, texts):  # sentencepiece, lower-cased, <pad> id 0; embedding_size < hidden_size, shared layers
    import transformers as T
    from tokenizers import normalizers

    t = _unigram(texts, ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>", ("[CLS]", "[SEP]"))
    t.normalizer = normalizers.Sequence([normalizers.Lowercase(), t.normalizer]) if t.normalizer \
        else normalizers.Lowercase()
    tok = T.AlbertTokenizerFast(tokenizer_object=t, do_lower_case=True, bos_token="[CLS]", eos_token="[SEP]",
                                unk_token="<unk>", sep_token="[SEP]", pad_token="<pad>", cls_token="[CLS]",
                                mask_token="[MASK]")
    return T.AlbertConfig(vocab_size=len(tok), embedding_size=16, max_position_embeddings=128, pad_token_id=0,
                          num_hidden_groups=1, inner_group_num=1, **SMALL), tok


def _deberta_v2(d, texts):  # DeBERTa-v3 style: sentencepiece, position buckets, config vocab > tokenizer's
    import transformers as T

    t = _unigram(texts, ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[UNK]", ("[CLS]", "[SEP]"))
    tok = T.DebertaV2TokenizerFast(tokenizer_object=t, bos_token="[CLS]", eos_token="[SEP]", unk_token="[UNK]",
                                   sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    # microsoft/deberta-v3-base: 128100 embedding rows for 128001 tokens
    return T.DebertaV2Config(vocab_size=len(tok) + 20, max_position_embeddings=128, relative_attention=True,
                             position_buckets=16, norm_rel_ebd="layer_norm", share_att_key=True,
                             pos_att_type=["p2c", "c2p"], position_biased_input=False, max_relative_positions=-1,
                             type_vocab_size=0, pad_token_id=0, **SMALL), tok


ENCODERS = {"bert": _bert, "distilbert": _distilbert, "roberta": _roberta, "xlm-roberta": _xlm_roberta,
            "camembert": _camembert, "electra": _electra, "albert": _albert, "mpnet": _mpnet, "deberta": _deberta,
            "deberta-v2": _deberta_v2, "mobilebert": _mobilebert}


def build_encoder(family: str, folder: Path, texts: list[str]) -> str:
    """Write the family's random-weight encoder and its tokenizer to folder; returns its model_type."""
    import torch
    from transformers import AutoModel

    cfg, tok = ENCODERS[family](folder.parent / "_tok" / family, texts)
    torch.manual_seed(0)
    AutoModel.from_config(cfg).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return cfg.model_type


# ---------------------------------------------------------------------------------------------------------
# Decoder families (generation). Every family gets a byte-level BPE trained on the plays, with the special
# tokens and bos handling of the family it mimics.

# tokenizer family -> (special tokens in id order, bos, eos, pad, unk, template adds bos)
SPECIALS = {
    "gpt2": (["<|endoftext|>"], "<|endoftext|>", "<|endoftext|>", None, "<|endoftext|>", False),  # no pad; eos = bos
    "opt": (["<s>", "<pad>", "</s>", "<unk>"], "</s>", "</s>", "<pad>", "<unk>", True),  # prepends </s>
    "gemma": (["<pad>", "<eos>", "<bos>", "<unk>"], "<bos>", "<eos>", "<pad>", "<unk>", True),
    "llama": (["<unk>", "<s>", "</s>"], "<s>", "</s>", None, "<unk>", True),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|endoftext|>", "<|endoftext|>", None, False),
}
FAMILY = {"llama": "llama", "gpt2": "gpt2", "gpt_neo": "gpt2", "gptj": "gpt2", "mistral": "llama", "qwen2": "qwen2",
          "phi": "gpt2", "opt": "opt", "opt350": "opt", "gemma": "gemma", "gemma2": "gemma", "bloom": "gpt2",
          "gpt_bigcode": "gpt2"}
PAD_VOCAB = {"gptj": 8, "phi": 8, "qwen2": 8, "opt": 8}  # real checkpoints: config vocab > len(tokenizer)

# family -> config(transformers, vocab size, special ids); hidden 32, 2 layers, each with the family's quirk
DECODER_CONFIGS = {
    "llama": lambda T, V, ids: T.LlamaConfig(  # GQA (1 KV head), tied embeddings: the test suite's tiny Llama
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256, tie_word_embeddings=True, **ids),
    "gpt2": lambda T, V, ids: T.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=256, **ids),
    "gpt_neo": lambda T, V, ids: T.GPTNeoConfig(  # alternating global / local (windowed) attention
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, attention_types=[[["global", "local"], 1]],
        window_size=8, max_position_embeddings=256, intermediate_size=64, **ids),
    "gptj": lambda T, V, ids: T.GPTJConfig(  # partial rotary, untied head
        vocab_size=V, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_positions=256, tie_word_embeddings=False, **ids),
    "mistral": lambda T, V, ids: T.MistralConfig(  # sliding window shorter than the context
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, sliding_window=8, max_position_embeddings=256, tie_word_embeddings=False, **ids),
    "qwen2": lambda T, V, ids: T.Qwen2Config(  # attention biases, no bos
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256, tie_word_embeddings=True, **ids),
    "phi": lambda T, V, ids: T.PhiConfig(  # partial rotary, parallel attention / MLP
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        partial_rotary_factor=0.5, max_position_embeddings=256, **ids),
    "opt": lambda T, V, ids: T.OPTConfig(  # learned positions offset by 2
        vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=2, word_embed_proj_dim=32,
        max_position_embeddings=256, **ids),
    "opt350": lambda T, V, ids: T.OPTConfig(  # OPT-350m: embeddings narrower than the model (project_in/out), post-LN
        vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=2, word_embed_proj_dim=16,
        do_layer_norm_before=False, max_position_embeddings=256, **ids),
    "gemma": lambda T, V, ids: T.GemmaConfig(  # head_dim apart from hidden / heads, embeddings scaled by sqrt(hidden)
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=256, **ids),
    "gemma2": lambda T, V, ids: T.Gemma2Config(  # Gemma plus sliding-window layers and logit soft-capping
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=256, sliding_window=8, **ids),
    "bloom": lambda T, V, ids: T.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=2, **ids),  # ALiBi
    "gpt_bigcode": lambda T, V, ids: T.GPTBigCodeConfig(  # multi-query attention
        vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=256, multi_query=True, **ids),
}


def decoder_tokenizer(family: str, folder: Path, texts: list[str]):
    """A byte-level BPE with the special tokens, bos template and pad of the family's tokenizer, saved to folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials, bos, eos, pad, unk, add_bos = SPECIALS[FAMILY[family]]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    if add_bos:
        bid = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, bid)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    kw = {k: v for k, v in (("bos_token", bos), ("eos_token", eos), ("pad_token", pad), ("unk_token", unk)) if v}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **kw)
    fast.save_pretrained(folder)
    return fast


def training_windows(tok, texts: list[str], width: int = 33) -> list[list[int]]:
    """The texts as one eos-separated stream, cut into `width`-token windows that each start as the tokenizer
    starts a text (a <bos> for Llama, Mistral, OPT and Gemma), as real checkpoints were pretrained and as the
    pipeline scores them."""
    from pipeline.tasks.generation.data import start_ids

    ids = []
    for t in texts:
        ids += tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    head = start_ids(tok)
    n = width - len(head)
    return [head + ids[i: i + n] for i in range(0, len(ids) - n + 1, n)]


def build_decoder(family: str, folder: Path, texts: list[str], steps: int = 80) -> str:
    """Write the family's decoder, trained `steps` AdamW steps on 33-token windows of texts (so it is clearly
    better than uniform: the pipeline uses it as is), with its tokenizer, to folder; returns its model_type."""
    import torch
    import transformers as T

    folder.mkdir(parents=True, exist_ok=True)
    tok = decoder_tokenizer(family, folder, texts)
    torch.manual_seed(0)
    ids_cfg = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = DECODER_CONFIGS[family](T, len(tok) + PAD_VOCAB.get(family, 0), ids_cfg)
    model = T.AutoModelForCausalLM.from_config(cfg)
    x = torch.tensor(training_windows(tok, texts))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        b = x[torch.randint(0, len(x), (16,))]
        loss = model(input_ids=b, labels=b).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval().save_pretrained(folder, safe_serialization=True)
    return cfg.model_type


TASKS = {"classification": ENCODERS, "generation": DECODER_CONFIGS}


# ---------------------------------------------------------------------------------------------------------
# The sweep

def prepare(task: str, root: Path) -> tuple[Path, list[str]]:
    """The task's data and config under root; returns (config path, texts the teachers' tokenizers train on)."""
    root.mkdir(parents=True, exist_ok=True)
    if task == "classification":
        with open(write_reviews(root / "reviews.csv")) as f:
            texts = [r["review"] for r in csv.DictReader(f)]
        return write_toml(root / "config.toml", classification_config(root)), texts
    write_plays(root / "plays")
    return write_toml(root / "config.toml", generation_config(root)), play_texts(root / "plays")


def build_teacher(task: str, family: str, folder: Path, texts: list[str], steps: int = 80) -> str:
    if folder.exists():  # a folder left by an older sweep may hold files this family's build does not write
        shutil.rmtree(folder)
    if task == "classification":
        return build_encoder(family, folder, texts)
    return build_decoder(family, folder, texts, steps)


_RUNNING = re.compile(r"^\[([\w-]+)\] running")
_DONE = re.compile(r"^\[([\w-]+)\] done in")
# the pipeline's own error line, or a traceback's exception line: clean-up warnings may be printed after it
_ERROR = re.compile(r"^(error: |[\w.]*(Error|Exception|Interrupt)\b)")


def run_logged(cmd: list[str], log, label: str) -> tuple[int, str | None, str]:
    """Run cmd from the repository root (so `-m pipeline` is this checkout's), its output into log; echo the
    pipeline's stage-done lines as progress. Returns (exit status, last stage started, last error line, else the
    last non-empty line)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # teacher folders are local; never wait on the Hub
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    stage, last, error = None, "", ""
    with subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            log.write(line)
            text = line.rstrip()
            if m := _RUNNING.match(text):
                stage = m.group(1)
            elif _DONE.match(text):
                print(f"    {label} {text.split(' -> ')[0]}", flush=True)  # the folder is in the log
            if text.strip():
                last = text.strip()
            if _ERROR.match(text):
                error = text.strip()
    return proc.returncode, stage, error or last


def _rows(path: Path) -> dict:
    """eval's per-model rows (the pytorch fp32 ones), by model name; {} when eval did not finish."""
    if not path.is_file():
        return {}
    return {r["model"]: r for r in json.loads(path.read_text()) if r.get("variant") == "fp32"}


def measure(task: str, run_dir: Path) -> dict:
    """What the finished (or partial) run says: the teacher's and student's test quality, the string-in model."""
    out = {}
    if task == "classification":
        rows = _rows(run_dir / "eval" / "accuracy.json")
        out.update({f"{m}_accuracy": rows[m]["accuracy"] for m in ("teacher", "student") if m in rows})
        meta_path = run_dir / "bundle" / "metadata.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            out["string_in"] = "string_onnx" in meta.get("models", {})
            if not out["string_in"]:
                out["string_in_reason"] = (meta.get("string_model_check") or {}).get("reason")
    else:
        rows = _rows(run_dir / "eval" / "perplexity.json")
        out.update({f"{m}_perplexity": rows[m]["perplexity"] for m in ("teacher", "student") if m in rows})
    return out


def run_family(task: str, family: str, root: Path, config: Path, texts: list[str], keep: bool) -> dict:
    """Build the family's teacher, run bundle then verify-bundle; the family's row."""
    t0 = time.time()
    row = {"task": task, "family": family}
    folder, run_dir = root / "teachers" / family, root / "runs" / family
    outputs = (run_dir, root / "dist" / family, root / "dist" / f"{family}-web")
    for old in outputs:  # a whole run, not an up-to-date skip of an earlier sweep's stages
        shutil.rmtree(old, ignore_errors=True)
    (root / "logs").mkdir(exist_ok=True)
    with open(root / "logs" / f"{family}.log", "w") as log:
        try:
            row["model_type"] = build_teacher(task, family, folder, texts)
        except Exception as e:  # the sweep goes on: a family whose teacher cannot be built is a row, not a crash
            log.write(traceback.format_exc())
            return {**row, "passed": False, "stage": "build", "error": f"{type(e).__name__}: {e}".splitlines()[0],
                    "seconds": round(time.time() - t0, 1)}
        print(f"    {family}: teacher folder built ({time.time() - t0:.1f} s)", flush=True)
        sets = ["--set", f"teacher.model={json.dumps(str(folder))}", "--set", f"run.name={json.dumps(family)}"]
        base = [sys.executable, "-m", "pipeline"]
        rc, stage, last = run_logged(base + ["bundle", "--config", str(config)] + sets, log, family)
        if rc == 0:
            stage = "verify-bundle"
            rc, _, last = run_logged(base + ["verify-bundle", "--config", str(config)] + sets, log, family)
    row.update(measure(task, run_dir))
    row.update({"passed": rc == 0, "seconds": round(time.time() - t0, 1)})
    if rc != 0:
        row.update({"stage": stage or "bundle", "error": last})  # no stage started: the config or CLI refused
    elif not keep:
        for done in outputs:
            shutil.rmtree(done, ignore_errors=True)
    return row


def _quality(row: dict, model: str) -> str:
    if f"{model}_accuracy" in row:
        return f"acc {row[f'{model}_accuracy']:.3f}"
    if f"{model}_perplexity" in row:
        return f"ppl {row[f'{model}_perplexity']:.2f}"
    return "-"


def _string_in(row: dict) -> str:
    if row["task"] != "classification" or "string_in" not in row:
        return "-"
    # the reason's first clause names the tokenizer and its model; families.json keeps the whole reason
    return "yes" if row["string_in"] else f"no ({(row.get('string_in_reason') or 'no reason recorded').split(': ')[0]})"


def table(rows: list[dict]) -> str:
    lines = ["| task | family | model_type | result | teacher | student | string-in model | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        result = "passed" if r["passed"] else f"failed at {r['stage']}: {r['error']}"
        lines.append(f"| {r['task']} | {r['family']} | {r.get('model_type', '-')} | {result.replace('|', '/')} | "
                     f"{_quality(r, 'teacher')} | {_quality(r, 'student')} | {_string_in(r).replace('|', '/')} | "
                     f"{r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def write_results(out: Path, rows: list[dict], planned: int) -> None:
    """families.json and families.md, replaced whole (a reader never sees half a file)."""
    data = {"complete": len(rows) == planned, "passed": sum(r["passed"] for r in rows), "families": rows}
    for name, text in (("families.json", json.dumps(data, indent=2) + "\n"), ("families.md", table(rows))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def plan(task: str, families: list[str] | None) -> list[tuple[str, str]]:
    """(task, family) pairs to run, in table order; an unknown family name is one clear error."""
    tasks = list(TASKS) if task == "both" else [task]
    if families:
        known = {f for t in tasks for f in TASKS[t]}
        unknown = [f for f in families if f not in known]
        if unknown:
            raise ValueError(f"unknown family {', '.join(map(repr, unknown))} for --task {task}; known: "
                             + "; ".join(f"{t}: {' '.join(TASKS[t])}" for t in tasks))
    return [(t, f) for t in tasks for f in TASKS[t] if not families or f in families]


def main(argv: list[str] | None = None) -> int:
    p = ToolParser(prog="python -m tools.teacher_families", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, metavar="OUT_DIR", help="folder for the data, configs, teachers, runs, results")
    p.add_argument("--task", choices=["classification", "generation", "both"], default="both")
    p.add_argument("--families", nargs="+", metavar="FAMILY",
                   help=f"only these; classification: {' '.join(ENCODERS)}; generation: {' '.join(DECODER_CONFIGS)}")
    p.add_argument("--keep", action="store_true",
                   help="keep the run folder and bundle of a family that passed (a failed family's are always kept)")
    args = p.parse_args(argv)
    try:
        todo = plan(args.task, args.families)
    except ValueError as e:
        p.error(str(e))  # usage and the message, exit status 2, before anything is written
    out = args.out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file of that name, a folder we may not write
        p.error(f"OUT_DIR {out}: cannot make it a folder ({e.strerror}); give a folder path")
    rows, prepared = [], {}
    for i, (task, family) in enumerate(todo, 1):
        if task not in prepared:
            prepared[task] = prepare(task, out / task)
            print(f"[families] {task}: data and config in {out / task}", flush=True)
        print(f"[families] {i}/{len(todo)} {task} {family}", flush=True)
        row = run_family(task, family, out / task, *prepared[task], args.keep)
        rows.append(row)
        result = "passed" if row["passed"] else f"FAILED at {row['stage']}: {row['error']}"
        print(f"[families] {task} {family}: {result} ({row['seconds']:.0f} s)", flush=True)
        write_results(out, rows, len(todo))
    print(table(rows), end="")
    print(f"[families] {sum(r['passed'] for r in rows)}/{len(rows)} passed; {out / 'families.md'}, "
          f"{out / 'families.json'}; logs in {out}/<task>/logs/")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
