"""A tiny generation run whose teacher has a byte-level BPE tokenizer (the kind SmolLM2, GPT-2 and Llama 3
ship, and the kind onnxruntime-genai and transformers.js read from tokenizer.json), for the bundle tests."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from test_gpt_pipeline import _play, gen_cfg  # noqa: F401  (the same synthetic plays and tiny run)


def write_plays(folder: Path) -> Path:
    rng = random.Random(0)
    for i in range(10):
        (folder / f"play{i:02d}.md").write_text(_play(rng, 40, rare=i >= 8))
    return folder


def bpe_llama(folder: Path, corpus: Path) -> Path:
    """A 'pretrained' causal LM folder: byte-level BPE trained on the training plays (the test plays' rare
    word is split into pieces the student may not keep: exercises the "other" id) and a tiny Llama (GQA)
    trained for a few steps so its greedy output is not constant."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from pipeline.lm_data import strip_markdown

    texts = [strip_markdown(p.read_text()) for p in sorted(corpus.glob("play0[0-7].md"))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      tie_word_embeddings=True, eos_token_id=fast.eos_token_id, bos_token_id=fast.bos_token_id)
    model = LlamaForCausalLM(cfg)
    ids = []
    for t in texts:
        ids += fast(t, add_special_tokens=False)["input_ids"] + [fast.eos_token_id]
    x = torch.tensor(ids[: (len(ids) // 33) * 33]).view(-1, 33)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(40):
        b = x[torch.randint(0, len(x), (16,))]
        loss = model(input_ids=b, labels=b).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval().save_pretrained(folder, safe_serialization=True)
    return folder


def bundle_cfg(tmp_path: Path, corpus: Path, teacher: Path, **over) -> dict:
    """The tiny generation run, trimmed to what the bundle needs (no Core ML, one bench target)."""
    d = gen_cfg(tmp_path, corpus, teacher, **over)
    d["lm"].update(prompts=["ROMEO : my love", "KING : the crown is"], sample_tokens=8, check_tokens=8)
    d["quantize"]["models"] = ["student"]
    d["export"].update(coreml_models=[], ort_variants=["int8-dynamic"])
    d["bench"]["targets"] = ["host-cpu"]
    d["bundle"] = {"dist_dir": str(tmp_path / "dist"), **d.get("bundle", {})}
    return d
