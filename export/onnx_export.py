"""PyTorch models -> fp32 ONNX graphs (legacy TorchScript exporter, dynamic batch and sequence axes):
classifiers (input_ids, attention_mask -> logits), and for generation decoders with their KV cache (optimum)
and the LSTM LM with its state.

The legacy exporter (dynamo=False) is used on purpose: ORT's transformer optimizer fuses Attention /
SkipLayerNormalization / Gelu only on its graphs, and its native LSTM op is what quantize_dynamic turns
into DynamicQuantizeLSTM (NOTES, "Export and quantization").
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import torch
from torch import nn

from pipeline.errors import PipelineError

INPUT_NAMES = ["input_ids", "attention_mask"]
OUTPUT_NAMES = ["logits"]
DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                "logits": {0: "batch"}}
# The opsets every model and variant of the pipeline exports and quantizes at, checked when the config loads:
# transformers' attention exports scaled_dot_product_attention, which needs 14; above 17, ONNX Runtime's symbolic
# shape inference (the pre-processing int8-static runs) fails on the LSTM's graph (onnxruntime 1.32). The 16-bit
# QDQ files are raised to 21 by the quantizer itself, whatever this is (their rows record it).
MIN_OPSET, MAX_OPSET = 14, 17


def opset_problem(opset: int) -> str | None:
    """Why quantize.opset cannot be exported, or None: checked when the config loads (pipeline/config_rules.py)."""
    import onnx.defs

    top = min(onnx.defs.onnx_opset_version(), torch.onnx._constants.ONNX_MAX_OPSET, MAX_OPSET)
    if MIN_OPSET <= opset <= top:
        return None
    return (f"quantize.opset = {opset} is outside {MIN_OPSET}..{top} (BERT attention needs {MIN_OPSET}; above {top} "
            f"the int8-static pre-processing fails on the LSTM's graph); set quantize.opset = 17")


def file_opset(path: Path) -> int:
    """The default-domain opset a written ONNX file declares: what its row records, not quantize.opset (ONNX
    Runtime's quantizer raises a 16-bit QDQ file to opset 21, where Quantize/DequantizeLinear take uint16)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def example_inputs(batch: int = 2, seq: int = 8, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Dummy (input_ids, attention_mask) with one padded row, so the traced graph keeps the mask path."""
    ids = torch.randint(5, 20, (batch, seq), dtype=torch.long)  # (B, T), ids inside every vocab used here
    mask = torch.ones(batch, seq, dtype=torch.long)  # (B, T)
    mask[-1, seq // 2:] = 0
    ids[mask == 0] = pad_id
    return ids, mask


def export_onnx(model: nn.Module, out: Path, opset: int, model_name: str, pad_id: int = 0,
                cls_only: bool = False) -> Path:
    """Write model as ONNX to out; raises PipelineError naming the op when the opset cannot express it.
    cls_only: a BERT-family classifier's last layer computes the [CLS] position only (export/cls_only.py);
    other models are exported as they are."""
    from export.cls_only import cls_only_last_layer

    model = model.eval()  # the legacy exporter restores the module's mode: a train-mode wrapper adds dropout
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Trace-time warnings (constants captured, the LSTM batch-size caution) are noise here: every
        # exported file is compared with the PyTorch model on real padded batches right after.
        with torch.no_grad(), warnings.catch_warnings(), cls_only_last_layer(model, cls_only):
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message=".*batch_size other than 1.*")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            torch.onnx.export(model, example_inputs(pad_id=pad_id), str(out), dynamo=False,
                              input_names=INPUT_NAMES, output_names=OUTPUT_NAMES, dynamic_axes=DYNAMIC_AXES,
                              opset_version=opset, do_constant_folding=True)
    except torch.onnx.errors.OnnxExporterError as e:  # UnsupportedOperatorError and SymbolicValueError
        op = op_name(str(e), r"operator '([\w:.]+)'", r"(aten::\w+|prim::\w+|onnx::\w+)")
        first = str(e).strip().split("\n")[0][:300]
        raise PipelineError(f"{model_name} -> onnx (opset {opset}): operator {op} cannot be exported "
                            f"({first}); raise quantize.opset or change the model so it avoids {op}") from None
    return out


def op_name(message: str, *patterns: str) -> str:
    """The operator an exporter's error names: the first group of the first pattern found in it."""
    for p in patterns:
        if m := re.search(p, message):
            return m.group(1)
    return "<unknown op>"


# Generation graphs. Decoders carry their KV cache as inputs / outputs (optimum's text-generation-with-past
# names: past_key_values.{i}.key/value -> present.{i}.key/value); the LSTM LM its state (h0, c0 -> h, c).
# Llama's export needs opset >= 18 in optimum-onnx (lower opsets warn and can mis-export the attention mask).
MIN_DECODER_OPSET = 18


def export_decoder(model_folder: Path, out_dir: Path, opset: int) -> Path:
    """model_folder (an HF causal LM folder) -> out_dir/model.onnx with KV cache inputs and outputs."""
    from optimum.exporters.onnx import main_export

    try:
        main_export(str(model_folder), output=str(out_dir), task="text-generation-with-past",
                    opset=max(opset, MIN_DECODER_OPSET), do_validation=False, device="cpu")
    except Exception as e:  # optimum raises many types; the message names the op or config at fault
        if model_type := _no_decoder_export(model_folder):  # no opset helps: Optimum has no export for the type
            raise PipelineError(f"ONNX export of the decoder in {model_folder} failed: Optimum's ONNX exporter has no "
                                f"KV-cache export (text-generation-with-past) for model type '{model_type}'. Leave "
                                f"this model out of quantize.models (a teacher: quantize.models = [\"student\", "
                                f"\"lstm\"]), or use a teacher of a type Optimum exports (llama, qwen2, gpt2, ...)"
                                ) from None
        raise PipelineError(f"ONNX export of the decoder in {model_folder} failed ({type(e).__name__}: {e}); "
                            f"try a higher quantize.opset") from None
    for extra in out_dir.iterdir():  # optimum copies the tokenizer and config next to the graph
        if extra.name != "model.onnx" and not extra.name.startswith("model.onnx"):
            extra.unlink()
    return out_dir / "model.onnx"


def _no_decoder_export(model_folder: Path) -> str | None:
    """The folder's model type when Optimum's ONNX exporter has no text-generation-with-past export for it, else
    None (also when that cannot be told: the caller keeps the exporter's own message)."""
    import optimum.exporters.onnx  # noqa: F401  (registers the ONNX export configs TasksManager lists)
    from optimum.exporters.tasks import TasksManager
    from transformers import AutoConfig

    try:
        model_type = AutoConfig.from_pretrained(model_folder).model_type
    except Exception:
        return None
    for name in dict.fromkeys((model_type, model_type.replace("_", "-"))):
        try:
            tasks = TasksManager.get_supported_tasks_for_model_type(name, exporter="onnx", library_name="transformers")
        except KeyError:  # a type the registry does not know
            continue
        return None if "text-generation-with-past" in tasks else model_type
    return model_type


def export_lstm_lm(model: nn.Module, path: Path, opset: int) -> Path:
    """LSTM LM -> ONNX with dynamic batch and sequence; the state passes through as inputs/outputs."""
    model = model.eval()  # the legacy exporter keeps the module's mode: dropout must be off
    x = torch.zeros((1, 4), dtype=torch.int64)
    h, c = model.zero_state(1)
    torch.onnx.export(model, (x, h, c), str(path), dynamo=False, opset_version=opset,
                      input_names=["input_ids", "h0", "c0"], output_names=["logits", "h", "c"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "h0": {1: "batch"}, "c0": {1: "batch"},
                                    "logits": {0: "batch", 1: "sequence"}, "h": {1: "batch"}, "c": {1: "batch"}})
    return path
