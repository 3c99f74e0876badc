"""The latency harness, FLOP formulas, the checker parser and the roofline, on tiny inputs (no timing
is asserted: only counts, shapes, order and formulas)."""
from __future__ import annotations

import numpy as np
import pytest

from eval import latency as L
from eval.flops import encoder_flops, folder_flops, rnn_flops
from eval.npu import parse_usability, roofline_ms


def test_summarize_percentiles_are_ordered_and_exact():
    s = L.summarize([float(i) for i in range(1, 101)])
    assert s["p50_ms"] == pytest.approx(50.5) and s["p90_ms"] == pytest.approx(90.1)
    assert s["p99_ms"] == pytest.approx(99.01) and s["mean_ms"] == pytest.approx(50.5)
    assert s["min_ms"] == 1.0 and s["iterations"] == 100
    s = L.summarize([3.0, 1.0, 9.0, 2.0])
    assert s["min_ms"] <= s["p50_ms"] <= s["p90_ms"] <= s["p99_ms"]


def test_time_calls_counts_warmup_and_iterations():
    calls = []
    samples = L.time_calls(lambda: calls.append(1), L.Plan(warmup=3, iterations=7, max_seconds=60))
    assert len(calls) == 10 and len(samples) == 7 and all(s >= 0 for s in samples)
    calls.clear()
    # a zero time cap stops at the minimum number of timed calls, never fewer
    samples = L.time_calls(lambda: calls.append(1), L.Plan(warmup=2, iterations=50, max_seconds=0.0,
                                                          min_iterations=4))
    assert len(samples) == 4 and len(calls) == 6


def test_inputs_have_the_exact_length_and_real_tokens(tiny_bert_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    stream = L.token_stream(tok, ["good movie", "the food was bad"], 40)
    assert len(stream) >= 40 and tok.unk_token_id not in stream.tolist()
    ids, mask = L.make_batch(stream, 16, 3, tok.cls_token_id, tok.sep_token_id)
    assert ids.shape == mask.shape == (3, 16) and ids.dtype == np.int64 and mask.all()
    assert (ids[:, 0] == tok.cls_token_id).all() and (ids[:, -1] == tok.sep_token_id).all()
    assert set(ids[:, 1:-1].ravel().tolist()) <= set(stream.tolist())
    assert not (ids[0] == ids[1]).all()  # rows are different windows of the texts
    ids, _ = L.make_batch(stream, 256, 1, tok.cls_token_id, tok.sep_token_id)  # longer than the stream: wraps
    assert ids.shape == (1, 256)


def test_feeds_by_input_name():
    ids = np.ones((2, 5), np.int64)
    f = L.feeds(["input_ids", "attention_mask", "token_type_ids"], ids, ids)
    assert (f["token_type_ids"] == 0).all() and f["input_ids"] is ids
    with pytest.raises(ValueError, match="pixel_values"):
        L.feeds(["pixel_values"], ids, ids)


def test_peak_rss_sees_a_large_allocation():
    with L.PeakRSS() as rss:
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        block.sum()
    assert rss.report()["session_rss_mb"] > 40
    del block


def test_flop_formulas():
    # BERT-base per token at n=128: 12 * (8*768^2 + 4*768*3072 + 4*128*768)
    assert encoder_flops(12, 768, 3072, 128) == 128 * 12 * (8 * 768**2 + 4 * 768 * 3072 + 4 * 128 * 768)
    # attention makes doubling the length cost more than double; an LSTM exactly double
    assert encoder_flops(4, 128, 512, 256) > 2 * encoder_flops(4, 128, 512, 128)
    assert rnn_flops(1, 128, 192, True, 64) == 2 * 64 * 8 * 192 * (128 + 192)
    assert rnn_flops(2, 16, 8, False, 10) == 10 * 8 * 8 * (16 + 8) + 10 * 8 * 8 * (8 + 8)
    assert rnn_flops(1, 16, 8, False, 10, "gru") == 10 * 6 * 8 * (16 + 8)


def test_folder_flops_reads_configs(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 2,
                                                      "hidden_size": 32, "intermediate_size": 64}))
    assert folder_flops(tmp_path, 16) == encoder_flops(2, 32, 64, 16)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "rnn-classifier", "layers": 1, "embed_dim": 16,
                                                      "hidden": 8, "bidirectional": True, "cell": "lstm"}))
    assert folder_flops(tmp_path, 16) == rnn_flops(1, 16, 8, True, 16)
    assert folder_flops(tmp_path / "missing", 16) is None


