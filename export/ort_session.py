"""ONNX Runtime sessions, built one way for every task and caller: the options (threads, logging, graph
optimization, the extensions' custom ops), the CPU provider, and one error for a file ONNX Runtime cannot
load. Also the generation runner (OrtLM): greedy decoding through a decoder graph with its KV cache or an
LSTM graph with its state.

Decoder graph I/O (optimum's names): input_ids, attention_mask, position_ids (where the model takes them),
past_key_values.{i}.key/value
(B, kv_heads, past, head_dim) -> logits, present.{i}.key/value. LSTM graph: input_ids, h0, c0 -> logits, h, c.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.errors import PipelineError

CPU = ("CPUExecutionProvider",)


def extensions_library() -> str:
    """onnxruntime-extensions' custom-op library (the in-graph tokenizer's kernels), found without importing the
    package: its __init__ imports transformers and torch where they are installed, about 4 s that every
    verify-bundle replay process paid for one file path."""
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_extensions")  # a top-level name: nothing is executed
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if (lib := Path(folder) / f"_extensions_pydll{suffix}").is_file():
                return str(lib)
    from onnxruntime_extensions import get_library_path  # another layout: the package's own answer

    return get_library_path()


def ort_session(model: Path | str | bytes, threads: int = 0, providers: Sequence[str] = CPU, *,
                inter_threads: int = 0, custom_ops: bool = False, optimize: bool = True, quiet: bool = True,
                config: dict[str, str] | None = None, disabled_optimizers: Sequence[str] = (),
                save_to: Path | None = None, fix: str | None = "re-run the stage that wrote it",
                name: str | None = None, profile: str | None = None):
    """A session over model (a path or a serialized graph). threads: intra-op threads (0: ORT's default);
    inter_threads 1 pins the inter-op pool (these graphs have no parallel branches); custom_ops registers
    onnxruntime-extensions (the in-graph tokenizer, as an app does); optimize=False keeps the ops as written;
    quiet hides the CPU provider's expected "some nodes were not assigned" notes; config (session config
    entries), disabled_optimizers and save_to (the optimized graph's file) serve export/ort_format.py;
    profile: the file prefix of ORT's profiler, on when given (session.end_profiling() names its file).
    A load failure raises a PipelineError naming `name` (default: the path) and ending with `fix`;
    fix=None lets ORT's own error through."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    if inter_threads:
        opts.inter_op_num_threads = inter_threads
    if quiet:
        opts.log_severity_level = 3
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if save_to is not None:
        opts.optimized_model_filepath = str(save_to)
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile
    for key, value in (config or {}).items():
        opts.add_session_config_entry(key, value)
    if custom_ops:
        opts.register_custom_ops_library(extensions_library())
    src = model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(src, opts, providers=list(providers), disabled_optimizers=list(disabled_optimizers))
    except Exception as e:  # onnxruntime raises its own Fail / InvalidGraph / NotImplemented types
        if fix is None:
            raise
        raise PipelineError(f"{name or model}: onnxruntime cannot load it ({str(e).splitlines()[0][:300]}); "
                            f"{fix}") from None


def refuse_fallback(session, provider: str) -> None:
    """ORT falls back to the CPU with only a warning when a provider cannot be created: refuse, so CPU times
    are never filed under a GPU target."""
    if provider not in session.get_providers():
        raise RuntimeError(f"{provider} could not be created (the session runs on {session.get_providers()})")


class OrtLM:
    """Greedy generation through an ONNX Runtime session of a decoder (KV cache) or LSTM graph."""

    def __init__(self, path: Path, threads: int = 0, max_positions: int = 0, cut: int | None = None,
                 providers: Sequence[str] = CPU, bind_device: str | None = None):
        """bind_device ("cuda", or "cpu" in tests): run through IO binding, so the KV cache / LSTM state stays
        on that device between steps and only the logits come back to the host; None: plain session.run."""
        self.session = ort_session(path, threads, providers, inter_threads=1 if threads > 0 else 0)
        self.bind_device = bind_device
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.kind = "lstm" if "h0" in self.inputs else "decoder"
        self.max_positions = max_positions
        self.cut = cut  # logits beyond this index ("other") are never picked
        self.past_names = [n for n in self.inputs if n.startswith("past_key_values.")]

    def _empty(self) -> dict[str, np.ndarray]:
        if self.kind == "lstm":
            shape = [d if isinstance(d, int) else 1 for d in self.inputs["h0"].shape]
            return {"h0": np.zeros(shape, np.float32), "c0": np.zeros(shape, np.float32)}
        state = {}
        for n in self.past_names:
            _, heads, _, dim = self.inputs[n].shape
            state[n] = np.zeros((1, heads, 0, dim), np.float32)
        return state

    def _feed(self, ids: np.ndarray, state: dict, past: int) -> dict:
        if self.kind == "lstm":
            return {"input_ids": ids, **state}
        T = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((1, past + T), np.int64),
                "position_ids": np.arange(past, past + T, dtype=np.int64)[None], **state}
        # a decoder that numbers positions itself (Gemma: from the cache length; BLOOM: ALiBi) has no position_ids
        return {name: value for name, value in feed.items() if name in self.inputs}

    def _run(self, ids: np.ndarray, state: dict, past: int):
        """ids (1, T) -> (logits of the last position (V,), new state)."""
        names = [o.name for o in self.session.get_outputs()]
        if self.bind_device is None:
            out = self.session.run(None, self._feed(ids, state, past))
        else:
            out = self._run_bound(ids, state, past, names)
        if self.kind == "lstm":
            return out[0][0, -1], {"h0": out[1], "c0": out[2]}
        return out[0][0, -1], {n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], out[1:])
                               if n.startswith("present.")}

    def _run_bound(self, ids: np.ndarray, state: dict, past: int, names: list[str]) -> list:
        """The outputs through IO binding: host arrays (ids, mask, positions, the empty first state) are copied
        in by ONNX Runtime; the state outputs stay on bind_device as OrtValues and are fed back as they are."""
        binding = self.session.io_binding()
        for name, value in self._feed(ids, state, past).items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        binding.bind_output(names[0], "cpu")  # the logits: the greedy pick runs on the host
        for name in names[1:]:
            binding.bind_output(name, self.bind_device)
        self.session.run_with_iobinding(binding)
        out = binding.get_outputs()
        return [out[0].numpy(), *out[1:]]

    def pick(self, logits: np.ndarray) -> int:
        return int(np.argmax(logits[: self.cut]))

    def generate(self, prompt: list[int], n: int, timings: dict | None = None) -> list[int]:
        """n greedy model ids after prompt (model ids). timings, if given, gets ttft_s and decode_s."""
        if self.kind == "decoder" and self.max_positions and len(prompt) + n > self.max_positions:
            raise PipelineError(f"a prompt of {len(prompt)} tokens + {n} new tokens does not fit the exported model's "
                                f"{self.max_positions} positions (lm.max_cache); shorten the prompt or raise "
                                f"lm.max_cache and re-run distill")
        t0 = time.perf_counter()
        logits, state = self._run(np.asarray([prompt], np.int64), self._empty(), 0)
        out = [self.pick(logits)]
        t1 = time.perf_counter()
        for _ in range(n - 1):
            logits, state = self._run(np.asarray([[out[-1]]], np.int64), state, len(prompt) + len(out) - 1)
            out.append(self.pick(logits))
        if timings is not None:
            timings["ttft_s"], timings["decode_s"] = t1 - t0, time.perf_counter() - t1
        return out

    def window_logits(self, ids: np.ndarray) -> np.ndarray:
        """Full-sequence logits from an empty state, ids (B, T) -> (B, T, V), for perplexity."""
        return np.stack([self.session.run(None, self._feed(row[None], self._empty(), 0))[0][0] for row in ids])
