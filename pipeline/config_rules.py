"""Checks on the values of settings, declared as tables so a new setting gets its rule in one line.

RANGES: one rule per key (numbers, lists of numbers, choices). REGISTRY_NAMES: keys whose value (or
every item of the list) must be a key of a registry; the registry module is imported only when the
check runs, so a new registry entry is accepted without touching this file. CROSS: rules that read more
than one key. All of them run when the config loads, before any stage, so `show-config` rejects exactly
what a run would reject and a bad value never costs a training run.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from pipeline.errors import PipelineError
from pipeline.task import lazy, resolve

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
            if problem := rule(v):
                return f"item {i} ({v!r}) {problem}"
        return None
    return check


FRACTION = between(0.0, 1.0)
HELD_OUT = between(0.0, 1.0, hi_open=True)  # a split fraction of 1 would leave no training data

RANGES: dict[str, Rule] = {
    "run.seed": lambda v: None if 0 <= v < 2**32 else "must be in [0, 2**32 - 1] (numpy's seed range)",
    "run.threads": at_least(0),
    "data.validation_fraction": HELD_OUT,
    "data.test_fraction": HELD_OUT,
    "data.max_train": at_least(0),
    "data.max_validation": at_least(0),
    "data.max_test": at_least(0),
    "data.max_unlabeled": at_least(0),
    "npu.emulator_samples": at_least(0),  # 0 = the whole test split
    "npu.emulator_chips": one_of("probe", "all"),
    "data.label_variants": one_of("merge", "error", "keep"),
    "search.select": one_of("one-se", "best"),
    "teacher.max_length": at_least(3),  # [CLS], one word piece, [SEP]: at 2 every input is the same two tokens
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
    "student.max_length": at_least(3),  # as teacher.max_length
    "distill.epochs": positive,
    "distill.steps": at_least(0),  # 0 = distill.epochs
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
    "baseline.steps": at_least(0),  # 0 = baseline.epochs
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
    "lm.sample_tokens": positive,  # the bundle's samples: a continuation of none cannot be replayed
    "lm.max_cache": positive,
    "lm.check_tokens": positive,
    "lm.bench_prompt_tokens": positive,
    "lm.bench_decode_tokens": positive,
    "lm.bench_iterations": positive,
    "bundle.accuracy_window": FRACTION,
    "bundle.min_agreement": FRACTION,
    "bundle.sample_texts": at_least(1),  # verify-bundle replays them: a bundle without one cannot be checked
    "phone.threads": each(positive),
    "phone.seq_length": at_least(3),  # [CLS], one word piece, [SEP]: as bench.seq_lengths
    "phone.repeats": positive,
}

# key -> (what a name there is, ("module:attribute", ...)): the value, or each item of a list, must be a key of
# one of the named registries. These serve every task; a task's own are in pipeline/tasks/<task>/checks.py.
REGISTRY_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "quantize.variants": ("ONNX variant", ("export.registry:ONNX_VARIANTS",)),
    "export.ort_variants": ("ONNX variant", ("export.registry:ONNX_VARIANTS",)),
    "export.ort_target_platform": ("ORT platform", ("export.ort_format:PLATFORMS",)),
    "export.fast_gelu_variants": ("FastGelu source variant", ("export.web_model:FAST_GELU_SOURCES",)),
    "quantize.static_float": ("int8-static float part", ("export.quantize:STATIC_FLOAT",)),
    "npu.chips": ("Snapdragon chip", ("eval.qnn:CHIPS",)),
    "export.coreml_target": ("Core ML deployment target for an mlprogram", ("export.coreml:COREML_TARGETS",)),
    "phone.providers": ("phone provider", ("eval.phone_android:PROVIDERS",)),
    "phone.compute_units": ("Core ML compute unit", ("eval.phone_apple:COMPUTE_UNITS",)),
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


def _folders(cfg) -> str | None:
    """run.runs_dir and bundle.dist_dir: folders (not files), and the published bundles apart from the run
    folder. Publishing replaces <dist_dir>/<run> (and <run>-web) whole: were that the run folder, or inside
    or above it, the run's own stages would be deleted."""
    for key, default in (("run.runs_dir", "runs"), ("bundle.dist_dir", "dist")):
        value = cfg.value(key)
        if not value.strip():  # an unset shell variable: the run would land in the current folder
            return f"'{key}' is empty (an unset variable?); point it at a folder, e.g. \"{default}\""
        path = Path(value)
        try:
            if "\0" in value:  # pathlib's exists() says False for it, and resolve() raised
                raise ValueError("a NUL byte in the name")
            if path.exists() and not path.is_dir():
                return f"'{key}' = {str(path)!r} is a file, not a folder; point it at a folder (made if missing)"
            path.resolve()
        except (OSError, ValueError, RuntimeError) as e:  # too long a name, a NUL byte, a symlink loop
            return (f"'{key}' = {str(path)[:80]!r}{'...' if len(str(path)) > 80 else ''} is not a usable path "
                    f"({getattr(e, 'strerror', None) or e}); point it at a folder, e.g. \"{default}\"")
    run = cfg.run_dir.resolve()
    for name in (cfg.run.name, f"{cfg.run.name}-web"):
        dest = (Path(cfg.bundle.dist_dir) / name).resolve()
        if dest == run or run in dest.parents or dest in run.parents:
            return (f"'bundle.dist_dir' = {cfg.bundle.dist_dir!r} publishes {dest}, which "
                    f"{'is' if dest == run else 'is inside' if run in dest.parents else 'holds'} the run folder "
                    f"{run}: publishing replaces that folder whole and would delete the run. Point bundle.dist_dir "
                    f"at a folder apart from run.runs_dir, e.g. \"dist\"")
    return None


