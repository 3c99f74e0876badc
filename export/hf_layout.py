"""The bundle's Hugging Face layout (bundle/hf/): the folder Hugging Face clients already load.

    hf/config.json                 the model's transformers config, id2label / label2id from labels.json
    hf/tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.txt
    hf/onnx/model.onnx             fp32 (transformers.js dtype "fp32"; Optimum file_name="model.onnx")
    hf/onnx/model_quantized.onnx   int8 dynamic (transformers.js dtype "q8")
    hf/README.md                   model card (export/model_card.py)

transformers.js `pipeline('text-classification', 'hf')` with env.localModelPath = the bundle, and Optimum's
`ORTModelForSequenceClassification.from_pretrained(bundle / "hf", subfolder="onnx", file_name=...)` load it
as is (tests/test_hf_layout.py runs both), and `huggingface-cli upload <repo> hf` publishes it. Only
transformer models get one: the LSTM baselines have no transformers config a client could build them from.

The generation bundle is this layout at its root (onnx/model[_quantized].onnx: the decoder with past
key/values; config.json, generation_config.json, the teacher's tokenizer files) plus genai_config.json for
onnxruntime-genai (graph I/O names, eos / pad ids, greedy search), samples, metadata, README and app samples.

The student sees a restricted vocabulary (distill.vocab.VocabMap: the teacher ids seen in training,
plus one "other" id). A runtime that tokenizes with the teacher's tokenizer.json needs teacher ids in and
teacher-vocabulary logits out, so the graph gets a Gather in front (teacher id -> student id, unseen ids ->
"other") and one behind (student logits -> teacher vocabulary, the ids the student never saw, "other"
included, pinned to the lowest float). Greedy decoding then picks exactly what the pipeline picks: it
never chooses "other", and kept ids keep their order (the map is sorted), so argmax ties break alike.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError

HF_DIR = "hf"
# file name in onnx/ -> quantize variant it is copied from. The names are the ones transformers.js looks
# up per dtype (fp32 -> model.onnx, q8 -> model_quantized.onnx) and Optimum's defaults.
ONNX_FILES = {"model.onnx": "fp32", "model_quantized.onnx": "int8-dynamic"}
GRAPH_FILES = {v: f"onnx/{k}" for k, v in ONNX_FILES.items()}  # variant -> the generation bundle's file
JS_DTYPE = {"fp32": "fp32", "int8-dynamic": "q8"}
# finite, so a runtime that scales logits (temperature, repetition penalty) never meets inf - inf = nan
DROPPED_LOGIT = float(np.finfo(np.float32).min)
_IDS, _LOGITS = "input_ids", "logits"
_INNER_IDS, _INNER_LOGITS = "pocketformer/student_input_ids", "pocketformer/student_logits"
# tokenizer.json + tokenizer_config.json are what transformers.js reads; the other two serve the Python
# tokenizers (BertTokenizer reads vocab.txt) and older clients.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
REQUIRED_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def skip_reason(model_dir: Path) -> str | None:
    """Why this model gets no HF layout (None = it gets one)."""
    from transformers import CONFIG_MAPPING

    path = model_dir / "config.json"
    shown = f"{model_dir.name}/config.json"  # never the build machine's folders: this lands in metadata.json
    if not path.is_file():
        return f"{shown} does not exist: not a transformers model, so no Hugging Face client can build it"
    config = json.loads(path.read_text())
    kind = config.get("model_type")
    if kind not in CONFIG_MAPPING:
        return (f"{shown} has model_type {kind!r}, not a transformers architecture (the LSTM baselines are "
                f"pocketformer's own), so no Hugging Face client can build it")
    archs = config.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        return f"{shown} is not a sequence classifier (architectures: {archs}), so clients would build the wrong head"
    return None


def _tokenizer(tokenizer_dir: Path, dest: Path, max_length: int) -> list[str]:
    missing = [f for f in REQUIRED_TOKENIZER_FILES if not (tokenizer_dir / f).is_file()]
    if missing:
        raise PipelineError(f"{tokenizer_dir} lacks {', '.join(missing)}, which Hugging Face clients need; the "
                            f"model's tokenizer must be a fast (tokenizers) one: re-run the quantize stage")
    copied = [name for name in TOKENIZER_FILES if (tokenizer_dir / name).is_file()]
    for name in copied:
        shutil.copy2(tokenizer_dir / name, dest / name)
    cap_tokenizer(dest, max_length)
    return copied


def cap_tokenizer(folder: Path, max_length: int) -> None:
    """Make a shipped tokenizer folder cut texts at max_length, as the pipeline does.

    save_pretrained leaves "no limit" (1e30) or the teacher's 512 in tokenizer_config.json, and no truncation
    in tokenizer.json. Past max_length the exported model has no positions (or they were never trained), so an
    app that runs the folder as it is (the tokenizers library, transformers.js) fails or mislabels a long
    text: the limit must travel in both files. transformers still cuts only when asked (truncation=True)."""
    conf = folder / "tokenizer_config.json"
    if conf.is_file():
        tc = json.loads(conf.read_text(encoding="utf-8"))
        tc["model_max_length"] = max_length
        conf.write_text(json.dumps(tc, indent=2), encoding="utf-8")
    fast = folder / "tokenizer.json"
    if fast.is_file():
        tj = json.loads(fast.read_text(encoding="utf-8"))
        # what tokenizers' enable_truncation(max_length) writes: keep the first tokens, [SEP] stays last
        tj["truncation"] = {"direction": "Right", "max_length": max_length, "strategy": "LongestFirst", "stride": 0}
        fast.write_text(json.dumps(tj, indent=2, ensure_ascii=False), encoding="utf-8")


def write_hf_layout(dest: Path, model_dir: Path, tokenizer_dir: Path, labels: list[str], max_length: int,
                    onnx_sources: dict[str, Path]) -> dict:
    """Write the layout into dest (bundle/hf); onnx_sources maps ONNX_FILES names to the files to copy.

    Returns the metadata entry: the folder, each ONNX file's source variant and the tokenizer files. The caller
    (export/client_files.py) passes ONNX_FILES names only, and only when fp32 (onnx/model.onnx) is among them."""
    (dest / "onnx").mkdir(parents=True, exist_ok=True)
    config = json.loads((model_dir / "config.json").read_text())
    # labels.json is the source of truth for the label order every other bundle file uses
    config["id2label"] = {str(i): lab for i, lab in enumerate(labels)}
    config["label2id"] = {lab: i for i, lab in enumerate(labels)}
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    tok_files = _tokenizer(tokenizer_dir, dest, max_length)
    files = {}
    for name, src in onnx_sources.items():
        shutil.copy2(src, dest / "onnx" / name)
        files[f"onnx/{name}"] = {"variant": ONNX_FILES[name]}
    return {"folder": HF_DIR, "config": "config.json", "tokenizer_files": tok_files, "onnx": files,
            "max_length": max_length,
            "load": {"transformers.js": f"env.localModelPath = '<bundle>'; pipeline('text-classification', "
                                        f"'{HF_DIR}', {{ dtype: 'q8' }})  // or dtype 'fp32'",
                     "optimum": f"ORTModelForSequenceClassification.from_pretrained('<bundle>/{HF_DIR}', "
                                f"subfolder='onnx', file_name='model_quantized.onnx')"}}


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
    if isinstance(eos, list) and eos and all(isinstance(i, int) for i in eos):
        eos = eos[0]  # a Llama-3 style list: the first is end-of-text; the bundle's runtimes stop on one id
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
    """A continuation as an app sees it: generation stops after the first eos, kept (ONNX Runtime's loop and
    the samples' loops return it; onnxruntime-genai reports it as the last step's token)."""
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens
