"""Checks on the values of settings, declared as tables so a new setting gets its rule in one line.

RANGES: one rule per key (numbers, lists of numbers, choices). REGISTRY_NAMES: keys whose value (or
every item of the list) must be a key of a registry; the registry module is imported only when the
check runs, so a new registry entry is accepted without touching this file. CROSS: rules that read more
than one key. All of them run when the config loads, before any stage, so `show-config` rejects exactly
what a run would reject and a bad value never costs a training run.
"""
from __future__ import annotations

import importlib
import json
import math
from typing import Any, Callable

# A rule returns what is wrong with a value ("must be > 0") or None when the value is fine.
Rule = Callable[[Any], "str | None"]


def at_least(lo: float) -> Rule:
    return lambda v: None if v >= lo else f"must be >= {lo:g}"


def positive(v: float) -> str | None:
    return None if v > 0 else "must be > 0"


def between(lo: float, hi: float, *, hi_open: bool = False) -> Rule:
    """lo <= v <= hi, or lo <= v < hi with hi_open (a fraction of data that must leave something over)."""
    def rule(v: float) -> str | None:
        if lo <= v and (v < hi if hi_open else v <= hi):
            return None
        return f"must be in [{lo:g}, {hi:g}{')' if hi_open else ']'}"
    return rule


def one_of(*choices: str) -> Rule:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def each(rule: Rule) -> Rule:
    """Apply rule to every item of a list setting; the message names the first bad item."""
    def check(items: list) -> str | None:
        for i, v in enumerate(items):
            problem = rule(v)
            if problem:
                return f"item {i} ({v!r}) {problem}"
        return None
    return check


FRACTION = between(0.0, 1.0)
HELD_OUT = between(0.0, 1.0, hi_open=True)  # a split fraction of 1 would leave no training data

RANGES: dict[str, Rule] = {
    "run.seed": at_least(0),  # numpy's seed must be non-negative
    "run.threads": at_least(0),
    "data.validation_fraction": HELD_OUT,
    "data.test_fraction": HELD_OUT,
    "data.max_train": at_least(0),
    "data.max_validation": at_least(0),
    "data.max_test": at_least(0),
    "data.label_variants": one_of("merge", "error", "keep"),
    "teacher.max_length": at_least(2),  # room for [CLS] and [SEP]
    "teacher.epochs": positive,
    "teacher.batch_size": positive,
    "teacher.lr": positive,
    "teacher.weight_decay": at_least(0),
    "teacher.warmup_fraction": FRACTION,
    "teacher.eval_batch_size": positive,
    "augment.copies": at_least(0),
    "augment.p_mask": FRACTION,
    "augment.p_replace": FRACTION,
    "augment.p_ngram": FRACTION,
    "augment.ngram_max": at_least(1),
    "student.layers": positive,
    "student.hidden": positive,
    "student.heads": positive,
    "student.ffn": positive,
    "student.max_length": at_least(2),
    "distill.epochs": positive,
    "distill.batch_size": positive,
    "distill.lr": positive,
    "distill.weight_decay": at_least(0),
    "distill.warmup_fraction": FRACTION,
    "distill.temperature": positive,
    "distill.alpha": FRACTION,
    "distill.hidden_weight": at_least(0),
    "distill.attention_weight": at_least(0),
    "distill.layer_map": each(at_least(1)),  # teacher layers are 1-based; the upper end needs the teacher
    "distill.intermediate_epochs": at_least(0),
    "baseline.embed_dim": positive,
    "baseline.hidden": positive,
    "baseline.layers": positive,
    "baseline.dropout": HELD_OUT,
    "baseline.epochs": positive,
    "baseline.batch_size": positive,
    "baseline.lr": positive,
    "baseline.distill_alpha": FRACTION,
    "train.grad_accum": positive,
    "train.checkpoint_every": at_least(0),
    "quantize.opset": positive,
    "quantize.calibration_samples": positive,
    "quantize.check_samples": positive,
    "quantize.lossless_atol": positive,
    # no upper bound: above 1 every lossy file fails its check, which is how a test forces that path
    "quantize.min_argmax_agreement": at_least(0),
    "export.coreml_lengths": each(positive),
    "export.coreml_min_weight_elements": at_least(0),
    "bench.seq_lengths": each(positive),
    "bench.warmup": at_least(0),
    "bench.iterations": positive,
    "bench.throughput_batch": positive,
    "bench.headline_length": positive,
    "bench.max_seconds_per_point": positive,
    "bench.min_iterations": positive,
    "bench.peer_eval_texts": at_least(0),
    "bench.head_to_head_rounds": at_least(0),
    "bench.browser_iterations": positive,
    "bench.browser_warmup": at_least(0),
    "lm.context_length": at_least(2),
    "lm.split_blocks": positive,
    "lm.teacher_windows": at_least(0),
    "lm.extra_windows": at_least(-1),  # -1 = the rest of the split
    "lm.top_k": positive,
    "lm.eval_windows": at_least(0),
    "lm.eval_batch_size": positive,
    "lm.sample_tokens": at_least(0),
    "lm.max_cache": positive,
    "lm.check_tokens": positive,
    "lm.bench_prompt_tokens": positive,
    "lm.bench_decode_tokens": positive,
    "lm.bench_iterations": positive,
    "bundle.accuracy_window": FRACTION,
    "bundle.min_agreement": FRACTION,
    "bundle.sample_texts": at_least(1),  # verify-bundle replays them: a bundle without one cannot be checked
    "phone.threads": each(positive),
    "phone.seq_length": positive,
    "phone.repeats": positive,
}

