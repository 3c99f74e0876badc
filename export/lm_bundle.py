"""The generation app bundle: the student decoder rewritten to speak the teacher tokenizer's ids, and the
configuration files that let onnxruntime-genai and transformers.js load the folder as it is.

Layout (runs/<run>/bundle/ and its published copy dist/<run>/), the Hugging Face layout both runtimes read:

    onnx/model_quantized.onnx   (int8) or onnx/model.onnx (fp32): decoder with past key/values
    genai_config.json           onnxruntime-genai: model type, graph I/O names, eos / pad ids, greedy search
    config.json                 the Llama config transformers.js reads (layers, heads, vocabulary)
    generation_config.json      greedy, eos / bos / pad ids
    tokenizer.json, tokenizer_config.json, special_tokens_map.json   the teacher's tokenizer, unchanged
    samples.json                prompts with their token ids and the pipeline's greedy continuations
    metadata.json, README.md, android/*.kt, ios/*.swift

The student sees a restricted vocabulary (distill/vocab.VocabMap: the teacher ids seen in training,
plus one "other" id). A runtime that tokenizes with the teacher's tokenizer.json needs teacher ids in and
teacher-vocabulary logits out, so the graph gets a Gather in front (teacher id -> student id, unseen ids ->
"other") and one behind (student logits -> teacher vocabulary, the ids the student never saw, "other"
included, pinned to the lowest float). Greedy decoding then picks exactly what the pipeline picks: it
never chooses "other", and kept ids keep their order (the map is sorted), so argmax ties break alike.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError

# transformers.js picks the file by dtype: "fp32" -> onnx/model.onnx, "q8" -> onnx/model_quantized.onnx
GRAPH_FILES = {"fp32": "onnx/model.onnx", "int8-dynamic": "onnx/model_quantized.onnx"}
JS_DTYPE = {"fp32": "fp32", "int8-dynamic": "q8"}
# finite, so a runtime that scales logits (temperature, repetition penalty) never meets inf - inf = nan
DROPPED_LOGIT = float(np.finfo(np.float32).min)
_IDS, _LOGITS = "input_ids", "logits"
_INNER_IDS, _INNER_LOGITS = "pocketformer/student_input_ids", "pocketformer/student_logits"


def map_vocab(src: Path, dst: Path, vmap) -> Path:
    """src (a decoder graph over student ids) -> dst, the same graph over teacher ids (see the module doc).
    A vocabulary that is not restricted (vmap None or the identity) is copied unchanged."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    if [i.name for i in g.input][:1] != [_IDS] or _LOGITS not in [o.name for o in g.output]:
        raise PipelineError(f"{src} is not a decoder graph with input '{_IDS}' and output '{_LOGITS}'; "
                            f"re-run the quantize stage")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if vmap is None or (not vmap.has_other and len(vmap.teacher_ids) == vmap.teacher_vocab):
        onnx.save(model, str(dst))
        return dst
    for node in g.node:
        node.input[:] = [_INNER_IDS if n == _IDS else _INNER_LOGITS if n == _LOGITS else n for n in node.input]
        node.output[:] = [_INNER_LOGITS if n == _LOGITS else n for n in node.output]
    for vi in g.value_info:
        if vi.name == _LOGITS:
            vi.name = _INNER_LOGITS
    keep = np.zeros(vmap.teacher_vocab, dtype=bool)
    keep[vmap.teacher_ids] = True
    # teacher id -> student id; unseen ids point at "other" (inputs) and are masked behind (logits)
    g.initializer.extend([
        numpy_helper.from_array(vmap.lookup(), "pocketformer/teacher_to_student"),
        numpy_helper.from_array(keep, "pocketformer/kept"),
        numpy_helper.from_array(np.array(DROPPED_LOGIT, dtype=np.float32), "pocketformer/dropped_logit")])
    g.node.insert(0, helper.make_node("Gather", ["pocketformer/teacher_to_student", _IDS], [_INNER_IDS],
                                      name="pocketformer/ids_to_student"))
    g.node.extend([
        helper.make_node("Gather", [_INNER_LOGITS, "pocketformer/teacher_to_student"], ["pocketformer/spread"],
                         axis=2, name="pocketformer/logits_to_teacher"),
        helper.make_node("Where", ["pocketformer/kept", "pocketformer/spread", "pocketformer/dropped_logit"],
                         [_LOGITS], name="pocketformer/mask_unseen")])
    out = next(o for o in g.output if o.name == _LOGITS)
    if out.type.tensor_type.elem_type != TensorProto.FLOAT:  # the masking constant is float32
        raise PipelineError(f"{src}: logits are not float32; ship the fp32 or int8-dynamic graph (bundle.variant)")
    dim = out.type.tensor_type.shape.dim[2]
    dim.Clear()
    dim.dim_value = vmap.teacher_vocab
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return dst


def decoder_shape(config) -> dict:
    """Layers, heads and sizes of a transformers Llama-style config, as both runtimes need them."""
    heads = config.num_attention_heads
    return {"num_hidden_layers": config.num_hidden_layers, "num_attention_heads": heads,
            "num_key_value_heads": getattr(config, "num_key_value_heads", None) or heads,
            "hidden_size": config.hidden_size,
            "head_size": getattr(config, "head_dim", None) or config.hidden_size // heads}


def special_ids(tokenizer, config) -> dict:
    """eos / bos / pad ids in teacher ids; pad falls back to eos (batch 1 never pads, but both runtimes
    want a value)."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else config.eos_token_id
    if not isinstance(eos, int):
        raise PipelineError("the student's tokenizer and config name no eos token; the generation bundle needs one "
                            "to stop (set eos_token in the teacher's tokenizer_config.json)")
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else config.bos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return {"eos_token_id": eos, "bos_token_id": bos if isinstance(bos, int) else eos, "pad_token_id": pad}


def genai_config(graph_file: str, shape: dict, ids: dict, vocab: int, context: int) -> dict:
    """genai_config.json: our graph's I/O names (optimum's, which are also onnxruntime-genai's defaults,
    written out so that a rename on either side fails loudly) and greedy search over the whole context.
    past_present_share_buffer is off: the graph concatenates past and new keys (present grows by one)."""
    return {
        "model": {
            "type": "llama", "context_length": context, "vocab_size": vocab, **ids,
            "decoder": {
                "filename": graph_file,
                "session_options": {"log_id": "pocketformer", "provider_options": []},
                **shape,
                "inputs": {"input_ids": _IDS, "attention_mask": "attention_mask", "position_ids": "position_ids",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": _LOGITS, "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "num_beams": 1, "num_return_sequences": 1, "max_length": context,
                   "min_length": 0, "past_present_share_buffer": False, "repetition_penalty": 1.0,
                   "temperature": 1.0, "top_k": 1, "top_p": 1.0, "length_penalty": 1.0, "early_stopping": True,
                   "no_repeat_ngram_size": 0, "diversity_penalty": 0.0},
    }


def hf_config(config, vocab: int, ids: dict, context: int) -> dict:
    """config.json for transformers.js: the student's Llama config over the teacher vocabulary (the graph's
    logits width after map_vocab)."""
    d = config.to_dict()
    d.update(vocab_size=vocab, max_position_embeddings=context, **ids, use_cache=True)
    d.pop("transformers_version", None)
    return d


def generation_config(ids: dict, context: int) -> dict:
    return {**ids, "do_sample": False, "num_beams": 1, "max_length": context}


def cut_at_eos(tokens: list[int], eos: int) -> list[int]:
    """A continuation as an app sees it: generation stops after the first eos (kept, as both runtimes
    return it)."""
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2))
