"""PyTorch classifier -> Core ML .mlpackage (mlprogram): fp16, int8 weights, 4-bit palettized weights. The
targets, weight compression, saving and prediction check here serve the generation models too
(export/coreml_stateful.py converts those).

Path: torch.jit.trace -> coremltools.convert. torch.export does not convert the LSTM (NOTES), so one path
serves all models. Batch is fixed at 1 (an app classifies one text at a time); the sequence length is
flexible (see sequence_shapes for why enumerated shapes where the target allows them).
"""
from __future__ import annotations

import contextlib
import functools
import json
import platform
import signal
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch import nn

from export.onnx_export import op_name
from pipeline.errors import PipelineError, tree_bytes

# Finite, fp16-friendly attention fill: float32's min becomes -inf in fp16 and -inf - -inf gives NaN in
# softmax; exp(-1e4) underflows to exactly 0 in both fp16 and fp32, so the mask still removes padding.
MASK_FILL = -1.0e4
COREML_VARIANTS = ("fp16", "int8", "palettized-4bit")
# The deployment targets an mlprogram can have in coremltools 9 (ct.target members from iOS15 / macOS12 on, with
# the spec version each stands for): named here so the config check runs without importing coremltools (a test
# keeps the two in step). Spec 9 (iOS18 / macOS15) is the first with two enumerated inputs and with states.
COREML_TARGETS = {"iOS15": 6, "iOS16": 7, "iOS17": 8, "iOS18": 9, "iOS26": 10,
                  "macOS12": 6, "macOS13": 7, "macOS14": 8, "macOS15": 9, "macOS26": 10}
IOS18_SPEC = 9
SHAPE_MODES = ("auto", "enumerated", "range")


class CoreMLBert(nn.Module):
    """BertForSequenceClassification with an explicit additive mask built from MASK_FILL (not finfo.min)."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        bert = self.hf.bert
        add = (1.0 - attention_mask.to(torch.float32))[:, None, None, :] * MASK_FILL  # (B, 1, 1, T)
        h = bert.embeddings(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids))  # (B, T, D)
        h = bert.encoder(h, attention_mask=add, return_dict=False)[0]  # (B, T, D)
        return self.hf.classifier(bert.pooler(h))  # (B, C)


class CoreMLRNN(nn.Module):
    """distill.lstm.RNNClassifier's forward with Core ML-friendly indexing. The per-row reversal of the
    valid tokens is a one-hot permutation matmul built from float positions (a cumsum of the mask), not
    an integer gather over arange(traced size): coremltools cannot convert the dynamic Python ints that
    tracing leaves behind, and casts the gather indices to fp. Positions stay exact in fp16 (< 2048)."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.to(torch.float32).unsqueeze(-1)  # (B, T, 1)
        lengths = mask.sum(1).clamp(min=1.0)  # (B, 1)
        pos = torch.cumsum(torch.ones_like(mask[..., 0]), 1) - 1.0  # (B, T): 0..T-1
        src = torch.where(pos < lengths, lengths - 1.0 - pos, pos)  # (B, T): where row step t reads from
        perm = (src.unsqueeze(2) == pos.unsqueeze(1)).to(torch.float32)  # (B, T, T) one-hot rows
        # (B, T, T) @ (B, T, C): each row's valid steps reversed; the dropouts are identities in eval mode
        return self.rnn.pooled(input_ids, mask, lambda t: torch.bmm(perm, t))  # (B, C)


def traceable(loaded, model_name: str = "model") -> nn.Module:
    """The module to trace, with the same weights and (checked) the same outputs as the source model."""
    from distill.lstm import RNNClassifier

    if isinstance(loaded.model, RNNClassifier):
        return CoreMLRNN(loaded.model).eval()
    if loaded.kind != "hf":
        return loaded.model.eval()  # any other (input_ids, attention_mask) -> logits module, traced as is
    hf = loaded.model.hf
    if getattr(hf.config, "model_type", "") != "bert" or not hasattr(hf, "bert"):
        raise PipelineError(f"{model_name} -> coreml: only BERT-type transformers have a Core ML wrapper here, "
                            f"not '{hf.config.model_type}'; leave {model_name} out of export.coreml_models")
    return CoreMLBert(hf).eval()