CHECKER_LOG = """INFO:  Checking model.onnx for usability with ORT Mobile.
INFO:  Checking NNAPI
INFO:  5 partitions with a total of 38/136 nodes can be handled by the NNAPI EP.
INFO:  	Partition sizes: [14, 6, 6, 6, 6]
INFO:  Unsupported nodes due to operator=20
INFO:  	Unsupported ops: ai.onnx:Equal,ai.onnx:Erf,ai.onnx:LayerNormalization
INFO:  Unsupported nodes due to input having a dynamic shape=94
INFO:  Model should perform well with NNAPI as is: NO
INFO:  --------
INFO:  Checking if model will perform better if the dynamic shapes are fixed...
INFO:  Partition information if the model was updated to make the shapes fixed:
INFO:  11 partitions with a total of 116/136 nodes can be handled by the NNAPI EP.
INFO:  	Partition sizes: [18, 6, 18, 17, 3, 6, 18, 17, 3, 6, 4]
INFO:  Model should perform well with NNAPI if modified to have fixed input shapes: NO
INFO:  ================
INFO:  Checking CoreML MLProgram
INFO:  1 partitions with a total of 89/89 nodes can be handled by the CoreML MLProgram EP.
INFO:  	Partition sizes: [89]
INFO:  Model should perform well with CoreML MLProgram as is: YES
"""


def test_parse_usability_log():
    r = parse_usability(CHECKER_LOG)
    nn = r["nnapi"]
    assert nn["as_is"] == {"partitions": 5, "supported_nodes": 38, "total_nodes": 136, "coverage": 38 / 136,
                           "partition_sizes": [14, 6, 6, 6, 6], "unsupported_ops": ["Equal", "Erf",
                                                                                    "LayerNormalization"],
                           "dynamic_shape_nodes": 94, "recommended": False}
    assert nn["if_shapes_fixed"]["supported_nodes"] == 116 and nn["if_shapes_fixed"]["partitions"] == 11
    ml = r["coreml_mlprogram"]["as_is"]
    assert ml["recommended"] is True and ml["coverage"] == 1.0 and "if_shapes_fixed" not in r["coreml_mlprogram"]
    assert parse_usability("garbage\n") == {}


def test_roofline_bound():
    dev = {"peak_int8_tops": 10.0, "peak_fp16_tops": 5.0, "memory_gb_s": 100.0}
    r = roofline_ms(1e9, 1e6, dev, "int8")  # 0.1 ms compute vs 0.01 ms memory
    assert r["bound"] == "compute" and r["estimate_ms"] == pytest.approx(0.1)
    r = roofline_ms(1e9, 1e8, dev, "fp16")  # 0.2 ms compute vs 1 ms memory
    assert r["bound"] == "memory" and r["estimate_ms"] == pytest.approx(1.0)


def test_device_profiles_name_their_sources():
    from eval.npu import get_device, load_devices
    from pipeline.errors import PipelineError

    devices = load_devices()
    assert "apple-a17-pro" in devices
    for d in devices.values():
        assert d["peak_int8_tops"] > 0 and d["memory_gb_s"] > 0 and len(d["source"]) > 40
    with pytest.raises(PipelineError, match="Known: apple-a17-pro"):
        get_device(devices, "tpu-v9")