ANY_TASK = "*"
# key -> (what a name there is, {task (or ANY_TASK): ("module:attribute", ...)}): the value, or each item
# of a list, must be a key of one of the named registries. A task that is not listed is not checked here
# (its stages check with their own message): the generation task's defaults for [student] and [data] are
# the classification ones, which a generation config always overrides.
REGISTRY_NAMES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "student.arch": ("student architecture", {"classification": ("distill.student:CLASSIFICATION_STUDENTS",)}),
    "data.source": ("data source", {"classification": ("pipeline.data:SOURCES",)}),
    "quantize.models": ("model", {"classification": ("distill.models:MODEL_NAMES",),
                                  "generation": ("pipeline.tasks.generation:LM_FOLDERS",)}),
    "quantize.npu_variants": ("NPU variant", {"classification": ("export.npu:NPU_VARIANTS",)}),
    "quantize.variants": ("ONNX variant", {ANY_TASK: ("export.registry:ONNX_VARIANTS",)}),
    "export.ort_variants": ("ONNX variant", {ANY_TASK: ("export.registry:ONNX_VARIANTS",)}),
    "export.coreml_variants": ("Core ML variant", {"classification": ("export.coreml:COREML_VARIANTS",)}),
    "export.coreml_shapes": ("Core ML shape mode", {"classification": ("export.coreml:SHAPE_MODES",)}),
    "export.ort_target_platform": ("ORT platform", {ANY_TASK: ("export.ort_format:PLATFORMS",)}),
    "bench.targets": ("target", {"classification": ("eval.targets:TARGETS",)}),
    "quantize.static_float": ("int8-static float part", {ANY_TASK: ("export.quantize:STATIC_FLOAT",)}),
}


def _hidden_divisible_by_heads(cfg) -> str | None:
    s = cfg.student
    if s.hidden % s.heads:
        return f"'student.hidden' ({s.hidden}) must be divisible by 'student.heads' ({s.heads})"
    return None


def _split_fractions_leave_training_data(cfg) -> str | None:
    d = cfg.data
    if d.validation_fraction + d.test_fraction >= 1:
        return (f"'data.validation_fraction' ({d.validation_fraction:g}) + 'data.test_fraction' "
                f"({d.test_fraction:g}) must be < 1, or nothing is left for training")
    return None


def _layer_map_covers_the_student(cfg) -> str | None:
    m, layers = cfg.distill.layer_map, cfg.student.layers
    if cfg.run.task == "classification" and m and len(m) != layers:
        return (f"'distill.layer_map' has {len(m)} entries but 'student.layers' = {layers}: give one teacher layer "
                f"per student layer, or leave it empty to spread them uniformly")
    return None


def _quantize_starts_from_fp32(cfg) -> str | None:
    """The classification quantize stage makes every other ONNX variant from the fp32 export (the
    generation stages always export fp32 themselves)."""
    made = cfg.quantize.variants
    if cfg.run.task == "classification" and "fp32" not in made:
        return f"quantize.variants = {made} lacks 'fp32': every other ONNX variant is made from the fp32 export; add it"
    return None


def _set(key: str, value: Any) -> str:
    """A fix as the user types it: --set key=value (TOML value syntax)."""
    return f"--set {key}={json.dumps(value, separators=(',', ':'))}"


def _bench_lengths(cfg) -> str | None:
    """The classification bench times every variant at headline_length, the sweep at seq_lengths."""
    b = cfg.bench
    if cfg.run.task != "classification":
        return None  # the generation bench times lm.bench_prompt_tokens
    if not b.seq_lengths or min(b.seq_lengths) < 3:
        return (f"'bench.seq_lengths' = {b.seq_lengths}: give lengths of at least 3 tokens ([CLS] x [SEP]), e.g. "
                f"{_set('bench.seq_lengths', sorted({16, 32, 64, 128, b.headline_length}))}")
    if b.headline_length not in b.seq_lengths:
        return (f"'bench.headline_length' = {b.headline_length} is not one of 'bench.seq_lengths' {b.seq_lengths}; "
                f"pick one of them, e.g. {_set('bench.headline_length', sorted(b.seq_lengths)[len(b.seq_lengths) // 2])}")
    return None


