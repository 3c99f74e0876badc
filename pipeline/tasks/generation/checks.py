"""The generation task's load-time checks: what its steps would otherwise reject after training."""
from __future__ import annotations

from dataclasses import fields

import pipeline.tasks.generation.data  # noqa: F401  (registers the generation data sources)
from pipeline.config import SECTIONS, AugmentSection, BenchSection, NpuSection
from pipeline.config_rules import (check_names, set_fix as _set, teacher_config, teacher_positions_problem,
                                   teacher_problem)
from pipeline.data import paths_problem, source_problem, unread_problem, unreadable_path_problem
from pipeline.errors import PipelineError
from pipeline.tasks.generation import TASK

COREML_MODELS = ("student", "lstm", "lstm_distilled")  # the teacher is the model too big to ship
# The student's KV cache for one sequence at its lm.max_cache positions (keys and values, fp32 as its ONNX graphs
# and the Core ML export hold them): the Core ML package allocates it whole as state, and an app's onnxruntime-genai
# search grows to it (the bundle's context_length). The limit: 1 GiB, which a phone app holds beside the model.
KV_CACHE_MAX_BYTES = 1 << 30
NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "quantize.models": ("model", ("pipeline.tasks.generation:LM_FOLDERS",)),
    # the decode workload's targets (measured or skipped with a reason), not classification's whole registry
    "bench.targets": ("target for generation", ("eval.bench:DECODE_TARGETS", "eval.bench:DECODE_SKIPPED")),
    "export.coreml_variants": ("Core ML variant", ("export.coreml:COREML_VARIANTS",)),
}


# Classification settings no generation stage reads -> generation's own setting for it ("" = none): a value
# other than generation's default was silently ignored, where a user who set it expects it to shape the run.
# (The search stage hashes every key, as best-<target>.toml is the whole resolved config: these re-ran it alone.)
CLASSIFICATION_ONLY = {
    "student.max_length": "lm.context_length", "student.max_positions": "lm.max_cache",
    "student.vocab": "lm.restrict_vocab", "student.vocab_size_max": "lm.restrict_vocab", "student.embedding_dim": "",
    "distill.hidden_weight": "", "distill.attention_weight": "", "distill.layer_map": "",
    "distill.intermediate_epochs": "", "baseline.max_length": "lm.context_length", "baseline.vocab": "",
    "baseline.vocab_size_max": "", "quantize.embedding_bits": "",
    # the LSTM language model reads left to right (the task's default is false)
    "baseline.bidirectional": "",
    # the teacher is used as pretrained (no fine-tuning) and scores windows of lm.context_length tokens
    "teacher.epochs": "", "teacher.lr": "", "teacher.max_length": "lm.context_length",
    "teacher.batch_size": "", "teacher.weight_decay": "", "teacher.warmup_fraction": "", "teacher.on_too_long": "",
    # the teacher pass over the windows: its batch and its arithmetic
    "teacher.eval_batch_size": "lm.eval_batch_size", "teacher.precision": "lm.teacher_precision",
    # the distillation windows are the corpus's own text: no augmented copies (the task's default is enabled = false)
    **{f"augment.{f.name}": "" for f in fields(AugmentSection)},
    "bench.seq_lengths": "lm.bench_prompt_tokens", "bench.headline_length": "lm.bench_prompt_tokens",
    # the decode bench's plan: one warm-up, then lm.bench_iterations timed generations, however long they take
    "bench.iterations": "lm.bench_iterations", "bench.min_iterations": "lm.bench_iterations", "bench.warmup": "",
    "bench.max_seconds_per_point": "", "bench.throughput_batch": "",
    # one prompt length, every file built timed at it: no length sweep to pick variants for
    "bench.sweep_variants": "",
    # no Optimum peer and no teacher rounds: desktop-gpu's alternating rounds are lm.bench_iterations
    "bench.head_to_head_rounds": "lm.bench_iterations", "bench.peer_eval_texts": "",
    "bench.optimum_peer": "",  # the task's default is false: the peer stage writes no rows for generation
    # the NPU profiles feed classification's edge-npu estimates; the decode bench skips edge-npu
    "bench.devices_file": "",
    # the browser targets are skipped (eval/bench.py DECODE_SKIPPED) and the web bundle is classification's
    **{f"bench.{f.name}": "" for f in fields(BenchSection) if f.name.startswith("browser_")},
    "bundle.web": "", "bundle.web_target": "",
    # the classification bundle's replay of sample texts against the .ort; a generation bundle replays lm.prompts
    "bundle.min_agreement": "", "bundle.sample_texts": "lm.prompts",
    # int8-static, its calibration and fusions, and the NPU files are classification's; the decoders are quantized
    # int8-dynamic (quantize.per_channel and quantize.opset apply) and checked greedy token for token
    **{f"quantize.{k}": "" for k in ("activation_type", "calibration_samples", "cls_only_last_layer", "dynamic_source",
                                     "npu_lengths", "npu_variants", "reduce_range", "skip_fusions", "static_float",
                                     "lossless_atol", "min_argmax_agreement")},
    "quantize.check_samples": "lm.check_tokens",
    # the decoders' Core ML packages take one token a step against their KV cache state (lm.max_cache)
    "export.coreml_lengths": "lm.max_cache", "export.coreml_shapes": "", "export.fast_gelu_variants": "",
    # the HTP compile is skipped for a decoder (dynamic shapes)
    **{f"npu.{f.name}": "" for f in fields(NpuSection)},
}


