"""The generation task: a GPT-family decoder (used as pretrained) distilled into a small decoder over a
restricted vocabulary, with an LSTM language model beside it; quality is held-out perplexity."""
from __future__ import annotations

from pipeline.task import Step, Task, lazy

# model name -> (stage, sub-folder) of its checkpoint
LM_FOLDERS = {"teacher": ("teacher", "model"), "student": ("distill", "student"), "lstm": ("baseline", "lstm")}
_HERE = "pipeline.tasks.generation"
_LM = "lm"  # every generation step reads [lm] (lm.bench_* only the bench: pipeline.stage.config_hash)

TASK = Task(
    name="generation",
    doc="text generation: documents in, next-token logits out (KV cache / LSTM state)",
    models=LM_FOLDERS,
    quality="perplexity",
    steps={
        "data": Step(lazy(f"{_HERE}.train:stage_data"), ("data", _LM)),
        "teacher": Step(lazy(f"{_HERE}.train:stage_teacher"), ("teacher", _LM)),
        "logits": Step(lazy(f"{_HERE}.train:stage_logits"), ("augment", _LM), distributed=True),
        "distill": Step(lazy(f"{_HERE}.train:stage_distill"), ("student", "distill", "train", _LM)),
        "baseline": Step(lazy(f"{_HERE}.train:stage_baseline"), ("baseline", "distill", "train", _LM)),
        "eval": Step(lazy(f"{_HERE}.train:stage_eval"), (_LM,)),
        "quantize": Step(lazy(f"{_HERE}.ship:stage_quantize"), ("quantize", _LM)),
        "export": Step(lazy(f"{_HERE}.ship:stage_export"), ("export", _LM)),
        "bench": Step(lazy(f"{_HERE}.ship:stage_bench"), ("bench", _LM)),
        "report": Step(lazy("pipeline.tasks.common:report"), (_LM,)),
        "bundle": Step(lazy(f"{_HERE}.bundle:stage_bundle"), ("bundle", _LM)),
        "web-bundle": Step(lazy("pipeline.tasks.classification.web:skip_web_bundle"), ("bundle", _LM)),
    },
    published_check=lazy(f"{_HERE}.bundle:published_check"),
    verify=lazy(f"{_HERE}.replay:verify"),
)
