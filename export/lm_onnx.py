"""ONNX for the generation models: decoders with past key/values (optimum's text-generation-with-past
export), the LSTM LM with its state as inputs/outputs, int8 dynamic quantization, and an ONNX Runtime
runner whose greedy decode is checked token for token against PyTorch.

Decoder graph I/O (optimum's names): input_ids, attention_mask, position_ids, past_key_values.{i}.key/value
(B, kv_heads, past, head_dim) -> logits, present.{i}.key/value. LSTM graph: input_ids, h0, c0 -> logits, h, c.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from pipeline.errors import PipelineError

# Llama's export needs opset >= 18 in optimum-onnx (lower opsets warn and can mis-export the attention mask).
MIN_DECODER_OPSET = 18


def export_decoder(model_folder: Path, out_dir: Path, opset: int) -> Path:
    """model_folder (an HF causal LM folder) -> out_dir/model.onnx with KV cache inputs and outputs."""
    from optimum.exporters.onnx import main_export

    try:
        main_export(str(model_folder), output=str(out_dir), task="text-generation-with-past",
                    opset=max(opset, MIN_DECODER_OPSET), do_validation=False, device="cpu")
    except Exception as e:  # optimum raises many types; the message names the op or config at fault
        raise PipelineError(f"ONNX export of the decoder in {model_folder} failed ({type(e).__name__}: {e}); "
                            f"try a higher quantize.opset") from None
    for extra in out_dir.iterdir():  # optimum copies the tokenizer and config next to the graph
        if extra.name != "model.onnx" and not extra.name.startswith("model.onnx"):
            extra.unlink()
    return out_dir / "model.onnx"


def export_lstm(model, path: Path, opset: int) -> Path:
    """LSTM LM -> ONNX with dynamic batch and sequence; the state passes through as inputs/outputs."""
    model = model.eval()  # the legacy exporter keeps the module's mode: dropout must be off
    x = torch.zeros((1, 4), dtype=torch.int64)
    h, c = model.zero_state(1)
    torch.onnx.export(model, (x, h, c), str(path), dynamo=False, opset_version=opset,
                      input_names=["input_ids", "h0", "c0"], output_names=["logits", "h", "c"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "h0": {1: "batch"}, "c0": {1: "batch"},
                                    "logits": {0: "batch", 1: "sequence"}, "h": {1: "batch"}, "c": {1: "batch"}})
    return path


def quantize_int8(src: Path, dst: Path) -> Path:
    """Dynamic int8 (weights int8, activations quantized at run time): MatMul/Gather/LSTM."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=False)
    return dst


class OrtLM:
    """Greedy generation through an ONNX Runtime session of a decoder (KV cache) or LSTM graph."""

    def __init__(self, path: Path, threads: int = 0, max_positions: int = 0, cut: int | None = None):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if threads > 0:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
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

    def _run(self, ids: np.ndarray, state: dict, past: int):
        """ids (1, T) -> (logits of the last position (V,), new state)."""
        if self.kind == "lstm":
            logits, h, c = self.session.run(None, {"input_ids": ids, **state})
            return logits[0, -1], {"h0": h, "c0": c}
        T = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((1, past + T), np.int64),
                "position_ids": np.arange(past, past + T, dtype=np.int64)[None], **state}
        out = self.session.run(None, feed)
        names = [o.name for o in self.session.get_outputs()]
        new = {n.replace("present.", "past_key_values."): v for n, v in zip(names, out) if n.startswith("present.")}
        return out[0][0, -1], new

    def pick(self, logits: np.ndarray) -> int:
        return int(np.argmax(logits[: self.cut]))

    def check_room(self, prompt_len: int, n: int) -> None:
        if self.kind == "decoder" and self.max_positions and prompt_len + n > self.max_positions:
            raise PipelineError(f"a prompt of {prompt_len} tokens + {n} new tokens does not fit the exported model's "
                                f"{self.max_positions} positions (lm.max_cache); shorten the prompt or raise "
                                f"lm.max_cache and re-run distill")

    def generate(self, prompt: list[int], n: int, timings: dict | None = None) -> list[int]:
        """n greedy model ids after prompt (model ids). timings, if given, gets ttft_s and decode_s."""
        self.check_room(len(prompt), n)
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
        rows = []
        for row in ids:
            state = self._empty()
            if self.kind == "lstm":
                rows.append(self.session.run(None, {"input_ids": row[None], **state})[0][0])
                continue
            T = len(row)
            feed = {"input_ids": row[None], "attention_mask": np.ones((1, T), np.int64),
                    "position_ids": np.arange(T, dtype=np.int64)[None], **state}
            rows.append(self.session.run(None, feed)[0][0])
        return np.stack(rows)


def check_greedy(torch_tokens: list[int], ort_tokens: list[int], name: str, must_match: bool) -> dict:
    """Compare two greedy decodes; an fp32 export that diverges fails the stage."""
    same = next((i for i, (a, b) in enumerate(zip(torch_tokens, ort_tokens)) if a != b), len(torch_tokens))
    result = {"tokens": len(torch_tokens), "matching_prefix": same, "match": same == len(torch_tokens)}
    if must_match and not result["match"]:
        raise PipelineError(f"{name}: the ONNX greedy decode diverges from PyTorch at token {same + 1} of "
                            f"{len(torch_tokens)} (PyTorch {torch_tokens[same]}, ONNX {ort_tokens[same]}); the export "
                            f"is wrong - try another quantize.opset")
    return result
