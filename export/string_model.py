"""A string-in classifier: the tokenizer as an onnxruntime-extensions op inside the ONNX graph, so an app
passes raw text and gets label scores, and cannot tokenize differently from training.

Graph: text (string, [1]) -> the tokenizer front -> input_ids, attention_mask (N,) -> Unsqueeze -> (1, N) -> the
classifier's own nodes -> logits (1, C) -> Softmax -> probabilities (1, C). One text per call: the tokenizer op
concatenates a batch of strings into one sequence, so batching belongs outside the graph.

The front, by what the tokenizer's tokenizer.json says it does (not by its class name, so ELECTRA's or
MobileBERT's copy of BERT's tokenizer counts as BERT's):
- WordPiece behind BERT's normalizer and pre-tokenizer (BERT, DistilBERT, ELECTRA, MobileBERT, MPNet):
  StringRegexReplace (BERT's text cleaning) -> BertTokenizer (ai.onnx.contrib; HF-style lower-casing, accent
  stripping, the family's own [CLS] / [SEP] / [UNK] tokens, truncation to max_length with the last one kept);
- RoBERTa's byte-level BPE: RobertaTokenizer (ai.onnx.contrib) -> a cut to max_length keeping </s>.
Every other tokenizer (sentencepiece XLM-R / CamemBERT / ALBERT / DeBERTa-v2, DeBERTa's [CLS] BPE) has no
op that tokenizes as it does: `unsupported` says why, and the bundle ships without a string-in model.
"""
from __future__ import annotations

import json
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


def _backend(tokenizer) -> dict:
    """A fast tokenizer's tokenizer.json content ({} for a slow one: nothing to read its pipeline from)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return json.loads(backend.to_str()) if backend is not None else {}


def _cls_sep(post: dict) -> tuple[str, str] | None:
    """The (first, last) special tokens a single text is wrapped in, from tokenizer.json's post_processor;
    None for any other template (a tokenizer op only adds one token at each end)."""
    if post.get("type") in ("BertProcessing", "RobertaProcessing"):
        return post["cls"][0], post["sep"][0]
    single = post.get("single") or []
    if post.get("type") == "TemplateProcessing" and len(single) == 3 and "Sequence" in single[1] \
            and all("SpecialToken" in single[i] for i in (0, 2)):
        return single[0]["SpecialToken"]["id"], single[2]["SpecialToken"]["id"]
    return None


def wordpiece_settings(tokenizer) -> dict | None:
    """BERT's tokenization in another family's class (ELECTRA, DistilBERT, MobileBERT, MPNet, ...): a WordPiece
    model behind BERT's normalizer and pre-tokenizer, one special token at each end, ids 0..n-1 with no gap.
    Its settings as the extensions BertTokenizer op takes them, or None when the tokenizer is anything else."""
    spec = _backend(tokenizer)
    model, norm = spec.get("model") or {}, spec.get("normalizer") or {}
    ends = _cls_sep(spec.get("post_processor") or {})
    if (model.get("type"), norm.get("type"), (spec.get("pre_tokenizer") or {}).get("type")) != \
            ("WordPiece", "BertNormalizer", "BertPreTokenizer") or ends is None:
        return None
    vocab = model["vocab"]
    # the op refuses a vocab without its pad and mask tokens: the family's own ones (MPNet: <pad>, <mask>)
    pad, mask = (getattr(tokenizer, k, None) or model["unk_token"] for k in ("pad_token", "mask_token"))
    if sorted(vocab.values()) != list(range(len(vocab))) or not {*ends, model["unk_token"], pad, mask} <= vocab.keys():
        return None  # the op numbers vocab lines 0, 1, ...: a gap or a missing special token would shift ids
    lower = bool(norm.get("lowercase"))
    # HF strips accents when it lower-cases and strip_accents is unset (null)
    strip = lower if norm.get("strip_accents") is None else bool(norm["strip_accents"])
    return {"vocab_file": "\n".join(sorted(vocab, key=vocab.get)), "do_lower_case": int(lower),
            "strip_accents": int(strip), "tokenize_chinese_chars": int(bool(norm.get("handle_chinese_chars"))),
            "suffix_indicator": model.get("continuing_subword_prefix") or "##", "unk_token": model["unk_token"],
            "cls_token": ends[0], "sep_token": ends[1], "pad_token": pad, "mask_token": mask,
            "clean_text": bool(norm.get("clean_text"))}


def _roberta_files(tokenizer, folder: Path):
    """The slow RobertaTokenizer the extensions op is generated from (it refuses the fast class), written
    from the fast tokenizer's own vocab and merges."""
    from transformers import RobertaTokenizer

    model = _backend(tokenizer)["model"]
    (folder / "vocab.json").write_text(json.dumps(model["vocab"]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return RobertaTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"),
                            **{k: str(v) for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)})