def _teacher_given(cfg) -> str | None:
    from distill.teachers import spec_problem

    if not cfg.teacher.model.strip():
        return ("'teacher.model' is empty: give a local model folder or a hub id (the demos' packaged teachers: "
                "configs/demo.toml, configs/gpt-demo.toml)")
    return spec_problem(cfg.teacher.model, cfg.run.task, missing_ok=True)


def _opset(cfg) -> str | None:
    from export.onnx_export import opset_problem

    return opset_problem(cfg.quantize.opset)


def _coreml_shapes(cfg) -> str | None:
    """Two enumerated inputs need iOS18 / macOS15 (coremltools refuses them below, at the export stage)."""
    from export.coreml import COREML_TARGETS, IOS18_SPEC

    e = cfg.export
    if e.coreml_models and e.coreml_shapes == "enumerated" and COREML_TARGETS[e.coreml_target] < IOS18_SPEC:
        return (f"'export.coreml_shapes' = 'enumerated' with two inputs needs export.coreml_target iOS18 or later "
                f"(it is {e.coreml_target}); raise the target, e.g. {set_fix('export.coreml_target', 'iOS18')}, or "
                f"use 'range' or 'auto'")
    return None


def _fp16_training_has_cuda(cfg) -> str | None:
    import torch

    if cfg.train.precision == "fp16" and not torch.cuda.is_available():
        return (f"'train.precision' = 'fp16' needs a CUDA GPU, and this machine has none; use bf16 or fp32, e.g. "
                f"{set_fix('train.precision', 'auto')} (bf16 where the CPU has bf16 units)")
    return None


def _phone_remote_dir(cfg) -> str | None:
    from eval.phone_android import SAFE_REMOTE

    if not SAFE_REMOTE.match(cfg.phone.remote_dir):
        return (f"'phone.remote_dir' = {cfg.phone.remote_dir!r}: use an absolute path of letters, digits and ./_- "
                f"(the phone's shell parses it), e.g. {set_fix('phone.remote_dir', '/data/local/tmp/pocketformer')}")
    return None


def set_fix(key: str, value: Any) -> str:
    """A fix as the user types it: --set key=value (TOML value syntax). A list or table holding strings is quoted
    for the shell, which would otherwise strip the strings' double quotes and leave a value that is not TOML."""
    item = f"{key}={json.dumps(value, separators=(',', ':'))}"
    if isinstance(value, (list, dict)) and '"' in item:
        item = shlex.quote(item)
    return f"--set {item}"