def test_measure_decode_reports_ttft_percentiles_and_decode_rate():
    """The prompt + decode workload: one untimed warm-up generation, then TTFT percentiles (the shared
    latency.summarize) and the median decode rate over the timed ones."""
    from eval.bench import measure_decode

    class Runner:  # reports fixed timings: TTFT 10, 20, 30, 40 ms; decode 0.5, 1, 1, 2 s for 8 tokens
        calls: list = []
        ttft = iter([0.01, 0.02, 0.03, 0.04])
        decode = iter([0.5, 1.0, 1.0, 2.0])

        def generate(self, prompt, n, timings=None):
            self.calls.append((len(prompt), n, timings is not None))
            if timings is not None:
                timings.update(ttft_s=next(self.ttft), decode_s=next(self.decode))

    r = Runner()
    s = measure_decode(r, [1, 2, 3], decode_tokens=8, iterations=4)
    assert r.calls == [(3, 9, False)] + [(3, 9, True)] * 4
    assert s["ttft_ms"] == s["ttft_p50_ms"] == pytest.approx(25.0) and s["ttft_mean_ms"] == pytest.approx(25.0)
    assert s["ttft_p50_ms"] <= s["ttft_p90_ms"] <= s["ttft_p99_ms"] <= 40.0
    assert s["decode_tokens_per_s"] == pytest.approx(8.0)  # median of 16, 8, 8, 4
    assert (s["prompt_tokens"], s["decode_tokens"], s["iterations"]) == (3, 8, 4)


def test_decodes_in_alternating_rounds_share_the_drift_and_fail_alone():
    """desktop-gpu times its files' generations together, one each per round in alternating order: a machine
    slow for the first half of the generations slows both identical files alike (one after the other, the
    first would read 4x the second). A runner that raises is reported alone."""
    from eval.bench import measure_decodes

    done = [0]

    class Drifting:
        def generate(self, prompt, n, timings=None):
            if timings is not None:
                done[0] += 1
                slow = done[0] <= 10
                timings.update(ttft_s=0.04 if slow else 0.01, decode_s=2.0 if slow else 0.5)

    class Broken:
        def generate(self, prompt, n, timings=None):
            raise RuntimeError("CUDA session lost")

    stats, failed = measure_decodes({"a": (Drifting(), [1, 2]), "b": (Drifting(), [1, 2, 3]), "c": (Broken(), [1])},
                                    decode_tokens=8, iterations=10)
    assert set(stats) == {"a", "b"} and isinstance(failed["c"], RuntimeError)
    a, b = stats["a"], stats["b"]
    assert a["ttft_ms"] == pytest.approx(b["ttft_ms"]) == pytest.approx(25.0)  # 5 slow and 5 fast each
    assert a["decode_tokens_per_s"] == pytest.approx(b["decode_tokens_per_s"])
    assert (a["prompt_tokens"], b["prompt_tokens"], a["iterations"]) == (2, 3, 10)


def test_decode_targets_run_skip_with_reason_or_refuse():
    from eval.bench import decode_targets, decode_threads
    from eval.targets import host_threads
    from pipeline.errors import PipelineError

    run, skip = decode_targets(["host-cpu", "mobile-cpu", "edge-npu", "browser-wasm"])
    assert [t.name for t in run] == ["host-cpu", "mobile-cpu"] and run[1].formats == ("ort", "onnx")
    assert set(skip) == {"edge-npu", "browser-wasm"} and all(skip.values())
    assert decode_threads(run[0]) == host_threads() and decode_threads(run[1]) == 1  # the shared registry's
    with pytest.raises(PipelineError, match="unknown bench target 'phone'"):
        decode_targets(["phone"])


def test_decode_on_desktop_gpu_needs_onnxruntime_gpu(monkeypatch):
    import eval.bench as B

    monkeypatch.setattr(B, "cuda_backend", lambda: None)
    monkeypatch.setattr(B, "unavailable", lambda t: "no CUDA device on this machine")
    assert B.decode_targets(["desktop-gpu"]) == ([], {"desktop-gpu": "no CUDA device on this machine; not measured"})
    monkeypatch.setattr(B, "cuda_backend", lambda: "torch-cuda")
    assert "onnxruntime-gpu is not installed" in B.decode_targets(["desktop-gpu"])[1]["desktop-gpu"]
    monkeypatch.setattr(B, "cuda_backend", lambda: "ort-cuda")
    (t,), skip = B.decode_targets(["desktop-gpu"])
    assert not skip and t.providers == ("CUDAExecutionProvider",) and t.bind_device == "cuda"
    assert t.variants == ("fp32",) and "int8" in t.why_not


