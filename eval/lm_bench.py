"""Generation benchmark: time to first token for a fixed-length prompt and decode tokens per second at
batch 1, through ONNX Runtime on named targets, with the KV cache (decoders) or state (LSTM) carried
between steps exactly as an app would.

Targets here: host-cpu (ONNX graphs, every core) and mobile-cpu (the .ort files, 1 thread: on this
machine a host proxy for a phone's big core; ORT's PyPI wheel has no XNNPACK). The NPU and GPU targets
of the classification bench are skipped for generation with a reason.
"""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

import numpy as np

from pipeline.errors import PipelineError


@dataclass(frozen=True)
class GenTarget:
    name: str
    threads: int  # 0 = every core
    formats: tuple[str, ...]  # preferred first: a model without the first is run from the next
    note: str
    proxy: str = ""  # non-empty: measured here as a stand-in for another device, and why


GEN_TARGETS = {
    "host-cpu": GenTarget("host-cpu", 0, ("onnx",), "ONNX Runtime CPU, all cores"),
    "mobile-cpu": GenTarget("mobile-cpu", 1, ("ort", "onnx"), "ONNX Runtime CPU, 1 thread, .ort files "
                            "(the teacher, which has no .ort, from its .onnx)",
                            "host x86 core standing in for a phone CPU core (no XNNPACK in this wheel)"),
}
SKIPPED_TARGETS = {
    "edge-npu": "generation with a growing KV cache has dynamic shapes that NPU providers reject; not measured",
    "desktop-gpu": "no CUDA device or onnxruntime-gpu here; not measured",
    "browser-wasm": "the browser targets time the classifier files; decoding in the browser is not benchmarked",
    "browser-wasm-mt": "the browser targets time the classifier files; decoding in the browser is not benchmarked",
}


def resolve_targets(names: list[str]) -> tuple[list[GenTarget], dict[str, str]]:
    run, skip = [], {}
    for n in names:
        if n in GEN_TARGETS:
            run.append(GEN_TARGETS[n])
        elif n in SKIPPED_TARGETS:
            skip[n] = SKIPPED_TARGETS[n]
        else:
            raise PipelineError(f"unknown bench target '{n}'. Known: {', '.join([*GEN_TARGETS, *SKIPPED_TARGETS])}")
    return run, skip


def threads_for(t: GenTarget) -> int:
    return t.threads or (os.cpu_count() or 1)


def measure(runner, prompt: list[int], decode_tokens: int, iterations: int) -> dict:
    """Warm-up once, then `iterations` generations: TTFT (prefill + first token) and decode rate."""
    runner.generate(prompt, decode_tokens + 1)
    ttft, rate = [], []
    for _ in range(iterations):
        t: dict = {}
        runner.generate(prompt, decode_tokens + 1, timings=t)
        ttft.append(t["ttft_s"] * 1e3)
        rate.append(decode_tokens / t["decode_s"])
    q = np.percentile(ttft, [50, 90, 99])
    return {"ttft_ms": statistics.median(ttft), "decode_tokens_per_s": statistics.median(rate),
            "prompt_tokens": len(prompt), "decode_tokens": decode_tokens, "iterations": iterations,
            "ttft_p50_ms": float(q[0]), "ttft_p90_ms": float(q[1]), "ttft_p99_ms": float(q[2]),
            "ttft_mean_ms": float(np.mean(ttft))}


def decoder_flops(config, n: int) -> int:
    """Forward FLOPs for n tokens: 2 per weight multiply-add (layers + output layer) plus causal attention
    scores and values (2 * 2 * L * d * n^2 / 2)."""
    d, f, L, V = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    kv = config.num_key_value_heads * (getattr(config, "head_dim", None) or d // config.num_attention_heads)
    per_token = 2 * (L * (2 * d * d + 2 * d * kv + 3 * d * f) + V * d)
    return int(n * per_token + 2 * L * d * n * n)


def lstm_flops(config, n: int) -> int:
    """LSTM cell 8 h (d_in + h) per layer per token, projection 2 h E, tied output layer 2 V E."""
    E, H, L, V = config.embed_dim, config.hidden, config.layers, config.vocab_size
    cells = sum(8 * H * ((E if i == 0 else H) + H) for i in range(L))
    return int(n * (cells + 2 * H * E + 2 * V * E))
