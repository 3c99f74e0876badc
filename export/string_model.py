"""A string-in classifier: the tokenizer as an onnxruntime-extensions op inside the ONNX graph, so an app
passes raw text and gets label scores, and cannot tokenize differently from training.

Graph: text (string, [1]) -> StringRegexReplace (BERT's text cleaning) -> BertTokenizer (ai.onnx.contrib;
HF-style lower-casing, accent stripping and truncation to max_length with [SEP] kept) -> input_ids,
attention_mask (N,) -> Unsqueeze -> (1, N) -> the classifier's own nodes -> logits (1, C) -> Softmax -> probabilities (1, C). One text per call: the
tokenizer op concatenates a batch of strings into one sequence, so batching belongs outside the graph.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError

TEXT_INPUT = "text"
# BERT's normalizer (clean_text) drops U+FFFD, format chars (Cf, e.g. zero-width joiners) and control chars
# other than tab / newline / carriage return before splitting; the extensions op keeps them and makes
# [UNK]s (13% of the demo's tweets carry U+FFFD from undecodable bytes), so a regex node removes them first.
CLEAN_PATTERN = r"[\x{FFFD}\p{Cf}\x{0000}-\x{0008}\x{000B}\x{000C}\x{000E}-\x{001F}\x{007F}-\x{009F}]"
OUTPUTS = ("logits", "probabilities")
CONTRIB = "ai.onnx.contrib"


def tokenizer_node(tokenizer, max_length: int):
    """The extensions tokenizer node for an HF tokenizer (BertTokenizerFast / BertTokenizer only)."""
    from onnxruntime_extensions import gen_processing_models

    try:
        pre, _ = gen_processing_models(tokenizer, pre_kwargs={"max_length": max_length})
    except Exception as e:  # extensions raises plain ValueError / NotImplementedError for unknown classes
        raise PipelineError(f"onnxruntime-extensions cannot build an in-graph tokenizer for "
                            f"{type(tokenizer).__name__} ({e}); pick a model with a BERT WordPiece tokenizer, or "
                            f"set bundle.model to one") from None
    nodes = [n for n in pre.graph.node if n.domain == CONTRIB]
    if len(pre.graph.node) != 1 or not nodes:
        raise PipelineError(f"{type(tokenizer).__name__}: expected one tokenizer op from onnxruntime-extensions, got "
                            f"{[n.op_type for n in pre.graph.node]}; only BERT WordPiece tokenizers are supported")
    node = nodes[0]
    # HF strips accents when it lower-cases and strip_accents is unset (None); the generator writes 0 for None
    init = getattr(tokenizer, "init_kwargs", {}) or {}
    if init.get("strip_accents") is None and init.get("do_lower_case", False):
        for a in node.attribute:
            if a.name == "strip_accents":
                a.i = 1
    return node, [o.name for o in pre.graph.output]


def build_string_model(model_path: Path, tokenizer, max_length: int, out: Path) -> Path:
    """Write out (.onnx): tokenizer node + the classifier at model_path, inputs renamed to the tokenizer's."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    g = model.graph
    names = [i.name for i in g.input]
    if names[:2] != ["input_ids", "attention_mask"] or [o.name for o in g.output][:1] != ["logits"]:
        raise PipelineError(f"{model_path}: expected inputs input_ids, attention_mask and output logits, got "
                            f"{names} -> {[o.name for o in g.output]}; re-run the quantize stage")
    tok, tok_outputs = tokenizer_node(tokenizer, max_length)
    renamed = {name: f"tokenizer/{name}" for name in tok_outputs}
    tok.output[:] = [renamed[n] for n in tok.output]
    tok.name = "tokenizer"
    tok.input[:] = ["tokenizer/clean_text"]
    axes = helper.make_tensor("tokenizer/axis0", TensorProto.INT64, [1], [0])
    pattern = helper.make_tensor("tokenizer/clean_pattern", TensorProto.STRING, [1], [CLEAN_PATTERN.encode()])
    rewrite = helper.make_tensor("tokenizer/clean_rewrite", TensorProto.STRING, [1], [b""])
    clean = helper.make_node("StringRegexReplace", [TEXT_INPUT, pattern.name, rewrite.name], ["tokenizer/clean_text"],
                             domain=CONTRIB, name="clean_text", global_replace=1)
    glue = [clean, tok,
            helper.make_node("Unsqueeze", [renamed["input_ids"], axes.name], ["input_ids"], name="batch_ids"),
            helper.make_node("Unsqueeze", [renamed["attention_mask"], axes.name], ["attention_mask"],
                             name="batch_mask"),
            helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1, name="probabilities")]
    n_labels = g.output[0].type.tensor_type.shape.dim[-1].dim_value or None
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, n_labels]) for name in OUTPUTS]
    graph = helper.make_graph(glue[:4] + list(g.node) + glue[4:], "string_in_classifier",
                              [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.STRING, [1])], outputs,
                              initializer=[axes, pattern, rewrite, *g.initializer], value_info=list(g.value_info))
    opsets = [o for o in model.opset_import if o.domain != CONTRIB] + [helper.make_opsetid(CONTRIB, 1)]
    merged = helper.make_model(graph, opset_imports=opsets, producer_name="pocketformer")
    merged.ir_version = model.ir_version
    onnx.checker.check_model(merged)  # catches a dangling name before any runtime sees the file
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(merged, str(out))
    return out