def deployment_target(name: str):
    """coremltools' target of that name: one of COREML_TARGETS, checked when the config loads."""
    import coremltools as ct

    return ct.target[name]


def sequence_shapes(mode: str, lengths: list[int], target, max_length: int) -> tuple[object, str]:
    """(coremltools shape for (1, T), why). Enumerated shapes let the Neural Engine compile a fixed
    program per length (a RangeDim model usually falls back to CPU/GPU); with two inputs coremltools
    needs iOS18 for them, so "auto" uses a RangeDim below iOS18 and says so."""
    import coremltools as ct

    from export.padding import allowed_lengths

    lengths = allowed_lengths(lengths, max_length)
    chosen = mode
    if mode == "auto":
        mode = "enumerated" if target >= ct.target.iOS18 else "range"
    if mode == "enumerated":  # iOS18 or later: the config's check (config_rules._coreml_shapes)
        shape = ct.EnumeratedShapes(shapes=[[1, n] for n in lengths], default=[1, lengths[-1]])
        return shape, (f"enumerated lengths {lengths}: fixed shapes the Neural Engine can compile ahead "
                       f"(padding up to the next length)")
    shape = ct.Shape(shape=(1, ct.RangeDim(lower_bound=1, upper_bound=max_length, default=max_length)))
    why = ("the deployment target is below iOS18, where two enumerated inputs are not allowed" if chosen == "auto"
           else "chosen by export.coreml_shapes")
    return shape, (f"range 1..{max_length}: {why}; Core ML may then run it on CPU/GPU rather than the "
                   f"Neural Engine")