def _prompts(cfg) -> str | None:
    prompts = cfg.lm.prompts
    empty = [i for i, p in enumerate(prompts) if not p.strip()]
    if empty:
        return (f"'lm.prompts' item {empty[0]} is empty: a prompt needs text to continue; give one or remove it, "
                f"e.g. {_set('lm.prompts', [p for p in prompts if p.strip()] or ['ROMEO:'])}")
    if cfg.run.task == "generation" and not prompts:
        return (f"'lm.prompts' is empty: the generation stages check and ship greedy continuations of them; give at "
                f"least one, e.g. {_set('lm.prompts', ['ROMEO:'])}")
    return None


def _web_target(cfg) -> str | None:
    """The web bundle is chosen on bundle.web_target's rows: a browser target the bench times."""
    b = cfg.bundle
    if cfg.run.task != "classification":
        return None  # generation runs have no web bundle
    from eval.browser import is_browser
    from eval.targets import TARGETS

    browsers = [n for n, t in TARGETS.items() if is_browser(t)]
    if b.web_target not in browsers:
        return (f"'bundle.web_target' = {b.web_target!r} is not a browser target; use one of {', '.join(browsers)}, "
                f"e.g. {_set('bundle.web_target', browsers[0])}")
    if b.web and b.web_target not in cfg.bench.targets:
        return (f"'bundle.web_target' = {b.web_target!r} is not in 'bench.targets' {cfg.bench.targets}, so the web "
                f"bundle would have no timings to choose on; add it: "
                f"{_set('bench.targets', [*cfg.bench.targets, b.web_target])} (or --set bundle.web=false)")
    return None


RNN_MODELS = ("lstm", "lstm_distilled")  # no transformer graph: transformer-only variants skip them
COREML_MODELS = ("student", "lstm", "lstm_distilled")  # the teacher is the model too big to ship


def _bundle_choice_is_made(cfg) -> str | None:
    """bundle.model / bundle.variant must name a file some stage makes with these settings."""
    b, q, e = cfg.bundle, cfg.quantize, cfg.export
    if cfg.run.task == "generation":
        return _lm_bundle_choice_is_made(cfg)
    from distill.models import MODEL_NAMES
    from export.registry import for_variant

    if b.model != "auto" and b.model not in MODEL_NAMES:
        return (f"'bundle.model' = {b.model!r} is not a model; choose auto or one of {', '.join(MODEL_NAMES)}, e.g. "
                f"{_set('bundle.model', 'auto')}")
    want = "student" if b.model == "auto" else b.model
    if want not in q.models:
        return (f"'bundle.model' = {b.model!r} ships the {want}, which 'quantize.models' {q.models} does not make; "
                f"add it: {_set('quantize.models', [*q.models, want])}")
    if not e.ort_variants:
        return (f"'export.ort_variants' is empty: the bundle ships an .ort file; give at least one, e.g. "
                f"{_set('export.ort_variants', ['fp32'])}")
    if b.variant == "auto":
        return None
    if b.variant not in e.ort_variants:
        return (f"'bundle.variant' = {b.variant!r}: no .ort file of it is made ('export.ort_variants' = "
                f"{e.ort_variants}); pick one of those or let the bundle choose: {_set('bundle.variant', 'auto')}")
    npu_student = want == "student" and cfg.student.arch == "npu"
    if for_variant(b.variant).transformer_only and (want in RNN_MODELS or npu_student):
        return (f"'bundle.variant' = {b.variant!r} is a fusion of BERT-family graphs: the {want} model has no such "
                f"file; pick another variant or {_set('bundle.variant', 'auto')}")
    return None


def _lm_bundle_choice_is_made(cfg) -> str | None:
    """A generation bundle ships the student decoder, fp32 or int8-dynamic (lm_stages_bundle.py)."""
    from export.hf_layout import GRAPH_FILES  # the variants the generation quantize stage builds, too

    b, q = cfg.bundle, cfg.quantize
    if b.model not in ("auto", "student"):
        return (f"'bundle.model' = {b.model!r}: a generation bundle ships the student decoder; "
                f"{_set('bundle.model', 'student')}")
    if "student" not in q.models:
        return (f"'quantize.models' {q.models} lacks 'student', the decoder the generation bundle ships; add it: "
                f"{_set('quantize.models', [*q.models, 'student'])}")
    made = [v for v in q.variants if v in GRAPH_FILES]
    if not made:
        return (f"'quantize.variants' {q.variants} names no graph the generation stages build ({', '.join(GRAPH_FILES)}); "
                f"e.g. {_set('quantize.variants', list(GRAPH_FILES))}")
    if b.variant != "auto" and b.variant not in made:
        return (f"'bundle.variant' = {b.variant!r}: no student graph of it is made (made: {', '.join(made)}); pick one "
                f"of those or {_set('bundle.variant', 'auto')}")
    return None


