"""Load-time checks of the [search] section (the student search, pipeline/search.py): run by
pipeline/config_rules.py with the other rules, so `show-config` rejects what `search` would. The search's
CLI flags are --set overrides of these keys, so every message names the flag too."""
from __future__ import annotations

from pipeline.errors import PipelineError

# targets the search can time: ONNX Runtime on this host's CPU (the rest need a device or a browser)
SEARCH_TARGETS = ("mobile-cpu", "host-cpu")
# the quantize stage's files a candidate may ship (search.variants): every arch (bert, npu, lstm, gru) has them
SEARCH_VARIANTS = ("int8-dynamic", "int8-static", "fp16", "fp32")
# search.variants' default: the file a phone app ships by default, scored as the trained PyTorch model (the
# behaviour and study names of searches from before search.variants existed)
DEFAULT_VARIANTS = ("int8-dynamic",)


def target_problem(name: str) -> str | None:
    from eval.targets import TARGETS

    if name not in TARGETS:
        return (f"search --target {name!r} ('search.target') is not a known target; the search takes "
                f"{', '.join(SEARCH_TARGETS)}")
    if name not in SEARCH_TARGETS:
        return (f"search --target {name} ('search.target'): the search times candidates with ONNX Runtime on "
                f"this host's CPU, which only {', '.join(SEARCH_TARGETS)} are; pick one of those")
    return None


def space_problem(task: str, name: str) -> str | None:
    """search.space must be one of the run's task's spaces (distill/search_space.py TASK_SPACES)."""
    from distill.search_space import TASK_SPACES

    spaces = TASK_SPACES.get(task, {})
    if name in spaces or not spaces:  # an unknown run.task is the task registry's error
        return None
    other = next((t for t, known in TASK_SPACES.items() if name in known), None)
    why = f"a {other} search space" if other else "not a known search space"
    return f"search --space {name!r} ('search.space') is {why}; run.task = {task!r} has: {', '.join(spaces)}"


def check_target(name: str):
    """The target the search times on (eval.targets.TARGETS), or target_problem's error."""
    from eval.targets import TARGETS

    if problem := target_problem(name):
        raise PipelineError(problem)
    return TARGETS[name]


def check(cfg) -> str | None:
    """The first problem of cfg.search, or None. target "" and budget_ms 0 mean "not set": fine until the
    search runs (pipeline/search.py asks for them then)."""
    s = cfg.search
    if s.target and (problem := target_problem(s.target)):
        return problem
    if s.budget_ms < 0:
        return f"search --budget-ms {s.budget_ms:g} ('search.budget_ms'): give a positive latency budget in milliseconds"
    if s.max_mb < 0:
        return f"search --max-mb {s.max_mb:g} ('search.max_mb'): give a size limit in MB (> 0), or 0 for none"
    if s.trials < 1:
        return f"search --trials {s.trials} ('search.trials'): give at least 1 trial"
    if s.survivors < 0:
        return (f"search --survivors {s.survivors} ('search.survivors'): give how many of the best trials to train "
                f"again on the full schedule (0 for none)")
    if not 0 <= s.seed < 2**32:  # the samplers' numpy seed range
        return f"search --seed {s.seed} ('search.seed'): give a seed from 1 to 2**32 - 1, or 0 for run.seed"
    if not 0 < s.fraction <= 1:
        return f"search --fraction {s.fraction:g} ('search.fraction'): give a share of distill.epochs in (0, 1]"
    if problem := space_problem(cfg.run.task, s.space):
        return problem
    if s.storage and "://" not in s.storage:
        return (f"'search.storage' = {s.storage!r} is not a database URL: give \"\" (SQLite in the run folder) or "
                f"an SQLAlchemy URL such as \"sqlite:////shared/study.db\" or \"postgresql://user@host/db\"")
    if s.storage.startswith("sqlite") and s.storage.split("://", 1)[1] in ("", "/", "/:memory:"):
        return (f"'search.storage' = {s.storage!r} is an in-memory database: the study would vanish with the process "
                f"and no worker could join it; give a file, e.g. \"sqlite:////shared/study.db\", or \"\"")
    return variants_problem(cfg)


def variants_problem(cfg) -> str | None:
    """search.variants: given and known. Which of them a task's search can ship is the task's own rule
    (pipeline/tasks/<task>/checks.py)."""
    v = cfg.search.variants
    if not v:
        return "'search.variants' is empty: name the quantized files a candidate may ship, e.g. [\"int8-dynamic\"]"
    if bad := [x for x in v if x not in SEARCH_VARIANTS]:
        return f"'search.variants' has {bad}: the search can time {', '.join(SEARCH_VARIANTS)}"
    return None
