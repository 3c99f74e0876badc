"""The generation task's load-time checks: what its steps would otherwise reject after training."""
from __future__ import annotations

import pipeline.tasks.generation.data  # noqa: F401  (registers the generation data sources)
from pipeline.config_rules import check_names, set_fix as _set
from pipeline.data import paths_problem, source_problem

NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "quantize.models": ("model", ("pipeline.tasks.generation:LM_FOLDERS",)),
    # the decode workload's targets (measured or skipped with a reason), not classification's whole registry
    "bench.targets": ("target for generation", ("eval.bench:DECODE_TARGETS", "eval.bench:DECODE_SKIPPED")),
}


def validate(cfg) -> str | None:
    problem = check_names(cfg, NAMES) or source_problem(cfg.data.source, "generation") or paths_problem(cfg.data)
    for rule in (_prompts_given, _generation_settings, _lm_bundle_choice_is_made, _search_space):
        problem = problem or rule(cfg)
    return problem


def _prompts_given(cfg) -> str | None:
    if not cfg.lm.prompts:
        return (f"'lm.prompts' is empty: the generation stages check and ship greedy continuations of them; give at "
                f"least one, e.g. {_set('lm.prompts', ['ROMEO:'])}")
    return None


def _generation_settings(cfg) -> str | None:
    """What the generation stages would reject after the models are trained."""
    if cfg.student.arch != "llama":
        return (f"'student.arch' = {cfg.student.arch!r} is not a decoder; run.task = 'generation' builds the Llama "
                f"student: {_set('student.arch', 'llama')}")
    if cfg.teacher.fine_tune:
        return ("'teacher.fine_tune' = true: the generation teacher is used as pretrained (fine-tuning a causal LM is "
                f"not part of this pipeline); {_set('teacher.fine_tune', False)}")
    if cfg.data.max_unlabeled:
        return ("'data.max_unlabeled' is for run.task = 'classification' (texts kept without labels for distillation); "
                f"a language model's corpus has no labels to leave out: {_set('data.max_unlabeled', 0)}")
    lm = cfg.lm
    if lm.bench_prompt_tokens + lm.bench_decode_tokens + 1 > lm.max_cache:
        return (f"'lm.bench_prompt_tokens' ({lm.bench_prompt_tokens}) + 'lm.bench_decode_tokens' "
                f"({lm.bench_decode_tokens}) + 1 exceeds the students' positions 'lm.max_cache' ({lm.max_cache}); "
                f"{_set('lm.max_cache', lm.bench_prompt_tokens + lm.bench_decode_tokens + 1)} or shorten the bench")
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


def _search_space(cfg) -> str | None:
    """search.space names a generation space (the classification-only ones, e.g. 'tiny-rnn', pass the shared
    registry check in pipeline/config_rules.py but sample encoders)."""
    from distill.search_space import LM_SPACES

    if cfg.search.space not in LM_SPACES:
        return (f"'search.space' = {cfg.search.space!r} is a classification search space; run.task = 'generation' "
                f"searches decoders: pick one of {', '.join(LM_SPACES)} (--space)")
    return None
