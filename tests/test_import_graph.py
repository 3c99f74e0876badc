"""The import graph of the library packages: one-way dependencies, checked statically.

Every .py of pipeline/, distill/, export/ and eval/ is parsed (function-level imports included: a
deferred import hides a cycle, it does not remove it) and each import resolved to a project module.
Two rules: no cycle between modules, and distill/, export/ and eval/ take from pipeline/ only its
errors and the section dataclasses (plus pure helpers) of its config - the stage wiring sits above them.
tools/ (developer probes) may import anything and is not walked.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "distill", "export", "eval")
LOWER = ("distill", "export", "eval")  # the packages pipeline/ wires together
# what the lower packages may take from pipeline/: module -> allowed names (None = any name)
ALLOWED_CONFIG_HELPERS = {"student_positions", "student_serving_length"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, tuple[str, ...], int]]:
    """(project module imported, names taken from it, line) for every import statement in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                target = a.name
                while target and target not in modules:  # import a.b.c binds a, loads a.b.c
                    target = target.rpartition(".")[0]
                if target:
                    out.append((target, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in modules:  # from eval import latency: the submodule itself
                    out.append((sub, (), node.lineno))
                elif base in modules:
                    out.append((base, (a.name,), node.lineno))
    return out


def graph() -> dict[str, dict[str, list]]:
    modules = project_modules()
    g: dict[str, dict[str, list]] = {m: {} for m in modules}
    for m, path in modules.items():
        for target, names, line in imports_of(m, path, modules):
            if target != m and not (target in PACKAGES and not names):  # a bare package __init__ is empty
                g[m].setdefault(target, []).append((names, line))
    return g


def cycles(g: dict[str, dict]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def _allowed(target: str, names: tuple[str, ...]) -> bool:
    if target == "pipeline.errors":
        return True
    if target == "pipeline.config":
        return bool(names) and all(n.endswith("Section") or n in ALLOWED_CONFIG_HELPERS for n in names)
    return False


def layer_violations(g: dict[str, dict[str, list]]) -> list[str]:
    out = []
    for m, targets in sorted(g.items()):
        if m.split(".")[0] not in LOWER:
            continue
        for target, uses in sorted(targets.items()):
            if target.split(".")[0] != "pipeline":
                continue
            for names, line in uses:
                if not _allowed(target, names):
                    what = f"{target} ({', '.join(names)})" if names else target
                    out.append(f"{m}:{line} imports {what}")
    return out


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    src = tmp_path / "probe.py"
    src.write_text("import numpy\nfrom eval import latency as L\n\n\ndef f():\n    from .rows import p50\n"
                   "    import pipeline.config\n    from pipeline.config import BenchSection, load_config\n")
    modules = project_modules()
    found = {(t, names) for t, names, _ in imports_of("eval.probe", src, modules)}
    assert found == {("eval.latency", ()), ("eval.rows", ("p50",)), ("pipeline.config", ()),
                     ("pipeline.config", ("BenchSection",)), ("pipeline.config", ("load_config",))}
    assert not _allowed("pipeline.config", ("load_config",)) and not _allowed("pipeline.config", ())
    assert _allowed("pipeline.config", ("BenchSection",)) and _allowed("pipeline.errors", ("PipelineError",))
    assert cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles (move the shared piece into a lower module):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_lower_packages_import_only_errors_and_config_sections_from_pipeline():
    bad = layer_violations(graph())
    assert not bad, ("distill/, export/ and eval/ may import from pipeline/ only pipeline.errors and the "
                     "XxxSection dataclasses / pure helpers of pipeline.config:\n" + "\n".join(bad))


def _is_task(node: ast.AST) -> bool:
    """`x.task`, `task`, `x["task"]` or `x.get("task")`: a task name read from a config, a bundle's metadata."""
    key = lambda n: isinstance(n, ast.Constant) and n.value == "task"  # noqa: E731
    return (isinstance(node, ast.Attribute) and node.attr == "task" or isinstance(node, ast.Name) and node.id == "task"
            or isinstance(node, ast.Subscript) and key(node.slice)
            or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and bool(node.args) and key(node.args[0]))


def task_branches(modules: dict[str, Path]) -> list[str]:
    """A task name compared with a string (`cfg.run.task != "classification"`, `meta.get("task") == GEN` with
    GEN a module-level string, `task in ("generation",)`) outside the tasks' own packages: a shared module
    deciding by task name, which a third task would fall through."""
    out = []
    for name, path in modules.items():
        if name.startswith("pipeline.tasks."):
            continue
        tree = ast.parse(path.read_text(), str(path))
        named = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}
        for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Compare)),
                           key=lambda n: (n.lineno, n.col_offset)):
            sides = [node.left, *node.comparators]
            if not any(_is_task(s) for s in sides):
                continue
            consts = [c.value if isinstance(c, ast.Constant) else named[c.id] for s in sides if not _is_task(s)
                      for c in ast.walk(s) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                      or isinstance(c, ast.Name) and c.id in named]
            if consts:
                out.append(f"{name}:{node.lineno} compares a task with {consts[0]!r}")
    return out


def test_the_scan_finds_a_branch_on_a_task_name(tmp_path):
    (tmp_path / "probe.py").write_text('GEN = "generation"\n\n\ndef f(cfg, meta, task):\n'
                                       '    if cfg.run.task != "classification":\n        return 1\n'
                                       '    if meta.get("task") == GEN or meta["task"] == "x":\n        return 2\n'
                                       '    return task in ("generation",)\n')
    (tmp_path / "ok.py").write_text('def f(cfg, meta):\n'
                                    '    return cfg.run.task == cfg.other.task or meta.get("kind") == "app"\n')
    found = task_branches({"eval.probe": tmp_path / "probe.py", "eval.ok": tmp_path / "ok.py"})
    assert found == ["eval.probe:5 compares a task with 'classification'",
                     "eval.probe:7 compares a task with 'generation'", "eval.probe:7 compares a task with 'x'",
                     "eval.probe:9 compares a task with 'generation'"]


def test_only_the_tasks_branch_on_a_task_name():
    """run.task picks a Task in pipeline/tasks/__init__.py; what differs by task lives in that task's package
    (its steps, checks, search), so a shared module never asks which task it is in."""
    bad = task_branches(project_modules())
    assert not bad, "move the task-specific rule into pipeline/tasks/<task>/:\n" + "\n".join(bad)


def cross_task_uses(modules: dict[str, Path], g: dict[str, dict[str, list]]) -> list[str]:
    """A task package (pipeline/tasks/<task>/) reaching into another task's package, by an import or by the
    "module:function" string of a lazy step: what they share belongs in pipeline/tasks/common.py or skips.py."""
    tasks = {m.split(".")[2] for m in modules if m.count(".") >= 3 and m.startswith("pipeline.tasks.")}
    out = []
    for m, path in modules.items():
        parts = m.split(".")
        if len(parts) < 3 or parts[:2] != ["pipeline", "tasks"] or parts[2] not in tasks:
            continue
        used = set(g[m]) | {c.value.partition(":")[0] for c in ast.walk(ast.parse(path.read_text()))
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)
                            and c.value.startswith("pipeline.tasks.")}
        out += [f"{m} uses {u}" for u in sorted(used)
                if u.startswith("pipeline.tasks.") and u.count(".") >= 2 and u.split(".")[2] in tasks - {parts[2]}]
    return out


def test_a_task_uses_nothing_of_another_task():
    bad = cross_task_uses(project_modules(), graph())
    assert not bad, "move what both tasks use into pipeline/tasks/common.py or skips.py:\n" + "\n".join(bad)
