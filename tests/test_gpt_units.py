"""Units of the generation path: markup stripping, split by document, the restricted vocabulary and its
full-vocabulary perplexity, the top-k KL, the Core ML stateful KV-cache module and the LSTM state."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from distill.losses import lm_losses
from distill.lstm import LSTMLM, LSTMLMConfig
from distill.vocab import VocabMap
from eval.metrics import LM, perplexity
from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.tasks.generation.data import build_lm_splits, split_documents, split_windows, strip_markdown, windows


def test_strip_markdown_keeps_the_play_text_only():
    md = "# Hamlet\n\n## ACT I\n\n_Enter HAMLET_\n\n**HAMLET**  \nTo be, or not to be:  \nthat is the question.\n\n\n\n**OPHELIA**  \nGood my lord,\n"
    assert strip_markdown(md) == ("Hamlet\n\nACT I\n\nEnter HAMLET\n\nHAMLET\nTo be, or not to be:\n"
                                  "that is the question.\n\nOPHELIA\nGood my lord,\n")
    assert strip_markdown("don_t keep snake_case_words") == "don_t keep snake_case_words\n"


def test_documents_are_held_out_whole_and_seeded():
    docs = [{"name": f"d{i}", "text": f"text {i}"} for i in range(10)]
    keep, held = split_documents(docs, 0.2, seed=1)
    assert len(held) == 2 and len(keep) == 8
    assert not {d["name"] for d in keep} & {d["name"] for d in held}
    assert split_documents(docs, 0.2, seed=1) == (keep, held)


def test_a_single_file_is_cut_into_contiguous_blocks(tmp_path):
    paras = [f"para {i} " + "word " * 5 for i in range(40)]
    (tmp_path / "one.txt").write_text("\n\n".join(paras))
    cfg = config_from_dict({"run": {"task": "generation"}, "data": {"source": "text", "train_path": str(tmp_path / "one.txt")},
                            "lm": {"split_blocks": 10}})
    s = build_lm_splits(cfg)
    names = {k: {d["name"] for d in s[k]} for k in ("train", "validation", "test")}
    assert names["test"] and names["validation"] and not names["train"] & names["test"]
    assert sum(len(v) for v in names.values()) == 10
    # every paragraph lands in exactly one split
    text = "".join(d["text"] for k in ("train", "validation", "test") for d in s[k])
    assert all(text.count(f"para {i} ") == 1 for i in range(40))


def _gen_cfg(path, **lm):
    return config_from_dict({"run": {"task": "generation"}, "data": {"source": "text", "train_path": str(path)},
                             "lm": {"split_blocks": 10, **lm}})


def test_a_crlf_file_or_one_without_blank_lines_is_still_cut_into_blocks(tmp_path):
    """Windows line ends are read as "\n" (no "\r" reaches the tokenizer), and a file without blank lines
    is cut at line breaks, so a lone file splits either way."""
    paras = [f"para {i} " + "word " * 5 for i in range(40)]
    (tmp_path / "crlf.txt").write_bytes("\r\n\r\n".join(paras).encode())
    s = build_lm_splits(_gen_cfg(tmp_path / "crlf.txt"))
    docs = [d for k in ("train", "validation", "test") for d in s[k]]
    assert len(docs) == 10 and not any("\r" in d["text"] for d in docs)
    (tmp_path / "lines.txt").write_text("\n".join(paras))
    s = build_lm_splits(_gen_cfg(tmp_path / "lines.txt"))
    text = "".join(d["text"] for k in ("train", "validation", "test") for d in s[k])
    assert s["test"] and s["validation"] and all(text.count(f"para {i} ") == 1 for i in range(40))


def test_a_corpus_folder_reads_upper_case_suffixes(tmp_path):
    for i, name in enumerate(["a.txt", "B.TXT", "c.Md", "skip.csv"]):
        (tmp_path / name).write_text(f"**SPEAKER{i}**  \nsome words of play {i}\n")
    s = build_lm_splits(config_from_dict({"run": {"task": "generation"}, "data": {
        "source": "text", "train_path": str(tmp_path), "validation_fraction": 0.0, "test_fraction": 0.3}}))
    names = sorted(d["name"] for k in ("train", "validation", "test") for d in s[k])
    assert names == ["B.TXT", "a.txt", "c.Md"]
    md = next(d for k in ("train", "test") for d in s[k] if d["name"] == "c.Md")
    assert md["text"].startswith("SPEAKER2\n")  # Markdown stripped whatever the suffix's case


def test_dropped_empty_documents_are_warned(tmp_path, caplog):
    for i in range(4):
        (tmp_path / f"{i}.txt").write_text(f"play {i}\n" if i else "  \n")
    cfg = config_from_dict({"run": {"task": "generation"}, "data": {
        "source": "text", "train_path": str(tmp_path), "on_empty_text": "drop", "validation_fraction": 0.0,
        "test_fraction": 0.3}})
    s = build_lm_splits(cfg)
    assert s["info"]["dropped_empty"]["train"] == 1
    assert "1 empty document(s) dropped" in caplog.text


def test_windows_are_evenly_spaced_and_short_text_fails():
    stream = np.arange(100)
    w = windows(stream, 9, "x")
    assert w.shape == (11, 10) and (w[1] == np.arange(9, 19)).all()
    assert windows(stream, 9, "x", limit=3)[:, 0].tolist() == [0, 45, 90]
    with pytest.raises(PipelineError, match="shorter than one window"):
        windows(np.arange(5), 9, "test split")


def test_teacher_and_extra_windows_never_overlap():
    w = np.arange(20)[:, None] * np.ones((1, 3), dtype=np.int64)  # window i is all i
    scored, extra = split_windows(w, 5, 6)
    assert len(scored) == 5 and len(extra) == 6
    assert not set(scored[:, 0]) & set(extra[:, 0])
    _, rest = split_windows(w, 5, -1)
    assert len(rest) == 15
    assert len(split_windows(w, 5, 0)[1]) == 0


def test_restricted_vocabulary_still_scores_every_teacher_token():
    vmap = VocabMap.build(np.array([5, 2, 2, 9]), teacher_vocab=12, restrict=True, always=(0,))
    assert vmap.teacher_ids.tolist() == [0, 2, 5, 9] and vmap.size == 5 and vmap.other_id == 4
    assert vmap.to_student(np.array([9, 3, 0])).tolist() == [3, 4, 0]
    assert vmap.to_teacher([3, 4]).tolist() == [9, -1]
    assert vmap.to_teacher([]).tolist() == []  # lm.sample_tokens = 0: no continuation (an IndexError before)

    class Fixed(torch.nn.Module):  # logits independent of the input
        def __init__(self):
            super().__init__()
            self.logits_row = torch.randn(vmap.size)

        def forward(self, input_ids):
            return type("Out", (), {"logits": self.logits_row.expand(*input_ids.shape, -1)})

    lm = LM("s", "hf", Fixed(), vmap)
    every = torch.arange(12).view(1, 12)
    p = lm.target_logprobs(lm.logits(every), every).exp()
    assert abs(p.sum().item() - 1.0) < 1e-5  # a distribution over all 12 teacher tokens
    win = np.random.default_rng(0).integers(0, 12, size=(3, 9))
    ppl = perplexity(lm, win, 2)
    assert ppl["tokens"] == 24 and math.isfinite(ppl["perplexity"])


def test_topk_kl_is_zero_on_the_teacher_distribution_and_positive_elsewhere():
    torch.manual_seed(0)
    tl = torch.randn(2, 3, 4)  # (B, T, k)
    ids = torch.tensor([0, 2, 5, 7]).expand(2, 3, 4)
    student = torch.full((2, 3, 8), -1e4)
    student.scatter_(-1, ids, tl)
    win, both = torch.zeros(2, 4, dtype=torch.long), torch.tensor([True, True])
    assert lm_losses(student, win, both, ids, tl, 1.0)[1].item() < 1e-5
    # at t = 2 the teacher's softmax(tl / 2) is the student's at the same temperature too
    assert lm_losses(student, win, both, ids, tl, 2.0)[1].item() < 1e-5
    assert lm_losses(torch.randn(2, 3, 8), win, both, ids, tl, 1.0)[1].item() > 1e-3


def test_stateful_kv_module_matches_transformers_step_by_step():
    from transformers import LlamaConfig, LlamaForCausalLM

    from export.coreml_stateful import StatefulLlama, causal_mask

    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=True)).eval()
    ids = torch.randint(0, 50, (1, 9))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits  # (1, 9, V)
        mod = StatefulLlama(hf, 32)
        first = mod(ids[:, :6], causal_mask(6, 6))  # the prompt in one call
        steps = [mod(ids[:, t: t + 1], causal_mask(1, t + 1)) for t in range(6, 9)]  # then one token at a time
    got = torch.cat([first] + steps, dim=1)
    assert torch.allclose(got, ref, atol=1e-4), (got - ref).abs().max()


def test_lstm_state_carries_across_calls():
    torch.manual_seed(0)
    m = LSTMLM(LSTMLMConfig(vocab_size=30, embed_dim=8, hidden=16, layers=2)).eval()
    x = torch.randint(0, 30, (1, 7))
    h, c = m.zero_state(1)
    whole, _, _ = m(x, h, c)
    a, h1, c1 = m(x[:, :4], h, c)
    b, _, _ = m(x[:, 4:], h1, c1)
    assert torch.allclose(torch.cat([a, b], 1), whole, atol=1e-5)


def test_greedy_matches_argmax_of_the_whole_sequence_and_checks_lengths():
    """eval.metrics.greedy with the carried LSTM state picks what re-running the whole sequence picks."""
    from eval.metrics import greedy

    torch.manual_seed(0)
    m = LSTMLM(LSTMLMConfig(vocab_size=30, embed_dim=8, hidden=16, layers=2)).eval()
    lm = LM("lstm", "lstm", m, max_positions=12)
    out = greedy(lm, [3, 1, 4], 5)
    seq = [3, 1, 4]
    for _ in range(5):
        seq.append(int(lm.logits(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[3:]
    with pytest.raises(PipelineError, match="prompt is empty"):
        greedy(lm, [], 3)
    with pytest.raises(PipelineError, match="exceeds the model's 12 positions"):
        greedy(lm, [1] * 10, 3)


def test_samples_keep_the_space_a_word_level_tokenizer_puts_between_prompt_and_continuation():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from eval.metrics import samples_markdown

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "king": 2, "speaks": 3, "now": 4}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    prompt = "the king"
    ids = fast(prompt, add_special_tokens=False)["input_ids"]
    text = samples_markdown(fast, [prompt], [ids], {"student": [[3, 4]]})
    # decoding the continuation alone gives "speaks now", which glued to the prompt read "the kingspeaks now"
    assert "the king speaks now" in text.splitlines()
    trailing = samples_markdown(fast, ["the king "], [ids], {"student": [[3, 4]]})
    assert "the king speaks now" in trailing.splitlines()  # not two spaces


def _bpe(bos: str | None = None, prefix: list[str] = ()):
    """A tiny byte-level BPE tokenizer; with bos, one that puts it (after `prefix` tokens) in front of a text
    when it adds its special tokens, as Llama's, Gemma's and OPT's do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", *([bos] if bos else []), *prefix]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["hello world, the king speaks"] * 4, trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if bos:
        front = " ".join([*prefix, bos])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{front} $A", special_tokens=[(t, tok.token_to_id(t)) for t in (*prefix, bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token=bos or "<|endoftext|>")


