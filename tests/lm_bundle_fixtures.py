"""A tiny generation run whose teacher has a byte-level BPE tokenizer (the kind SmolLM2, GPT-2 and Llama 3
ship, and the kind onnxruntime-genai and transformers.js read from tokenizer.json), for the bundle tests."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Callable

from test_gpt_pipeline import _play, gen_cfg, train_tiny_llama  # noqa: F401  (the same plays, model and run)


def write_plays(folder: Path) -> Path:
    rng = random.Random(0)
    for i in range(10):
        (folder / f"play{i:02d}.md").write_text(_play(rng, 40, rare=i >= 8))
    return folder


def bpe_llama(folder: Path, corpus: Path, bos: bool = False) -> Path:
    """A 'pretrained' causal LM folder: byte-level BPE trained on the training plays (the test plays' rare
    word is split into pieces the student may not keep: exercises the "other" id) and a tiny Llama (GQA)
    trained for a few steps so its greedy output is not constant. bos: the tokenizer puts a <s> in front of
    every text it adds special tokens to, as Llama's and Gemma's do, and the model is trained that way."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from pipeline.tasks.generation.data import strip_markdown

    texts = [strip_markdown(p.read_text()) for p in sorted(corpus.glob("play0[0-7].md"))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", *(["<s>"] if bos else [])]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token=specials[-1])
    fast.save_pretrained(folder)
    ids = []
    for t in texts:
        ids += fast(t)["input_ids"] + [fast.eos_token_id]
    return train_tiny_llama(folder, ids, 40, vocab_size=len(fast), eos_token_id=fast.eos_token_id,
                            bos_token_id=fast.bos_token_id)


def tiny_inputs(root: Path, bos: bool = False) -> tuple[Path, Path]:
    """(corpus folder, teacher folder) of a tiny run under root: the plays and bpe_llama's teacher."""
    (root / "plays").mkdir()
    corpus = write_plays(root / "plays")
    (root / "teacher").mkdir()
    return corpus, bpe_llama(root / "teacher", corpus, bos)


def bundle_cfg(tmp_path: Path, corpus: Path, teacher: Path, **over) -> dict:
    """The tiny generation run, trimmed to what the bundle needs (no Core ML, one bench target)."""
    d = gen_cfg(tmp_path, corpus, teacher, **over)
    d["lm"].update(prompts=["ROMEO : my love", "KING : the crown is"], sample_tokens=8, check_tokens=8)
    d["quantize"]["models"] = ["student"]
    d["export"].update(coreml_models=[], ort_variants=["int8-dynamic"])
    d["bench"]["targets"] = ["host-cpu"]
    d["bundle"] = {"dist_dir": str(tmp_path / "dist"), **d.get("bundle", {})}
    return d


def with_tokenizer(dist: Path, dest: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the bundle at dest whose tokenizer.json `edit` changed in place, the hashes rewritten so only
    the replay can tell."""
    from export.bundle import write_metadata

    copy = shutil.copytree(dist, dest)
    tj = json.loads((copy / "tokenizer.json").read_text())
    edit(tj)
    (copy / "tokenizer.json").write_text(json.dumps(tj))
    meta = json.loads((copy / "metadata.json").read_text())
    write_metadata(copy, {k: v for k, v in meta.items() if k != "files"})
    return copy