@contextlib.contextmanager
def keep_interrupts():
    """A Ctrl-C during coremltools' convert still stops the run: the converter wraps a sympy solve in a bare
    `except:`, which swallowed the KeyboardInterrupt and carried on with another shape path, so the stage
    finished as if never interrupted. The signal is remembered here and raised again once convert returns."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return
    hit: list[int] = []

    def handler(signum, frame):
        hit.append(signum)
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if hit:
        raise KeyboardInterrupt


@contextlib.contextmanager
def quiet():
    """coremltools' console output that says nothing to act on: a progress bar per conversion pass (about a
    dozen lines per file, for passes of a few milliseconds; the stage prints one line per file) and numpy's
    overflow warnings from narrowing constants to fp16: coremltools keeps any op whose constants are past fp16's
    range in fp32 (FP16ComputePrecision.fp16_overflow) and narrows to inf only values of 1e38 and up on purpose
    (attention masks), so the warnings are about those."""
    import tqdm

    from unittest import mock

    with mock.patch.object(tqdm.tqdm, "__init__", functools.partialmethod(tqdm.tqdm.__init__, disable=True)), \
            np.errstate(over="ignore", invalid="ignore"):
        yield


def convert(loaded, model_name: str, target_name: str, shapes_mode: str, lengths: list[int], tokenizer_name: str):
    """fp16 mlprogram with metadata. Returns (MLModel, shape note)."""
    import coremltools as ct

    target = deployment_target(target_name)
    module = traceable(loaded, model_name)
    T = min(16, loaded.max_length)
    ids = torch.full((1, T), 5, dtype=torch.long)  # (1, T)
    mask = torch.ones(1, T, dtype=torch.long)  # (1, T)
    with torch.no_grad():
        traced = torch.jit.trace(module, (ids, mask), check_trace=False)
    shape, note = sequence_shapes(shapes_mode, lengths, target, loaded.max_length)
    inputs = [ct.TensorType(name=name, shape=shape, dtype=np.int32) for name in ("input_ids", "attention_mask")]
    try:
        with quiet(), keep_interrupts():
            ml = ct.convert(traced, inputs=inputs, outputs=[ct.TensorType(name="logits")], convert_to="mlprogram",
                            minimum_deployment_target=target, compute_precision=ct.precision.FLOAT16)
    except (NotImplementedError, RuntimeError, ValueError, TypeError) as e:
        op = op_name(str(e), r"op '?(\w+)'?", r"aten::(\w+)")
        raise PipelineError(f"{model_name} -> coreml: operator {op} cannot be expressed in Core ML "
                            f"({str(e).splitlines()[0][:200]}); leave {model_name} out of export.coreml_models "
                            f"or change the model to avoid {op}") from None
    # the tokenizer's files ship beside the ONNX files, in quantize/<model>/tokenizer; the labels as a JSON
    # list, so a label with a comma in it ("arts, culture") reads back whole
    ml.user_defined_metadata.update(labels=json.dumps(list(loaded.labels)), max_length=str(loaded.max_length),
                                    tokenizer=tokenizer_name, pad_token_id=str(loaded.pad_id), sequence_shapes=note)
    ml.short_description = f"pocketformer {model_name}: text classifier ({', '.join(loaded.labels)})"
    return ml, note


def compress(ml, variant: str, min_weight_elements: int = 2048):
    """fp16 as converted, or int8 linear (per-channel symmetric) / 4-bit k-means palettized weights.
    Weights with fewer than min_weight_elements elements stay fp16 (coremltools' default threshold)."""
    import coremltools.optimize.coreml as cto

    if variant == "fp16":
        return ml
    if variant in COREML_VARIANTS and (largest := largest_weight(ml)) <= min_weight_elements:
        # coremltools compresses a weight of more than the threshold's elements: none here, and the package
        # would fail its read-back check after the conversion (a tiny model at the default)
        raise PipelineError(f"Core ML {variant}: the model's largest weight has {largest} elements, not more than "
                            f"export.coreml_min_weight_elements = {min_weight_elements}, so no weight would be "
                            f"compressed; --set export.coreml_min_weight_elements={max(largest - 1, 0)} or leave "
                            f"'{variant}' out of export.coreml_variants")
    if variant == "int8":
        op = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", weight_threshold=min_weight_elements)
        with quiet():
            return cto.linear_quantize_weights(ml, config=cto.OptimizationConfig(global_config=op))
    if variant == "palettized-4bit":
        # coremltools' "kmeans" mode needs scikit-learn (not a dependency here): the same 1-D k-means,
        # written in numpy, goes in as a custom LUT function.
        op = cto.OpPalettizerConfig(mode="custom", lut_function=kmeans_lut, weight_threshold=min_weight_elements)
        with quiet():
            return cto.palettize_weights(ml, config=cto.OptimizationConfig(global_config=op))
    raise PipelineError(f"unknown Core ML variant '{variant}'; known: {', '.join(COREML_VARIANTS)}")


def largest_weight(ml) -> int:
    """Elements of the largest constant tensor of an mlprogram, read from the spec's shapes (not the values)."""
    import math

    return max((math.prod(d.constant.size for d in out.type.tensorType.dimensions)
                for fn in ml.get_spec().mlProgram.functions.values() for block in fn.block_specializations.values()
                for op in block.operations if op.type == "const" for out in op.outputs), default=0)


def kmeans_lut(weight: np.ndarray, nbits: int = 4, iterations: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means in 1-D: (lut (2**nbits,), indices (weight.size,)) minimising squared error."""
    w = weight.astype(np.float32).ravel()  # (N,)
    k = 1 << nbits
    centers = np.quantile(w, (np.arange(k) + 0.5) / k).astype(np.float32)  # (k,) quantile init
    for _ in range(iterations):
        centers = np.unique(centers)  # sorted; duplicate centres (flat weights) merge
        idx = np.searchsorted((centers[1:] + centers[:-1]) / 2, w)  # nearest centre per weight
        sums = np.bincount(idx, weights=w, minlength=len(centers))
        counts = np.bincount(idx, minlength=len(centers))
        centers = np.where(counts > 0, sums / np.maximum(counts, 1), centers).astype(np.float32)
    centers = np.unique(centers)
    idx = np.searchsorted((centers[1:] + centers[:-1]) / 2, w)
    lut = np.concatenate([centers, np.full(k - len(centers), centers[-1], np.float32)])  # pad to 2**nbits
    return lut.astype(weight.dtype), idx.astype(np.uint8)  # LUT in the weight's dtype (fp16 here)


def save(ml, path: Path, metadata: dict[str, object]) -> int:
    """Write ml with metadata (values as strings) to path; returns the package's size in bytes."""
    for k, v in metadata.items():
        ml.user_defined_metadata[k] = str(v)
    ml.save(str(path))
    return tree_bytes(path)


def can_predict() -> tuple[bool, str]:
    """(True, "") on macOS; elsewhere Core ML cannot run a package, and the reason says so."""
    if platform.system() == "Darwin":
        return True, ""
    return False, f"Core ML prediction needs macOS (this is {platform.system()})"


def spec_summary(path: Path) -> dict:
    """Inputs, outputs, metadata and weight-compression ops read back from the saved package."""
    import coremltools as ct

    spec = ct.utils.load_spec(str(path))
    desc = spec.description
    ops = dict(Counter(op.type for fn in spec.mlProgram.functions.values()
                       for block in fn.block_specializations.values() for op in block.operations))
    array_type = ct.proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name  # FLOAT16, INT32, ...
    dtypes = {f.name: array_type(f.type.multiArrayType.dataType).lower().replace("double", "float64")
              for f in (*desc.input, *desc.output) if f.type.HasField("multiArrayType")}
    return {"inputs": [i.name for i in desc.input], "outputs": [o.name for o in desc.output], "dtypes": dtypes,
            "metadata": dict(desc.metadata.userDefined), "spec_version": spec.specificationVersion, "ops": ops}


def _json_list(text: str) -> list | None:
    try:
        return json.loads(text)
    except ValueError:
        return None


def verify_package(path: Path, loaded, variant: str, model_name: str) -> dict:
    """Read the saved package back and check what an app relies on; raises naming what is wrong."""
    s = spec_summary(path)
    problems = []
    if s["inputs"] != ["input_ids", "attention_mask"] or s["outputs"] != ["logits"]:
        problems.append(f"inputs {s['inputs']} / outputs {s['outputs']}")
    md = s["metadata"]
    if _json_list(md.get("labels", "")) != list(loaded.labels) or md.get("max_length") != str(loaded.max_length) \
            or not md.get("tokenizer"):
        problems.append(f"metadata {md}")
    wanted = {"int8": ("constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"),
              "palettized-4bit": ("constexpr_lut_to_dense",)}.get(variant, ())
    compressed = sum(n for op, n in s["ops"].items() if op in wanted)
    if wanted and not compressed:
        problems.append(f"no {'/'.join(wanted)} op: no weight was compressed (export.coreml_min_weight_elements "
                        f"may exceed every weight)")
    if problems:
        raise PipelineError(f"{model_name} -> coreml {variant}: {path.name} failed its read-back check: "
                            f"{'; '.join(problems)}")
    return {"inputs": s["inputs"], "outputs": s["outputs"], "spec_version": s["spec_version"],
            "metadata_keys": sorted(k for k in md if not k.startswith("com.github")),
            "compressed_weight_ops": compressed}


def predict_check(path: Path, ref_fn, tokenizer, texts, max_length: int, lengths: list[int], minimum: float,
                  what: str) -> dict:
    """On macOS: argmax agreement of Core ML predictions (one text at a time, padded up to the next allowed
    length) with the PyTorch model. Elsewhere Core ML cannot run, and the check says so."""
    ok, why = can_predict()
    if not ok:
        return {"kind": "argmax_agreement", "skipped": True, "reason": why}
    import coremltools as ct

    from distill.batching import encode

    from export.checks import agreeing
    from export.padding import allowed_lengths, pad

    ml = ct.models.MLModel(str(path))
    ids, _ = encode(tokenizer, texts, max_length)
    allowed = allowed_lengths(lengths, max_length)
    agree = 0
    for seq in ids:
        x, m = pad(list(seq), allowed, tokenizer.pad_token_id or 0)  # (1, T) each, the rule every caller uses
        got = ml.predict({"input_ids": x, "attention_mask": m})["logits"]
        ref = ref_fn(x.astype(np.int64), m.astype(np.int64))
        agree += int(agreeing(np.asarray(got).reshape(1, -1), np.asarray(ref).reshape(1, -1))[0])
    value = agree / len(ids)
    result = {"kind": "argmax_agreement", "value": value, "tolerance": minimum, "passed": value >= minimum,
              "inputs": f"{len(ids)} test texts, batch 1"}
    if value < minimum:  # a lossy package: recorded as failed by the stage, never shipped
        result["reason"] = (f"{what}: Core ML argmax agrees with PyTorch on only {value:.1%} of {len(ids)} test "
                            f"texts; the minimum is {minimum:.1%} (quantize.min_argmax_agreement)")
    return result