def _generation_settings(cfg) -> str | None:
    """What the generation stages would reject after the models are trained."""
    if cfg.run.task != "generation":
        return None
    if cfg.student.arch != "llama":
        return (f"'student.arch' = {cfg.student.arch!r} is not a decoder; run.task = 'generation' builds the Llama "
                f"student: {_set('student.arch', 'llama')}")
    if cfg.teacher.fine_tune:
        return ("'teacher.fine_tune' = true: the generation teacher is used as pretrained (fine-tuning a causal LM is "
                f"not part of this pipeline); {_set('teacher.fine_tune', False)}")
    lm = cfg.lm
    if lm.bench_prompt_tokens + lm.bench_decode_tokens + 1 > lm.max_cache:
        return (f"'lm.bench_prompt_tokens' ({lm.bench_prompt_tokens}) + 'lm.bench_decode_tokens' "
                f"({lm.bench_decode_tokens}) + 1 exceeds the students' positions 'lm.max_cache' ({lm.max_cache}); "
                f"{_set('lm.max_cache', lm.bench_prompt_tokens + lm.bench_decode_tokens + 1)} or shorten the bench")
    return None


def _classification_exports(cfg) -> str | None:
    """The quantize and export stages' settings that need more than one key or a registry with a message."""
    if cfg.run.task != "classification":
        return None
    from pipeline.errors import PipelineError

    q, e = cfg.quantize, cfg.export
    if q.npu_variants and not q.npu_lengths:
        return ("'quantize.npu_lengths' is empty but 'quantize.npu_variants' asks for NPU files; give the sequence "
                f"lengths to export, e.g. {_set('quantize.npu_lengths', [16, 32, 64, 128])}, or "
                f"{_set('quantize.npu_variants', [])}")
    unknown = [v for v in e.ort_variants if v not in q.variants]
    if unknown:
        return (f"'export.ort_variants' names {unknown}, which 'quantize.variants' {q.variants} does not make; add "
                f"them there ({_set('quantize.variants', [*q.variants, *unknown])}) or drop them")
    bad = [m for m in e.coreml_models if m not in COREML_MODELS]
    if bad:
        return (f"'export.coreml_models' names {bad}; Core ML export is for {', '.join(COREML_MODELS)} (the teacher "
                f"is the model too big to ship): {_set('export.coreml_models', [m for m in e.coreml_models if m not in bad])}")
    if "optimized" in q.variants:
        from export.optimize import fusion_options

        try:
            fusion_options("bert", q.skip_fusions)  # a misspelt fusion name
        except PipelineError as err:
            return str(err)
    return None


def _ort_optimizers(cfg) -> str | None:
    from export.ort_format import check_optimizers
    from pipeline.errors import PipelineError

    try:
        check_optimizers(cfg.export.ort_disabled_optimizers)
    except PipelineError as err:
        return str(err)
    return None


CROSS: list[Callable[[Any], "str | None"]] = [_hidden_divisible_by_heads, _split_fractions_leave_training_data,
                                              _layer_map_covers_the_student, _quantize_starts_from_fp32,
                                              _bench_lengths, _prompts, _web_target, _bundle_choice_is_made,
                                              _generation_settings, _classification_exports, _ort_optimizers]


def _registry(ref: str):
    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)


def check_all(cfg) -> str | None:
    """The first problem as a message naming the key, or None. cfg is a pipeline.config.Config."""
    for dotted, rule in RANGES.items():
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        if isinstance(value, float) and not math.isfinite(value):
            return f"'{dotted}' = {value!r}; give a finite number"
        problem = rule(value)
        if problem:
            return f"'{dotted}' = {value!r} {problem}"
    for dotted, (what, by_task) in REGISTRY_NAMES.items():
        refs = by_task.get(cfg.run.task, by_task.get(ANY_TASK))
        if not refs:
            continue
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        known = [name for ref in refs for name in _registry(ref)]
        bad = [v for v in (value if isinstance(value, list) else [value]) if v not in known]
        if bad:
            return f"unknown {what} {', '.join(map(repr, bad))} in '{dotted}'. Known: {', '.join(known)}"
    for check in CROSS:
        problem = check(cfg)
        if problem:
            return problem
    return None