def is_roberta_bpe(tokenizer) -> bool:
    """RoBERTa's byte-level BPE exactly: no normalizer, ByteLevel without a prefix space, <s> ... </s>, which
    the extensions RobertaTokenizer op implements (DeBERTa's [CLS] ... [SEP] BPE it does not)."""
    spec = _backend(tokenizer)
    pre = spec.get("pre_tokenizer") or {}
    return ((spec.get("model") or {}).get("type") == "BPE" and spec.get("normalizer") is None
            and pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space")
            and _cls_sep(spec.get("post_processor") or {}) == ("<s>", "</s>"))


def unsupported(tokenizer) -> str | None:
    """Why no in-graph tokenizer can reproduce this tokenizer (None when one can): the string-in model is
    built for BERT-style WordPiece and RoBERTa byte-level BPE only."""
    if wordpiece_settings(tokenizer) is not None or is_roberta_bpe(tokenizer):
        return None
    spec = _backend(tokenizer)
    kind = (spec.get("model") or {}).get("type") or "a slow (Python-only) tokenizer"
    return (f"{type(tokenizer).__name__} ({kind} model, pre-tokenizer "
            f"{(spec.get('pre_tokenizer') or {}).get('type')}) has no onnxruntime-extensions op that tokenizes as it "
            f"does: the string-in model is built for BERT-style WordPiece tokenizers (BERT, DistilBERT, ELECTRA, "
            f"MobileBERT, MPNet) and RoBERTa's byte-level BPE; apps feed the tokenizer/tokenizer.json ids to the "
            f".ort / .onnx model")


def tokenizer_front(tokenizer, max_length: int) -> tuple[list, list, list[str]]:
    """The nodes and initializers that turn the graph input `text` ([1] string) into 1-D input_ids and
    attention_mask (the names returned) as the HF tokenizer does, truncation at max_length included."""
    wp = wordpiece_settings(tokenizer)
    if wp is not None:
        return _wordpiece_front(wp, max_length)
    if is_roberta_bpe(tokenizer):
        return _roberta_front(tokenizer, max_length)
    raise PipelineError(f"no in-graph tokenizer: {unsupported(tokenizer)}")


def _wordpiece_front(wp: dict, max_length: int) -> tuple[list, list, list[str]]:
    from onnx import TensorProto, helper

    wp = dict(wp)
    inits, src, nodes = [], TEXT_INPUT, []
    if wp.pop("clean_text"):
        pattern = helper.make_tensor("tokenizer/clean_pattern", TensorProto.STRING, [1], [CLEAN_PATTERN.encode()])
        rewrite = helper.make_tensor("tokenizer/clean_rewrite", TensorProto.STRING, [1], [b""])
        nodes.append(helper.make_node("StringRegexReplace", [TEXT_INPUT, pattern.name, rewrite.name],
                                      ["tokenizer/clean_text"], domain=CONTRIB, name="clean_text", global_replace=1))
        inits, src = [pattern, rewrite], "tokenizer/clean_text"
    outs = ["tokenizer/input_ids", "tokenizer/token_type_ids", "tokenizer/attention_mask", "tokenizer/offset_mapping"]
    # the op truncates to max_length keeping the last special token, as HF does
    nodes.append(helper.make_node("BertTokenizer", [src], outs, domain=CONTRIB, name="tokenizer",
                                  max_length=max_length, **wp))
    return nodes, inits, [outs[0], outs[2]]