def test_windows_and_prompts_start_with_the_tokenizers_bos():
    from pipeline.tasks.generation.data import encode_prompt, shifted_windows, start_ids

    plain, llama = _bpe(), _bpe("<s>")
    assert start_ids(plain) == [] and start_ids(llama) == [llama.bos_token_id]
    assert encode_prompt(plain, "the king") == plain("the king")["input_ids"]
    assert encode_prompt(llama, "the king") == [llama.bos_token_id] + llama("the king", add_special_tokens=False)[
        "input_ids"] == llama("the king")["input_ids"]
    with pytest.raises(PipelineError, match=r"puts \[\d+, \d+\] in front of a text .* at most a <bos>"):
        start_ids(_bpe("<s>", prefix=["<x>"]))
    # a word-level vocabulary where the probe is all [UNK] and the template adds [EOS] [UNK]: told apart by the mask
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    wl = Tokenizer(models.WordLevel({"[UNK]": 0, "[EOS]": 1, "king": 2}, unk_token="[UNK]"))
    wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wl.post_processor = processors.TemplateProcessing(single="[EOS] [UNK] $A", special_tokens=[("[EOS]", 1), ("[UNK]", 0)])
    with pytest.raises(PipelineError, match=r"puts \[1, 0\] in front of a text"):
        start_ids(PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="[UNK]", eos_token="[EOS]"))
    stream = np.arange(100, 200)
    w = windows(stream, 9, "x", start=[7])  # every window: <bos> + the next 9 tokens, each token a target once
    assert w.shape == (11, 10) and (w[:, 0] == 7).all() and (w[1, 1:] == np.arange(109, 118)).all()
    assert np.array_equal(np.sort(w[:, 1:].ravel()), stream[:99])
    assert (windows(stream, 9, "x")[:, :1] != 7).all()  # no start ids: the windows of before
    assert (shifted_windows(stream, 9, 3, [7])[:, 0] == 7).all()


