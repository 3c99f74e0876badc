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
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.errors import PipelineError

HF_DIR = "hf"
# file name in onnx/ -> quantize variant it is copied from. The names are the ones transformers.js looks
# up per dtype (fp32 -> model.onnx, q8 -> model_quantized.onnx) and Optimum's defaults.
ONNX_FILES = {"model.onnx": "fp32", "model_quantized.onnx": "int8-dynamic"}
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


def _config(model_dir: Path, labels: list[str]) -> dict:
    config = json.loads((model_dir / "config.json").read_text())
    # labels.json is the source of truth for the label order every other bundle file uses
    config["id2label"] = {str(i): lab for i, lab in enumerate(labels)}
    config["label2id"] = {lab: i for i, lab in enumerate(labels)}
    return config


def _tokenizer(tokenizer_dir: Path, dest: Path, max_length: int) -> list[str]:
    missing = [f for f in REQUIRED_TOKENIZER_FILES if not (tokenizer_dir / f).is_file()]
    if missing:
        raise PipelineError(f"{tokenizer_dir} lacks {', '.join(missing)}, which Hugging Face clients need; the "
                            f"model's tokenizer must be a fast (tokenizers) one: re-run the quantize stage")
    copied = []
    for name in TOKENIZER_FILES:
        src = tokenizer_dir / name
        if not src.is_file():
            continue
        if name == "tokenizer_config.json":
            tc = json.loads(src.read_text())
            # save_pretrained leaves "no limit" (1e30) here; clients truncate to model_max_length, and past
            # max_length the exported model has no positions (or was never trained), so the limit must travel
            tc["model_max_length"] = max_length
            (dest / name).write_text(json.dumps(tc, indent=2))
        else:
            shutil.copy2(src, dest / name)
        copied.append(name)
    return copied


def write_hf_layout(dest: Path, model_dir: Path, tokenizer_dir: Path, labels: list[str], max_length: int,
                    onnx_sources: dict[str, Path]) -> dict:
    """Write the layout into dest (bundle/hf); onnx_sources maps ONNX_FILES names to the files to copy.

    Returns the metadata entry: the folder, each ONNX file's source variant and the tokenizer files."""
    if not onnx_sources.get("model.onnx"):
        raise PipelineError("the Hugging Face layout needs the fp32 ONNX file (onnx/model.onnx): add fp32 to "
                            "quantize.variants and run the quantize stage")
    unknown = sorted(set(onnx_sources) - set(ONNX_FILES))
    if unknown:
        raise ValueError(f"unknown Hugging Face ONNX file names {unknown}; known: {sorted(ONNX_FILES)}")
    (dest / "onnx").mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(_config(model_dir, labels), indent=2))
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