def tokenizer_graph(string_model):
    """The text cleaning + tokenizer front of a string-in model (onnx ModelProto) as its own model, with the
    tokenizer's outputs (input_ids, token_type_ids, attention_mask, offset_mapping) as graph outputs."""
    import onnx

    nodes = list(string_model.graph.node)
    tok = next(n for n in nodes if n.op_type == "BertTokenizer")
    front = nodes[: nodes.index(tok) + 1]
    used = {i for n in front for i in n.input}
    outs = [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.INT64, None) for o in tok.output]
    model = onnx.helper.make_model(
        onnx.helper.make_graph(front, "tokenizer", [string_model.graph.input[0]], outs,
                               initializer=[t for t in string_model.graph.initializer if t.name in used]),
        opset_imports=list(string_model.opset_import))
    model.ir_version = string_model.ir_version
    return model


def token_id_mismatches(string_path: Path, tokenizer, texts: list[str], max_length: int) -> int:
    """Texts whose in-graph token ids differ from the HF tokenizer's (the label check can hide these)."""
    import onnx

    from export.ort_session import ort_session

    front = tokenizer_graph(onnx.load(str(string_path)))
    sess = ort_session(front.SerializeToString(), custom_ops=True, quiet=False, fix=None)
    want = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    got = [sess.run([front.graph.output[0].name], {TEXT_INPUT: np.array([t], dtype=object)})[0].tolist()
           for t in texts]
    return sum(a != b for a, b in zip(got, want))


def predict_strings(session, texts: list[str]) -> np.ndarray:
    """(N, C) logits, one call per text (the graph takes one text)."""
    rows = [session.run(["logits"], {TEXT_INPUT: np.array([t], dtype=object)})[0][0].copy() for t in texts]
    return np.stack(rows) if rows else np.zeros((0, 0), np.float32)


def agreement(string_logits: np.ndarray, pair_logits: np.ndarray) -> dict:
    """How often the string-in model picks the same label as tokenizer + model, and the largest logit gap."""
    same = string_logits.argmax(-1) == pair_logits.argmax(-1)  # (N,)
    return {"texts": int(len(same)), "agreement": float(same.mean()) if len(same) else 0.0,
            "disagreements": int((~same).sum()), "max_abs_logit_diff": float(np.abs(string_logits - pair_logits).max())
            if len(same) else 0.0}