def test_generation_flop_formulas_by_hand():
    from types import SimpleNamespace

    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM,
                              PhiConfig, PhiForCausalLM)

    from eval.flops import decoder_flops, lstm_lm_flops

    # Llama, d 4, ff 8, 1 layer, vocab 10, 2 heads of 2, 1 KV head: kv 2; per token 2 (32 + 16 + 96 + 40) = 368
    llama = LlamaForCausalLM(LlamaConfig(hidden_size=4, intermediate_size=8, num_hidden_layers=1, vocab_size=10,
                                         num_attention_heads=2, num_key_value_heads=1))
    assert decoder_flops(llama, 3) == 3 * 368 + 2 * 1 * 4 * 9
    # GPT-2 (Conv1D, tied output): c_attn 4x12, c_proj 4x4, c_fc 4x16, c_proj 16x4, output 10x4 -> 2 * 232
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=4, n_layer=1, n_head=2, vocab_size=10, n_positions=8))
    assert decoder_flops(gpt2, 3) == 3 * 464 + 2 * 1 * 4 * 9
    # Phi and OPT: two feed-forward matrices (fc1, fc2), not Llama's three: q k v dense 4 * 16, fc 2 * 32, out 40
    phi = PhiForCausalLM(PhiConfig(hidden_size=4, intermediate_size=8, num_hidden_layers=1, vocab_size=10,
                                   num_attention_heads=2))
    opt = OPTForCausalLM(OPTConfig(hidden_size=4, ffn_dim=8, num_hidden_layers=1, vocab_size=10,
                                   num_attention_heads=2, word_embed_proj_dim=4, max_position_embeddings=8))
    assert decoder_flops(phi, 3) == decoder_flops(opt, 3) == 3 * 2 * (64 + 64 + 40) + 2 * 1 * 4 * 9
    # E 2, H 3, 2 layers, vocab 5: cells 8*3*(2+3) + 8*3*(3+3) = 264, projection 12, output 20
    lstm = SimpleNamespace(embed_dim=2, hidden=3, layers=2, vocab_size=5)
    assert lstm_lm_flops(lstm, 4) == 4 * (264 + 12 + 20)


def test_the_bench_log_says_where_a_row_was_timed_or_why_not():
    """A row the CPU targets skip was logged as a bare '-': the log names the target that timed it, or the
    first target's reason."""
    from eval.bench import _log_line

    targets = ["host-cpu", "mobile-cpu", "browser-wasm"]
    fp16 = "fp16 ONNX has no fast CPU kernels in ONNX Runtime (it runs through casts); it is the GPU/NPU variant"
    cpu = {"host-cpu": {"64": {"p50_ms": 1.234}}, "mobile-cpu": {"64": {"p50_ms": 2.0}}}
    assert _log_line({"latency": cpu}, targets, 64) == "p50 1.23 ms at 64"
    assert _log_line({"latency": {"host-cpu": {"status": "skipped", "reason": "x"}, "mobile-cpu": cpu["mobile-cpu"]}},
                     targets, 64) == "p50 2.00 ms at 64"
    web = {"host-cpu": {"status": "skipped", "reason": "a browser-only file"}, "browser-wasm": {"64": {"p50_ms": 5.5}}}
    assert _log_line({"latency": web}, targets, 64) == "p50 5.50 ms at 64 on browser-wasm"
    skipped = {t: {"status": "skipped", "reason": fp16} for t in targets}
    assert _log_line({"latency": skipped}, targets, 64) == ("not timed on host-cpu: fp16 ONNX has no fast CPU kernels "
                                                            "in ONNX Runtime (it runs through casts)")
    assert _log_line({"latency": {}}, ["edge-npu"], 64) == "not timed on edge-npu: no entry"