def test_a_gguf_byte_level_tokenizer_is_rebuilt_as_the_file_describes():
    """transformers builds a GGUF's byte-level BPE with byte fallback, sentencepiece's decoder chain and a <bos>
    the file says not to add (SmolLM2's): rebuilt, it keeps every text's ids and adds what the file says."""
    from tokenizers import decoders, processors

    from distill.teacher import gguf_tokenizer
    from pipeline.tasks.generation.data import start_ids

    tok = _bpe("<s>")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    back = tok.backend_tokenizer
    back.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
                                      decoders.ByteLevel()])
    text = "hello world, the king 's speech"
    before = tok(text, add_special_tokens=False)["input_ids"]
    assert start_ids(tok) == [tok.bos_token_id]
    assert gguf_tokenizer(tok, {"tokenizer.ggml.model": "llama"}) is tok  # a sentencepiece GGUF is left as it is
    fixed = gguf_tokenizer(tok, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.add_bos_token": False})
    assert type(fixed).__name__ == "GPT2TokenizerFast" and start_ids(fixed) == []
    assert fixed(text)["input_ids"] == before and fixed.decode(before) == text
    assert isinstance(fixed.backend_tokenizer.post_processor, processors.ByteLevel)
    assert fixed.chat_template == tok.chat_template
    kept = gguf_tokenizer(tok, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.add_bos_token": True})
    assert kept(text)["input_ids"] == [tok.bos_token_id] + before
    # the eos is the file's, not the <bos> transformers names as both (SmolLM2's GGUF: eos id 2, <|im_end|>)
    assert fixed.eos_token == tok.eos_token  # no eos in the settings: as transformers read it
    word = tok.convert_ids_to_tokens(before[0])
    named = gguf_tokenizer(tok, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.eos_token_id": before[0]})
    assert named.eos_token == word and named.eos_token_id == before[0] and named.bos_token == tok.bos_token


def test_gguf_tokenizer_settings_are_read_from_the_file(tmp_path):
    import gguf

    from distill.teacher import _gguf_fields

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_add_bos_token(False)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert _gguf_fields(str(path)) == {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.add_bos_token": False,
                                       "tokenizer.ggml.eos_token_id": 2}


def test_the_teacher_stage_refuses_a_student_init_a_hub_teacher_cannot_give(monkeypatch, tmp_path):
    """A hub teacher's shapes are known once it loads: the teacher stage checks student.init then, before the
    logits pass and distillation (a packaged teacher or a local folder is checked when the config loads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import distill.teacher
    from pipeline.stage import STAGES
    from pipeline.task import StageContext
    from pipeline.tasks.generation.train import stage_teacher

    teacher = LlamaForCausalLM(LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2))
    monkeypatch.setattr(distill.teacher, "load_causal_teacher", lambda spec: (teacher, None))
    settings = {"run": {"task": "generation", "runs_dir": str(tmp_path)},
                "student": {"init": "teacher-layers", "hidden": 64, "heads": 4, "ffn": 128}}
    with pytest.raises(PipelineError, match=r"needs a Llama teacher of the student's width \(this one has hidden "
                                            r"576, ffn 1536, heads 9"):
        config_from_dict(settings)  # the packaged SmolLM2's shape is in its registry entry
    cfg = config_from_dict({**settings, "teacher": {"model": "someone/tiny-llama"}})  # a hub id: checked once loaded
    ctx = StageContext(cfg, "teacher", tmp_path / "out", tmp_path, STAGES["teacher"].deps)
    with pytest.raises(PipelineError, match=r"needs a Llama teacher of the student's width \(this one has hidden "
                                            r"32, ffn 64, heads 4; the student has 64, 128, 4\)"):
        stage_teacher(ctx)
    assert not (tmp_path / "out").exists()


def test_the_distilled_lstm_learns_the_teachers_top_k_the_plain_one_never_sees():
    """Next tokens are uniform noise; the cached teacher always puts its mass on (token + 1) mod V. Trained on
    the same windows, from the same seed, only the distilled LSTM learns that; without the teacher it is the
    plain LSTM, batch for batch."""
    from distill.baseline import build_lstm_lm, train_lstm_lm
    from distill.train import seed_everything
    from pipeline.config import BaselineSection

    V, T = 12, 8
    g = np.random.default_rng(0)
    win = g.integers(0, V, size=(40, T + 1))
    ids = np.stack([(win[:, :-1] + j) % V for j in (1, 2, 3)], -1)  # (N, T, K): the teacher's top-k, best first
    vals = np.broadcast_to(np.array([6.0, 0.0, 0.0], dtype=np.float16), ids.shape).copy()
    b = BaselineSection(embed_dim=16, hidden=32, dropout=0.0, steps=120, batch_size=8, lr=1e-2, distill_alpha=1.0)

    def trained(**kd):
        seed_everything(3)
        m = build_lstm_lm(b, V)
        return m, train_lstm_lm(m, win, b, seed=3, **kd)

    def p_teacher_top1(m) -> float:
        x = torch.from_numpy(win[:, :-1])
        with torch.no_grad():
            logits, _, _ = m(x, *m.zero_state(len(x)))
        return torch.softmax(logits, -1).gather(-1, torch.from_numpy(ids[..., :1])).mean().item()

    plain, ps = trained()
    kd, ks = trained(teacher=(ids, vals), temperature=1.0)
    assert ks["teacher_windows"] == 40 and ks["alpha"] == 1.0 and ks["steps"] == ps["steps"] == 120
    # 120 steps take the teacher's top-1 (~0.99 of its mass) to ~0.84 of the LSTM's; noise leaves it at ~1/V
    assert ks["final_soft_kl"] < 0.5 and p_teacher_top1(kd) > 0.6
    assert p_teacher_top1(plain) < 0.2
    again, _ = trained()  # the same seed without a teacher: the same plain LSTM
    for k, v in plain.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


def test_a_resumed_distillation_reports_the_losses_an_uninterrupted_one_does(tmp_path):
    """Killed in the last tenth of its steps (the tail final_train_ce and final_soft_kl average), the distilled
    LSTM resumes from its checkpoint and reports the same terms and weights as a run never stopped."""
    from dataclasses import replace

    from distill.baseline import build_lstm_lm, train_lstm_lm
    from distill.train import TrainOptions, seed_everything
    from pipeline.config import BaselineSection

    V, T = 12, 8
    win = np.random.default_rng(1).integers(0, V, size=(24, T + 1))
    ids = np.stack([(win[:16, :-1] + j) % V for j in (1, 2)], -1)  # 16 windows with a teacher, 8 without
    vals = np.broadcast_to(np.array([3.0, 0.0], dtype=np.float16), ids.shape).copy()
    b = BaselineSection(embed_dim=8, hidden=16, dropout=0.1, steps=40, batch_size=6, lr=1e-2, distill_alpha=0.5)
    opts = TrainOptions(checkpoint_every=1, checkpoint_dir=tmp_path / "ckpt")

    def run(o):
        seed_everything(5)
        m = build_lstm_lm(b, V)
        return m, train_lstm_lm(m, win, b, seed=5, opts=o, teacher=(ids, vals), temperature=2.0)

    whole, expect = run(TrainOptions())
    with pytest.raises(KeyboardInterrupt):
        run(replace(opts, fail_at_step=38))
    resumed, got = run(opts)
    # the manifest says where it resumed (docs/distributed.md), and nothing else differs
    assert (expect.pop("resumed_from_step"), got.pop("resumed_from_step")) == (0, 38)
    assert got == expect and got["final_soft_kl"] is not None
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


def test_a_checkpoint_made_with_other_settings_is_deleted_and_training_starts_over(tmp_path, caplog):
    """A killed run's checkpoint keyed on other settings was skipped without a word and kept: it is deleted with
    a warning saying why, and the run ends where one that was never killed ends."""
    from dataclasses import replace

    from distill.baseline import build_lstm_lm, train_lstm_lm
    from distill.train import TrainOptions, seed_everything
    from pipeline.config import BaselineSection

    V, T = 12, 8
    win = np.random.default_rng(1).integers(0, V, size=(24, T + 1))
    b = BaselineSection(embed_dim=8, hidden=16, dropout=0.1, steps=40, batch_size=6, lr=1e-2)
    # a save only every 100 steps: what is in the folder after the second run is what the first one left
    opts = TrainOptions(checkpoint_every=100, checkpoint_dir=tmp_path / "ckpt", key="settings-a")

    def run(o):
        seed_everything(5)
        m = build_lstm_lm(b, V)
        return m, train_lstm_lm(m, win, b, seed=5, opts=o)

    whole, expect = run(TrainOptions())
    with pytest.raises(KeyboardInterrupt):
        run(replace(opts, checkpoint_every=1, fail_at_step=30))
    (ckpt,) = (tmp_path / "ckpt").glob("*.pt")
    resumed, got = run(replace(opts, key="settings-b"))
    assert got["resumed_from_step"] == 0 and got == expect
    warning = [r.getMessage() for r in caplog.records if str(ckpt) in r.getMessage()]
    assert len(warning) == 1 and "was made with other settings or inputs" in warning[0]
    assert "training starts from step 0" in warning[0]
    assert not ckpt.exists()  # on main: kept, for a later run to find
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here (a device lease runs these)")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("t, dtype, rows", [(1.0, torch.float32, 128), (2.0, torch.float32, 128),
                                            (1.0, torch.bfloat16, 4), (0.5, torch.bfloat16, 4)])
def test_the_fused_lm_losses_give_plain_autograds_values_and_gradients(t, dtype, rows, device, monkeypatch):
    """lm_losses' hand-written backward (one softmax per chunk of rows) against autograd through F.log_softmax:
    the same values and gradients to float rounding, over chunks smaller than a window (rows = 4 of T = 6), with
    two top-k ids that map to one student id (the vocabulary's "other" row), in float32 and in bf16, on the CPU
    and (where there is one) a CUDA GPU, whose training steps use the same loss."""
    from distill import losses
    from tools.lm_loss_bench import plain as _plain_lm_losses  # F.cross_entropy and F.log_softmax, the reference

    monkeypatch.setattr(losses, "ROWS", rows)
    g = torch.Generator().manual_seed(0)
    B, T, V, K = 5, 6, 30, 4
    base = (torch.randn(B, T, V, generator=g) * 3).to(dtype)
    win = torch.randint(0, V, (B, T + 1), generator=g)
    scored = torch.tensor([True, False, True, True, False])
    ids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(3 * T)]).view(3, T, K)
    ids[0, :, 1] = ids[0, :, 0]  # a repeated id
    vals = torch.randn(3, T, K, generator=g).half()
    base, win, scored, ids, vals = (x.to(device) for x in (base, win, scored, ids, vals))
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    hard, soft = lm_losses(a, win, scored, ids, vals, t)
    (ga,) = torch.autograd.grad(0.3 * hard + 0.7 * soft, a)
    h2, s2 = _plain_lm_losses(b, win, scored, ids, vals, t)
    (gb,) = torch.autograd.grad(0.3 * h2 + 0.7 * s2, b)
    assert ga.dtype == dtype
    assert hard.item() == pytest.approx(h2.item(), rel=1e-6) and soft.item() == pytest.approx(s2.item(), rel=1e-6)
    tol = {"rtol": 1e-5, "atol": 1e-7} if dtype == torch.float32 else {"rtol": 8e-3, "atol": 1e-6}  # bf16: 8 bits
    torch.testing.assert_close(ga, gb, **tol)
    assert soft.item() > 0 and gb[~scored].abs().sum() > 0  # the unscored rows still learn the next tokens
    (only_ce,) = torch.autograd.grad(lm_losses(a, win)[0], a)  # no teacher: the cross-entropy alone
    (ce,) = torch.autograd.grad(_plain_lm_losses(b, win, scored, ids, vals, t)[0], b)
    torch.testing.assert_close(only_ce, ce, **tol)
    assert lm_losses(a, win)[1].item() == 0.0


def test_a_window_without_a_teacher_weighs_the_same_in_any_batch():
    """The loss is alpha * top-k KL (teacher-scored windows) + (1 - alpha) * cross-entropy (every window): an
    extra window's cross-entropy counts (1 - alpha) in a batch of extra windows only, as in a mixed batch."""
    from distill import distributed as D
    from distill.distiller import lm_distill_step

    V, T = 10, 6
    win = np.random.default_rng(2).integers(0, V, size=(6, T + 1))
    ids = np.stack([(win[:2, :-1] + j) % V for j in (1, 2)], -1)  # the first 2 windows have a teacher
    vals = np.zeros(ids.shape, dtype=np.float16)
    logits = torch.randn(1, T, V, generator=torch.Generator().manual_seed(0))
    forward = lambda m, x: logits.expand(len(x), T, V)  # noqa: E731  (the same logits for every window)
    step, parts = lm_distill_step(forward, win, ids, vals, alpha=0.3, temperature=1.0)
    model = torch.nn.Linear(1, 1)  # where the step puts its inputs (the CPU)
    extra_only = step(model, D.Rows([3, 4], [3, 4], 1.0))
    ce = lm_losses(logits.expand(2, T, V), torch.from_numpy(win[[3, 4]]))[0]
    assert extra_only.item() == pytest.approx(0.7 * ce.item())
    assert parts["hard"] == [pytest.approx(ce.item())] and parts["soft"] == []
    plain, _ = lm_distill_step(forward, win, None, None, alpha=0.0, temperature=1.0)  # no teacher: plain CE
    assert plain(model, D.Rows([3, 4], [3, 4], 1.0)).item() == pytest.approx(ce.item())