def _prompts(cfg) -> str | None:
    from pipeline.data_clean import bare

    prompts = cfg.lm.prompts
    # zero-width characters alone are no text either (a data text of them is refused the same way), nor is any
    # Unicode space (a no-break space); the fix keeps the prompts that have text, by the same test
    blank = [not bare(p) for p in prompts]
    if True in blank:
        return (f"'lm.prompts' item {blank.index(True)} is empty: a prompt needs text to continue; give one or remove "
                f"it, e.g. {set_fix('lm.prompts', [p for p, b in zip(prompts, blank) if not b] or ['ROMEO:'])}")
    return None


def _ort_optimizers(cfg) -> str | None:
    from export.ort_format import check_optimizers

    try:
        check_optimizers(cfg.export.ort_disabled_optimizers)
    except PipelineError as err:
        return str(err)
    return None


_search = lazy("pipeline.search_checks:check")  # the [search] section's rules live beside the search


CROSS: list[Callable[[Any], "str | None"]] = [_hidden_divisible_by_heads, _split_fractions_leave_training_data,
                                              _prompts, _ort_optimizers, _folders, _teacher_given, _opset,
                                              _coreml_shapes, _fp16_training_has_cuda, _phone_remote_dir, _search]


def teacher_config(cfg):
    """The teacher's Hugging Face config as far as a config load can know it without loading the model: a packaged
    teacher's fields from the registry (distill/teachers.py), a local folder's config.json. None for a hub id or an
    unreadable config.json (the teacher stage checks those once loaded, and names the file)."""
    from distill.teachers import TEACHERS

    if packaged := TEACHERS.get(cfg.teacher.model):
        return SimpleNamespace(**packaged.config)
    folder = Path(cfg.teacher.model)
    if not (folder / "config.json").is_file():
        return None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder)
    except (OSError, ValueError):
        return None


def teacher_problem(cfg, check: Callable[[Any, Any], None]) -> str | None:
    """check(student section, teacher config) where the teacher's config is known at load (teacher_config), so
    show-config refuses the student.init the teacher stage would."""
    if cfg.student.init == "random" or (config := teacher_config(cfg)) is None:
        return None
    try:
        check(cfg.student, config)
    except PipelineError as e:
        return str(e)
    return None


def teacher_positions_problem(cfg, key: str) -> str | None:
    """key (the tokens the teacher reads per input) beyond the teacher's position table, where teacher_config
    knows it. The teacher or logits stage checks a hub teacher once it is loaded."""
    from distill.teacher_checks import position_limit

    if (config := teacher_config(cfg)) is None or not (limit := position_limit(config)):
        return None
    value = cfg.value(key)
    if value <= limit:
        return None
    return (f"'{key}' = {value}, but the teacher ({config.model_type}) has positions for {limit} tokens only; set "
            f"{key} <= {limit}, e.g. {set_fix(key, limit)}")


def check_names(cfg, names: dict[str, tuple[str, tuple[str, ...]]]) -> str | None:
    """The first value of names' keys that no named registry knows, as a message listing the known ones."""
    for dotted, (what, refs) in names.items():
        value = cfg.value(dotted)
        known = list(dict.fromkeys(name for ref in refs for name in resolve(ref)))
        if bad := [v for v in (value if isinstance(value, list) else [value]) if v not in known]:
            return f"unknown {what} {', '.join(map(repr, bad))} in '{dotted}'. Known: {', '.join(known)}"
        if isinstance(value, list) and (twice := [v for i, v in enumerate(value) if v in value[:i]]):
            # a model listed twice was exported, checked and reported twice
            return (f"'{dotted}' lists {twice[0]!r} twice; give each {what} once: "
                    f"{set_fix(dotted, list(dict.fromkeys(value)))}")
    return None


def check_all(cfg) -> str | None:
    """The first problem as a message naming the key, or None. cfg is a pipeline.config.Config. The shared
    rules first, then the task's own (pipeline/tasks/<task>/checks.py)."""
    from pipeline.tasks import task_of

    for dotted, rule in RANGES.items():
        value = cfg.value(dotted)
        if problem := rule(value):
            return f"'{dotted}' = {value!r} {problem}"
    problem = check_names(cfg, REGISTRY_NAMES)
    for check in CROSS:
        problem = problem or check(cfg)
    task = task_of(cfg)
    return problem or (task.validate(cfg) if task.validate else None)