def validate(cfg) -> str | None:
    problem = check_names(cfg, NAMES) or source_problem(cfg.data.source, "generation") or paths_problem(cfg.data)
    problem = problem or unread_problem(cfg.data, "generation") or unreadable_path_problem(cfg)
    for rule in (_search_decoder, _prompts_given, _classification_only, _generation_settings, _token_budgets,
                 _lm_exports, _lm_bundle_choice_is_made, _bench_times_something, _teacher_is_causal,
                 _student_init_fits_teacher, _context_fits_teacher, _bench_fits_teacher, _cache_fits_memory):
        problem = problem or rule(cfg)
    return problem


def _search_decoder(cfg) -> str | None:
    """The decoder search times the int8-dynamic KV-cache graph only, and has no HTP compile."""
    from pipeline.search_checks import DEFAULT_VARIANTS

    s = cfg.search
    if tuple(s.variants) != DEFAULT_VARIANTS:
        return (f"'search.variants' = {list(s.variants)}: run.task = 'generation' searches its int8-dynamic decoder "
                f"only; set search.variants = [\"int8-dynamic\"]")
    if s.npu_compile:
        return ("'search.npu_compile' = true: run.task = 'generation' has no HTP compile (a growing KV cache has "
                "dynamic shapes); set search.npu_compile = false")
    return None


def _prompts_given(cfg) -> str | None:
    if not cfg.lm.prompts:
        return (f"'lm.prompts' is empty: the generation stages check and ship greedy continuations of them; give at "
                f"least one, e.g. {_set('lm.prompts', ['ROMEO:'])}")
    return None


def _classification_only(cfg) -> str | None:
    for key, instead in CLASSIFICATION_ONLY.items():
        section, name = key.split(".")
        default = TASK.defaults.get(section, {}).get(name, getattr(SECTIONS[section](), name))
        if (value := cfg.value(key)) != default:
            return (f"'{key}' = {value!r} is a classification setting no generation stage reads"
                    f"{f' (generation has {instead!r})' if instead else ''}: remove it, or {_set(key, default)}")
    return None


