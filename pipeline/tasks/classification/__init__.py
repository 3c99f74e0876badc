"""The classification task: a BERT-family encoder fine-tuned on labelled texts, distilled into a small encoder
(or the NPU student), with a plain and a distilled RNN beside it; quality is test accuracy."""
from __future__ import annotations

from pipeline.task import Step, Task, lazy

# model name -> (stage, sub-folder) of its checkpoint
MODEL_FOLDERS = {"teacher": ("teacher", "model"), "student": ("distill", "student"),
                 "lstm": ("baseline", "lstm"), "lstm_distilled": ("baseline", "lstm_distilled")}
_HERE = "pipeline.tasks.classification"

TASK = Task(
    name="classification",
    doc="text classification: labelled texts in, class logits out",
    models=MODEL_FOLDERS,
    quality="accuracy",
    steps={
        "data": Step(lazy(f"{_HERE}.train:stage_data"), ("data",)),
        "teacher": Step(lazy(f"{_HERE}.train:stage_teacher"), ("teacher", "train"), distributed=True),
        "logits": Step(lazy(f"{_HERE}.train:stage_logits"), ("augment",), distributed=True),
        "distill": Step(lazy(f"{_HERE}.train:stage_distill"), ("student", "distill", "train"), distributed=True),
        "baseline": Step(lazy(f"{_HERE}.train:stage_baseline"), ("baseline", "distill", "train"), distributed=True),
        "eval": Step(lazy(f"{_HERE}.train:stage_eval")),
        "quantize": Step(lazy(f"{_HERE}.ship:stage_quantize"), ("quantize",)),
        "export": Step(lazy(f"{_HERE}.ship:stage_export"), ("export",)),
        "bench": Step(lazy(f"{_HERE}.bench:stage_bench"), ("bench",)),
        "report": Step(lazy("pipeline.tasks.common:report")),
        "bundle": Step(lazy(f"{_HERE}.bundle:stage_bundle"), ("bundle",)),
        "web-bundle": Step(lazy(f"{_HERE}.web:stage_web_bundle"), ("bundle",)),
    },
    published_check=lazy(f"{_HERE}.bundle:published_check"),
    verify=lazy(f"{_HERE}.verify:verify"),
)