def _roberta_front(tokenizer, max_length: int) -> tuple[list, list, list[str]]:
    """RobertaTokenizer op ((1, n) ids and mask, no truncation of its own: its max_length attribute is ignored),
    flattened, then cut as HF cuts: the first max_length - 1 ids and the closing </s>."""
    import tempfile

    from onnx import TensorProto, helper
    from onnxruntime_extensions import gen_processing_models

    with tempfile.TemporaryDirectory(prefix="pocketformer-bpe-") as tmp:
        pre, _ = gen_processing_models(_roberta_files(tokenizer, Path(tmp)), pre_kwargs={})
    (op,) = pre.graph.node
    op.name, op.input[:] = "tokenizer", [TEXT_INPUT]
    op.output[:] = [f"tokenizer/raw_{o}" for o in op.output]
    t = lambda name, vals: helper.make_tensor(f"tokenizer/{name}", TensorProto.INT64, [len(vals)], vals)  # noqa: E731
    inits = [t("flat", [-1]), t("zero", [0]), t("one", [1]), t("keep", [max_length - 1])]
    n = lambda *a, **k: helper.make_node(*a, **k)  # noqa: E731
    nodes = [op,
             n("Reshape", [op.output[0], "tokenizer/flat"], ["tokenizer/ids_flat"]),
             n("Reshape", [op.output[1], "tokenizer/flat"], ["tokenizer/mask_flat"]),
             n("Shape", ["tokenizer/ids_flat"], ["tokenizer/len"]),
             n("Sub", ["tokenizer/len", "tokenizer/one"], ["tokenizer/last"]),
             n("Min", ["tokenizer/last", "tokenizer/keep"], ["tokenizer/head"]),  # ids kept before </s>
             n("Squeeze", ["tokenizer/head", "tokenizer/zero"], ["tokenizer/head_scalar"]),
             n("Range", ["tokenizer/zero_scalar", "tokenizer/head_scalar", "tokenizer/one_scalar"],
               ["tokenizer/head_idx"]),
             n("Concat", ["tokenizer/head_idx", "tokenizer/last"], ["tokenizer/idx"], axis=0),
             n("Gather", ["tokenizer/ids_flat", "tokenizer/idx"], ["tokenizer/input_ids"], axis=0),
             n("Gather", ["tokenizer/mask_flat", "tokenizer/idx"], ["tokenizer/attention_mask"], axis=0)]
    inits += [helper.make_tensor("tokenizer/zero_scalar", TensorProto.INT64, [], [0]),
              helper.make_tensor("tokenizer/one_scalar", TensorProto.INT64, [], [1])]
    return nodes, inits, ["tokenizer/input_ids", "tokenizer/attention_mask"]


def build_string_model(model_path: Path, tokenizer, max_length: int, out: Path) -> Path:
    """Write out (.onnx): the tokenizer front (tokenizer_front) + the classifier at model_path, whose inputs
    input_ids and attention_mask are the front's outputs with a batch axis of 1."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    g = model.graph
    names = [i.name for i in g.input]
    if names[:2] != ["input_ids", "attention_mask"] or [o.name for o in g.output][:1] != ["logits"]:
        raise PipelineError(f"{model_path}: expected inputs input_ids, attention_mask and output logits, got "
                            f"{names} -> {[o.name for o in g.output]}; re-run the quantize stage")
    front, front_inits, (ids, mask) = tokenizer_front(tokenizer, max_length)
    axes = helper.make_tensor("tokenizer/axis0", TensorProto.INT64, [1], [0])
    glue = [helper.make_node("Unsqueeze", [ids, axes.name], ["input_ids"], name="batch_ids"),
            helper.make_node("Unsqueeze", [mask, axes.name], ["attention_mask"], name="batch_mask")]
    soft = helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1, name="probabilities")
    n_labels = g.output[0].type.tensor_type.shape.dim[-1].dim_value or None
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, n_labels]) for name in OUTPUTS]
    graph = helper.make_graph(front + glue + list(g.node) + [soft], "string_in_classifier",
                              [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.STRING, [1])], outputs,
                              initializer=[axes, *front_inits, *g.initializer], value_info=list(g.value_info))
    opsets = [o for o in model.opset_import if o.domain != CONTRIB] + [helper.make_opsetid(CONTRIB, 1)]
    merged = helper.make_model(graph, opset_imports=opsets, producer_name="pocketformer")
    merged.ir_version = model.ir_version
    onnx.checker.check_model(merged)  # catches a dangling name before any runtime sees the file
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(merged, str(out))
    return out


def tokenizer_graph(string_model):
    """The tokenizer front of a string-in model (onnx ModelProto) as its own model: text in, the 1-D token
    ids the classifier is fed (the input of the batch_ids node) as its first output."""
    import onnx

    nodes = list(string_model.graph.node)
    batch = next(n for n in nodes if n.name == "batch_ids")
    front = nodes[: nodes.index(batch)]
    used = {i for n in front for i in n.input}
    # every output of the extensions op stays a graph output: the BertTokenizer op crashes (segfault) on a
    # truncated text when its offset_mapping is not asked for
    op = next(n for n in front if n.name == "tokenizer")
    names = [batch.input[0], *(o for o in op.output if o != batch.input[0])]
    outs = [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.INT64, None) for o in names]
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