def _generation_settings(cfg) -> str | None:
    """What the generation stages would reject after the models are trained."""
    if cfg.student.arch != "llama":
        return (f"'student.arch' = {cfg.student.arch!r} is not a decoder; run.task = 'generation' builds the Llama "
                f"student: {_set('student.arch', 'llama')}")
    if cfg.baseline.cell != "lstm":
        return (f"'baseline.cell' = {cfg.baseline.cell!r}: the generation baseline is an LSTM language model; "
                f"{_set('baseline.cell', 'lstm')}")
    if cfg.baseline.distill_loss != "kl":  # MSE to the logits needs every logit: the cache holds the top-k
        return (f"'baseline.distill_loss' = {cfg.baseline.distill_loss!r}: the generation LSTM is distilled from the "
                f"teacher's cached top-k logits, by KL as the student is; {_set('baseline.distill_loss', 'kl')}")
    if cfg.teacher.fine_tune:
        return ("'teacher.fine_tune' = true: the generation teacher is used as pretrained (fine-tuning a causal LM is "
                f"not part of this pipeline); {_set('teacher.fine_tune', False)}")
    if cfg.data.max_unlabeled:
        return ("'data.max_unlabeled' is for run.task = 'classification' (texts kept without labels for distillation); "
                f"a language model's corpus has no labels to leave out: {_set('data.max_unlabeled', 0)}")
    if capped := [k for k in ("max_train", "max_validation", "max_test") if getattr(cfg.data, k)]:
        return (f"'data.{capped[0]}' caps classification examples; a generation corpus is cut into windows: "
                f"lm.teacher_windows, lm.extra_windows and lm.eval_windows size it. {_set(f'data.{capped[0]}', 0)}")
    s = cfg.student
    if (s.hidden // s.heads) % 2:
        return (f"'student.hidden' / 'student.heads' = {s.hidden} / {s.heads} gives attention heads of "
                f"{s.hidden // s.heads} values; the Llama student's rotary positions need an even head size, e.g. "
                f"{_set('student.hidden', s.heads * (s.hidden // s.heads + 1))}")
    return None


def _token_budgets(cfg) -> str | None:
    """Tokens the stages generate against the students' lm.max_cache positions (the KV cache they are saved and
    exported with: eval's samples, the quantize and export checks, the bundle's samples, the bench). A prompt's
    own length needs the tokenizer (the stage checks it); at least one token of it is counted here."""
    lm = cfg.lm
    if lm.bench_prompt_tokens + lm.bench_decode_tokens + 1 > lm.max_cache:
        need = max(lm.bench_prompt_tokens + lm.bench_decode_tokens + 1, lm.context_length)
        return (f"'lm.bench_prompt_tokens' ({lm.bench_prompt_tokens}) + 'lm.bench_decode_tokens' "
                f"({lm.bench_decode_tokens}) + 1 exceeds the students' positions 'lm.max_cache' ({lm.max_cache}); "
                f"{_set('lm.max_cache', need)} or shorten the bench")
    # eval_windows 0 = every test window: only the bench, which has the split, can count their tokens
    if lm.eval_windows > 0 and (held := lm.eval_windows * (lm.context_length + 1)) < lm.bench_prompt_tokens:
        # the bench's prompt is cut from the held-out windows run together: fewer tokens were timed than reported
        return (f"'lm.bench_prompt_tokens' = {lm.bench_prompt_tokens} is longer than the held-out text the bench cuts "
                f"it from: lm.eval_windows ({lm.eval_windows}) windows of lm.context_length + 1 "
                f"({lm.context_length + 1}) tokens hold {held}; {_set('lm.bench_prompt_tokens', held)} or raise "
                f"lm.eval_windows")
    for key in ("lm.check_tokens", "lm.sample_tokens"):
        if (n := cfg.value(key)) + 1 > lm.max_cache:
            return (f"'{key}' = {n}: a prompt of even one token + {n} new tokens exceeds the students' positions "
                    f"'lm.max_cache' ({lm.max_cache}); generate fewer, e.g. {_set(key, lm.max_cache // 2)}, or "
                    f"{_set('lm.max_cache', max(n + 64, lm.context_length))}")
    if lm.context_length > lm.max_cache:
        # the students would train on positions their exported graphs and bundle do not have
        return (f"'lm.context_length' = {lm.context_length} is longer than the students' positions 'lm.max_cache' "
                f"({lm.max_cache}), the table they are trained, exported and shipped with; shorten the windows, "
                f"{_set('lm.context_length', lm.max_cache)}, or raise lm.max_cache")
    return None


def _student_init_fits_teacher(cfg) -> str | None:
    from distill.student import check_causal_init

    return teacher_problem(cfg, check_causal_init)


def _bench_times_something(cfg) -> str | None:
    """bench.targets whose every entry the decode bench skips: the run would time nothing and report no goal."""
    from eval.bench import DECODE_SKIPPED

    if cfg.bench.targets and all(t in DECODE_SKIPPED for t in cfg.bench.targets):
        return (f"'bench.targets' = {list(cfg.bench.targets)}: the generation bench skips each of them "
                f"({DECODE_SKIPPED[cfg.bench.targets[0]]}), so it would time nothing; add one it times, e.g. "
                f"{_set('bench.targets', [*cfg.bench.targets, 'mobile-cpu'])}")
    return None


def _teacher_is_causal(cfg) -> str | None:
    """The teacher stage's check (a decoder, not an encoder) where the teacher's config is known at load."""
    from distill.teacher_checks import check_causal

    if (config := teacher_config(cfg)) is None or not hasattr(config, "model_type"):
        return None
    try:
        check_causal(config, repr(cfg.teacher.model))
    except PipelineError as e:
        return str(e)
    return None


def _bench_fits_teacher(cfg) -> str | None:
    """The teacher is timed decoding too: its prompt and new tokens must fit its own position table."""
    from distill.teacher_checks import position_limit

    lm = cfg.lm
    need = lm.bench_prompt_tokens + lm.bench_decode_tokens + 1
    if "teacher" not in cfg.quantize.models:  # only the graphs quantize builds are timed
        return None
    if (config := teacher_config(cfg)) is None or not (limit := position_limit(config)) or need <= limit:
        return None
    return (f"'lm.bench_prompt_tokens' ({lm.bench_prompt_tokens}) + 'lm.bench_decode_tokens' "
            f"({lm.bench_decode_tokens}) + 1 exceeds the teacher's positions ({config.model_type}: {limit}), and the "
            f"bench times the teacher decoding as well; shorten the bench, e.g. "
            f"{_set('lm.bench_prompt_tokens', max(1, limit - lm.bench_decode_tokens - 1))}")


def _cache_fits_memory(cfg) -> str | None:
    """lm.max_cache is the students' position table and KV cache size. The teacher's positions do not bound it:
    the students train on lm.context_length windows (within the teacher's table, checked above), so every position
    past those is untrained either way. Memory does: KV_CACHE_MAX_BYTES."""
    lm, s = cfg.lm, cfg.student
    per = 2 * s.layers * s.hidden * 4  # keys and values, every layer, student.hidden wide (as many KV heads as heads)
    if lm.max_cache * per <= KV_CACHE_MAX_BYTES:
        return None
    return (f"'lm.max_cache' = {lm.max_cache}: the student's KV cache for that many positions takes "
            f"{lm.max_cache * per / (1 << 30):.1f} GiB (keys and values of {s.layers} layers x {s.hidden} floats, "
            f"{per} bytes a position), over the {KV_CACHE_MAX_BYTES >> 30} GiB limit: the Core ML package allocates it "
            f"whole, and a phone app holds it beside the model; {_set('lm.max_cache', KV_CACHE_MAX_BYTES // per)} or "
            f"less")


def _context_fits_teacher(cfg) -> str | None:
    """The logits stage's check (lm.context_length within the teacher's positions), before any stage runs."""
    return teacher_positions_problem(cfg, "lm.context_length")


def _lm_exports(cfg) -> str | None:
    """The graphs and Core ML packages the generation stages build: a name they do not would be skipped after
    training."""
    from export.coreml import COREML_TARGETS, IOS18_SPEC
    from export.hf_layout import GRAPH_FILES

    q, e = cfg.quantize, cfg.export
    for key, names in (("quantize.variants", q.variants), ("export.ort_variants", e.ort_variants)):
        if other := [v for v in names if v not in GRAPH_FILES]:
            return (f"'{key}' has {other}: the generation stages build the decoders' {', '.join(GRAPH_FILES)} "
                    f"graphs only; {_set(key, [v for v in names if v in GRAPH_FILES] or list(GRAPH_FILES))}")
    if other := [m for m in e.coreml_models if m not in COREML_MODELS]:
        return (f"'export.coreml_models' has {other}: Core ML packages are built for {', '.join(COREML_MODELS)}; "
                f"{_set('export.coreml_models', [m for m in e.coreml_models if m in COREML_MODELS])}")
    if "student" in e.coreml_models and e.coreml_variants and COREML_TARGETS[e.coreml_target] < IOS18_SPEC:
        return (f"'export.coreml_target' = {e.coreml_target!r}: the student's Core ML package keeps its KV cache as "
                f"Core ML state, which needs iOS18 / macOS15 or later: {_set('export.coreml_target', 'iOS18')}, or "
                f"leave the student out of export.coreml_models")
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
    made = list(q.variants)  # every one a graph the stages build: _lm_exports checked that first
    if not made:
        return (f"'quantize.variants' {q.variants} names no graph the generation stages build ({', '.join(GRAPH_FILES)}); "
                f"e.g. {_set('quantize.variants', list(GRAPH_FILES))}")
    if b.variant != "auto" and b.variant not in made:
        return (f"'bundle.variant' = {b.variant!r}: no student graph of it is made (made: {', '.join(made)}); pick one "
                f"of those or {_set('bundle.variant', 'auto')}")
    return None

