"""A third task is "a new task module plus registry entries, not a copy of stages" (docs/adding-a-task.md): a toy
task registered beside classification and generation loads through the normal config loader (its defaults and
its own checks), runs through the shared stage runner (order, manifests, skips, its own fingerprints), publishes
a bundle verify-bundle replays with the toy's verify, and works through the CLI. Its steps are small functions
that write a few files: nothing trains, the whole module runs in seconds."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config import TeacherSection, config_from_dict, load_config, read_keys
from pipeline.errors import PipelineError
from pipeline.manifest import read_manifest
from pipeline.stage import STAGES, default_targets, run, status, statuses
from pipeline.task import Step, Task
from pipeline.tasks import TASKS, task_of

TOY = "toy"
# model name -> (stage, sub-folder), as Task.models: the toy's steps write each model's folder
TOY_MODELS = {"teacher": ("teacher", "model"), "student": ("distill", "student")}
# what each toy step reads (Step.reads): its fingerprint. Deliberately unlike classification's (which reads
# student.* in distill and teacher.max_length in teacher and baseline), so a test can tell whose reads count.
TOY_READS = {
    "data": ("data.max_train",),
    "teacher": ("teacher.model", "teacher.epochs"),
    "logits": ("augment.copies",),
    "distill": ("distill.*", "-distill.alpha"),  # a wildcard with one key taken back out
    "baseline": ("baseline.hidden",),
    "eval": (),
    "quantize": ("quantize.models",),
    "compile": (),
    "export": (),
    "peer": (),
    "bench": ("bench.iterations",),
    "report": (),
    "bundle": ("bundle.dist_dir",),
    "web-bundle": (),
}
MAX_EPOCHS = 10  # the toy's own load-time rule


def _record(ctx) -> dict:
    """What every toy step writes: the settings it reads and a digest of each input's record, so a change upstream
    reaches this stage's files (and so what depends on it). Reading an input that has not run fails here."""
    settings = {k: ctx.cfg.value(k) for k in read_keys(TOY_READS[ctx.name])}
    inputs = {dep: hashlib.sha256((ctx.input(dep) / "record.json").read_bytes()).hexdigest() for dep in ctx.deps}
    (ctx.out / "record.json").write_text(json.dumps({"stage": ctx.name, "settings": settings, "inputs": inputs},
                                                    sort_keys=True))
    for model, (stage, sub) in TOY_MODELS.items():
        if stage == ctx.name:
            (ctx.out / sub).mkdir()
            (ctx.out / sub / "weights.txt").write_text(f"{model} {ctx.cfg.run.seed}")
    return {"toy": ctx.name, "settings": len(settings)}


def toy_data(ctx) -> dict:
    n = ctx.cfg.data.max_train or 8
    (ctx.out / "train.txt").write_text("".join(f"toy text {i}\n" for i in range(n)))
    return {**_record(ctx), "train": n}


def toy_eval(ctx) -> dict:
    quality = task_of(ctx.cfg).quality  # the column the task declares
    scores = {model: {quality: 0.5} for model in TOY_MODELS}
    (ctx.out / "scores.json").write_text(json.dumps(scores, sort_keys=True))
    return {**_record(ctx), "quality": quality}


def toy_bundle(ctx) -> dict:
    """A real bundle through the shared tail (export.bundle.finish: metadata.json with hashes and digest, README,
    the published copy at <bundle.dist_dir>/<run>)."""
    from export.bundle import finish

    summary = _record(ctx)
    (ctx.out / "student").mkdir()
    (ctx.out / "student" / "weights.txt").write_bytes((ctx.input("distill") / "student" / "weights.txt").read_bytes())
    dist = Path(ctx.cfg.bundle.dist_dir) / ctx.cfg.run.name
    finish(ctx.out, {"task": TOY, "kind": "app", "run": ctx.cfg.run.name, "model": "student"},
           lambda meta: f"# toy bundle\n\n{len(meta['files'])} files\n", dist)
    return {**summary, "dist": str(dist)}


def toy_verify(bundle: Path, files: dict) -> dict:
    from pipeline.verify_bundle_meta import require_digest

    meta = files["meta"]
    require_digest(bundle, meta)
    weights = (bundle / "student" / "weights.txt").read_text()
    return {"bundle": str(bundle), "files_checked": files["checked"], "unlisted_files": files["unlisted"],
            "lines": [f"toy {meta['model']}: {weights}"]}


def toy_validate(cfg) -> str | None:
    from pipeline.config_rules import check_names, set_fix

    if problem := check_names(cfg, {"quantize.models": ("toy model", (f"{__name__}:TOY_MODELS",))}):
        return problem
    if cfg.distill.epochs > MAX_EPOCHS:
        return (f"'distill.epochs' = {cfg.distill.epochs:g}: the toy task distils for at most {MAX_EPOCHS} epochs; "
                f"{set_fix('distill.epochs', MAX_EPOCHS)}")
    return None


def toy_task(calls: list[str]) -> Task:
    """The whole third task: one binding, one Step per non-optional stage of the shared graph (no search)."""
    special = {"data": toy_data, "eval": toy_eval, "bundle": toy_bundle}

    def step(name: str) -> Step:
        def fn(ctx):
            calls.append(ctx.name)
            return special.get(ctx.name, _record)(ctx)
        return Step(fn, TOY_READS[name])

    return Task(name=TOY, doc="a toy task: steps that write small files", models=TOY_MODELS, quality="accuracy",
                steps={name: step(name) for name in TOY_READS}, verify=toy_verify, validate=toy_validate,
                # teacher.model: a hub id; the shared default serves the tasks its registry entry names (see
                # test_a_packaged_teacher_serves_the_tasks_its_registry_entry_names)
                defaults={"teacher": {"model": "toy-org/toy-teacher"}, "distill": {"epochs": 2.0},
                          "quantize": {"models": ["teacher", "student"]}})


@pytest.fixture
def toy(monkeypatch) -> list[str]:
    """The toy registered in pipeline.tasks.TASKS (the registry entry); yields the stages its steps ran, in order."""
    calls: list[str] = []
    monkeypatch.setitem(TASKS, TOY, toy_task(calls))
    return calls


def toy_raw(tmp_path: Path, **sections: dict) -> dict:
    raw = {"run": {"task": TOY, "name": "toy-run", "runs_dir": str(tmp_path / "runs")},
           "bundle": {"dist_dir": str(tmp_path / "dist")}}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


def toy_cfg(tmp_path: Path, **sections: dict):
    return config_from_dict(toy_raw(tmp_path, **sections), "toy-test-config")


def downstream(names: set[str]) -> set[str]:
    """names and every stage that depends on one of them, directly or not (the declared graph)."""
    out = set(names)
    while more := {n for n, s in STAGES.items() if n not in out and any(d in out for d in s.deps)}:
        out |= more
    return out


def test_a_toy_config_loads_with_the_toys_defaults_under_what_it_sets(toy, tmp_path):
    from pipeline.config import DistillSection, QuantizeSection

    cfg = toy_cfg(tmp_path)
    assert (cfg.run.task, task_of(cfg).name) == (TOY, TOY)
    assert (cfg.distill.epochs, cfg.quantize.models, cfg.teacher.model) == (2.0, ["teacher", "student"],
                                                                           "toy-org/toy-teacher")
    assert toy_cfg(tmp_path, distill={"epochs": 5}).distill.epochs == 5.0  # a config's own value wins
    # from a TOML file and --set, as the CLI loads it
    path = tmp_path / "toy.toml"
    path.write_text(f'[run]\ntask = "toy"\nruns_dir = {json.dumps(str(tmp_path / "runs"))}\n'
                    f'[bundle]\ndist_dir = {json.dumps(str(tmp_path / "dist"))}\n')
    cfg = load_config(path, ["distill.epochs=3"])
    assert (cfg.run.task, cfg.distill.epochs, cfg.quantize.models) == (TOY, 3.0, ["teacher", "student"])
    # the toy's defaults are its own: a classification config keeps the shared ones
    other = config_from_dict({"run": {"runs_dir": str(tmp_path / "runs")}})
    assert (other.distill.epochs, other.quantize.models) == (DistillSection().epochs, QuantizeSection().models)


def test_the_toys_checks_refuse_a_bad_value_at_load_with_their_own_message(toy, tmp_path):
    with pytest.raises(PipelineError, match=r"^toy-test-config: 'distill.epochs' = 50: the toy task distils for at "
                                            r"most 10 epochs; --set distill.epochs=10$"):
        toy_cfg(tmp_path, distill={"epochs": 50})
    with pytest.raises(PipelineError, match=r"unknown toy model 'lstm' in 'quantize.models'. Known: teacher, student$"):
        toy_cfg(tmp_path, quantize={"models": ["teacher", "lstm"]})
    with pytest.raises(PipelineError, match=r"at most 10 epochs; .*\[the value came from --set 'distill.epochs=50'\]$"):
        load_config(None, [f"run.task={TOY}", f"run.runs_dir={json.dumps(str(tmp_path / 'runs'))}",
                           f"bundle.dist_dir={json.dumps(str(tmp_path / 'dist'))}", "distill.epochs=50"])
    # the same values are fine for classification: these checks are the toy's, not shared ones
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path / "runs")}, "distill": {"epochs": 50}})
    assert cfg.distill.epochs == 50.0 and "lstm" in cfg.quantize.models


def test_an_unknown_task_lists_the_toy_among_the_known_ones(toy, tmp_path, monkeypatch):
    with pytest.raises(PipelineError, match=r"unknown run.task 'toyy'\. Known tasks: ") as err:
        toy_cfg(tmp_path, run={"task": "toyy"})
    known = str(err.value).split("Known tasks: ", 1)[1].split(", ")
    assert TOY in known and sorted(known) == sorted(TASKS)
    # the registry entry is what makes run.task accept it
    monkeypatch.delitem(TASKS, TOY)
    with pytest.raises(PipelineError, match=r"unknown run.task 'toy'\. Known tasks: classification, generation$"):
        toy_cfg(tmp_path)


def test_the_runner_runs_every_toy_step_in_graph_order_writes_manifests_and_skips_finished_stages(toy, tmp_path):
    cfg = toy_cfg(tmp_path)
    targets = default_targets()
    ran = run(cfg, targets)
    assert ran == toy  # the toy's own functions ran, and nothing else
    assert set(ran) == set(targets) and "search" not in ran  # the optional stage is never part of a plain run
    for i, name in enumerate(ran):
        assert all(d in ran[:i] for d in STAGES[name].deps), f"{name} ran before one of its inputs"
    for name in ran:
        m = read_manifest(cfg.run_dir / name)
        assert m["stage"] == name and m["summary"]["toy"] == name
        assert m["config"] == {k: cfg.value(k) for k in read_keys(TOY_READS[name])}  # the toy's reads, not another's
        assert "record.json" in m["outputs"]
        assert m["inputs"].keys() == set(STAGES[name].deps)
    assert read_manifest(cfg.run_dir / "eval")["summary"]["quality"] == "accuracy"
    assert json.loads((cfg.run_dir / "eval" / "scores.json").read_text()) == {m: {"accuracy": 0.5} for m in TOY_MODELS}
    for model, (stage, sub) in TOY_MODELS.items():
        assert (cfg.run_dir / stage / sub / "weights.txt").read_text() == f"{model} {cfg.run.seed}"
    assert (cfg.run_dir / "data" / "train.txt").read_text().count("\n") == 8
    assert not list(cfg.run_dir.glob(".*.partial"))
    # a second run finds everything up to date and calls no step
    assert run(cfg, targets) == [] and len(toy) == len(targets)
    assert all(s == (True, "up to date") for s in statuses(cfg, targets).values())


@pytest.mark.parametrize("key, value, readers", [
    ("distill.lr", 1e-3, {"distill"}),  # inside the toy distill step's wildcard
    ("distill.alpha", 0.5, set()),  # taken back out of that wildcard
    ("baseline.hidden", 32, {"baseline"}),
    ("bench.iterations", 7, {"bench"}),
    ("augment.copies", 3, {"logits"}),
    ("data.max_train", 5, {"data"}),
    ("run.seed", 7, set(STAGES)),  # always read
    # classification's steps read these (distill: student.*; teacher and baseline: teacher.max_length), the toy's
    # do not: the running task's reads are the fingerprint
    ("student.hidden", 64, set()),
    ("teacher.max_length", 64, set()),
])
def test_a_changed_key_re_runs_exactly_the_toy_stages_that_read_it_and_what_depends_on_them(toy, tmp_path, key,
                                                                                             value, readers):
    targets = default_targets()
    run(toy_cfg(tmp_path), targets)
    section, name = key.split(".")
    changed = toy_cfg(tmp_path, **{section: {name: value}})
    assert changed.value(key) == value
    expected = downstream(readers) & set(targets)
    stale = {n for n, (fresh, _) in statuses(changed, targets).items() if not fresh}
    assert stale == expected
    for n in readers & set(targets):
        assert status(changed, n) == (False, "its settings changed")
    before = len(toy)
    ran = run(changed, targets)
    assert set(ran) == expected and toy[before:] == ran
    assert run(changed, targets) == []


def test_a_stage_the_toy_does_not_bind_stops_the_run_naming_it(toy, tmp_path, monkeypatch):
    """Task.steps holds one Step per stage (docs/adding-a-task.md); a stage without one is a PipelineError naming
    the stage and the task, raised before any stage runs (not after the stages before it have trained)."""
    cfg = toy_cfg(tmp_path)
    assert "search" not in TASKS[TOY].steps and STAGES["search"].optional
    with pytest.raises(PipelineError, match=r"^stage 'search' has no step for run.task = 'toy'$"):
        run(cfg, ["search"])  # data, teacher and logits come first in its order
    assert toy == [] and not cfg.run_dir.exists()
    steps = {k: v for k, v in TASKS[TOY].steps.items() if k != "web-bundle"}
    monkeypatch.setitem(TASKS, TOY, replace(TASKS[TOY], steps=steps))
    with pytest.raises(PipelineError, match=r"^stage 'web-bundle' has no step for run.task = 'toy'$"):
        run(cfg, default_targets())
    assert toy == [] and not cfg.run_dir.exists()
    assert run(cfg, ["bundle"])[-1] == "bundle"  # what it binds still runs


def test_the_toy_bundle_is_published_and_verify_bundle_replays_it_through_the_toys_verify(toy, tmp_path, capsys,
                                                                                          monkeypatch):
    from pipeline.cli import main
    from pipeline.verify import verify_bundle

    cfg = toy_cfg(tmp_path)
    run(cfg, default_targets())
    dist = tmp_path / "dist" / cfg.run.name
    meta = json.loads((dist / "metadata.json").read_text())
    assert (meta["task"], meta["kind"]) == (TOY, "app") and "student/weights.txt" in meta["files"]
    assert verify_bundle(dist)["lines"] == [f"toy student: student {cfg.run.seed}"]
    assert main(["verify-bundle", str(dist)]) == 0
    out = capsys.readouterr().out
    assert f"toy student: student {cfg.run.seed}" in out and "bundle OK" in out
    # a changed published file: verify-bundle refuses it, and the bundle stage (its check) re-runs alone
    (dist / "student" / "weights.txt").write_text("tampered")
    with pytest.raises(PipelineError, match="student/weights.txt was changed"):
        verify_bundle(dist)
    fresh, why = status(cfg, "bundle")
    assert not fresh and why.startswith("student/weights.txt of its published copy")
    assert run(cfg, default_targets()) == ["bundle"]
    assert verify_bundle(dist)["lines"] == [f"toy student: student {cfg.run.seed}"]
    # verify-bundle picks the replay from the registry by metadata.json's "task"
    monkeypatch.delitem(TASKS, TOY)
    with pytest.raises(PipelineError, match=r"'task' is 'toy', which verify-bundle cannot replay"):
        verify_bundle(dist)


def test_the_cli_shows_runs_and_reports_the_toy_in_process(toy, tmp_path, capsys, monkeypatch):
    from pipeline.cli import main

    for var in ("POCKETFORMER_CONFIG", "POCKETFORMER_SET"):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "toy.toml"
    path.write_text(f'[run]\ntask = "toy"\nname = "cli"\nruns_dir = {json.dumps(str(tmp_path / "runs"))}\n'
                    f'[bundle]\ndist_dir = {json.dumps(str(tmp_path / "dist"))}\n')
    config = ["--config", str(path)]

    def lines_of_status() -> dict[str, str]:
        assert main(["status", *config]) == 0
        out = capsys.readouterr().out.splitlines()
        # before the first run, a note after the table says the run folder does not exist yet
        fresh = not (tmp_path / "runs" / "cli").is_dir()
        assert any(line.startswith("note: there is no run folder") for line in out) == fresh
        lines = [line for line in out if not line.startswith("note:")][1:-1]  # the header and the total left out
        return {line.split()[0]: line for line in lines}

    assert main(["show-config", *config]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["run"]["task"], shown["distill"]["epochs"], shown["teacher"]["model"]) == (TOY, 2.0,
                                                                                           "toy-org/toy-teacher")
    assert main(["show-config", *config, "--set", "distill.epochs=50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "the toy task distils for at most 10 epochs" in err and err.count("\n") == 1
    assert main(["show-config", *config, "--set", "run.task=toyy"]) == 2
    assert "Known tasks: " in (err := capsys.readouterr().err) and TOY in err.split("Known tasks: ")[1]

    before = lines_of_status()
    assert set(before) == set(STAGES) and all(line.endswith("not run yet") for line in before.values())
    assert main(["run", *config, "--until", "eval"]) == 0
    capsys.readouterr()
    needed = {"eval"} | {n for n in STAGES if "eval" in downstream({n})}
    assert set(toy) == needed
    after = lines_of_status()
    assert {n for n, line in after.items() if line.endswith("up to date")} == needed
    assert all(after[n].endswith("not run yet") for n in set(STAGES) - needed)

    # the optional search: a task without Task.search stops before any stage runs
    assert main(["search", *config, "--target", "host-cpu", "--budget-ms", "5"]) == 2
    assert "search: run.task = 'toy' is not searchable yet" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "cli" / "search").exists() and set(toy) == needed
    # phone-bench: Task.phone_bench is False for the toy, and it says so naming the task
    assert main(["phone-bench", *config]) == 2
    assert "run.task = 'toy'" in capsys.readouterr().err


def test_a_packaged_teacher_serves_the_tasks_its_registry_entry_names(toy, tmp_path, monkeypatch):
    """docs/adding-a-task.md's walk-through binds a task whose defaults set student.arch only, so teacher.model keeps
    the shared default, the packaged MiniLM encoder. Its registry entry names the tasks it serves: until the new
    task is added there, the config is refused with the fix; once added, it loads."""
    from distill.teachers import TEACHERS

    own = {k: v for k, v in TASKS[TOY].defaults.items() if k != "teacher"}
    monkeypatch.setitem(TASKS, TOY, replace(TASKS[TOY], defaults={**own, "student": {"arch": "bert"}}))
    with pytest.raises(PipelineError, match=r"teacher.model = 'minilm-package' is a classification teacher; run.task = "
                                            r"'toy' takes a model folder, a hub id \(no packaged teacher serves it\)$"):
        toy_cfg(tmp_path)
    minilm = TEACHERS["minilm-package"]
    monkeypatch.setitem(TEACHERS, "minilm-package", replace(minilm, tasks=(*minilm.tasks, TOY)))
    cfg = toy_cfg(tmp_path)
    assert (cfg.run.task, cfg.teacher.model, cfg.student.arch) == (TOY, TeacherSection.model, "bert")
    # the other task's teacher is still refused, now listing the one that serves the toy
    with pytest.raises(PipelineError, match=r"'smollm2-package' is a generation teacher; run.task = 'toy' takes a "
                                            r"model folder, a hub id or one of: minilm-package$"):
        toy_cfg(tmp_path, teacher={"model": "smollm2-package"})


def test_the_shared_split_builder_reads_the_source_the_toy_registers(toy, tmp_path, monkeypatch):
    """pipeline.data.SOURCES is one registry for every task (data.source -> {task: loader}), and the docs send a
    new task to pipeline.data for its splits: build_splits must read the running task's loader."""
    from pipeline import data

    def toy_lines(d, split):
        if split != "train":
            return []
        return [{"text": f"toy line {i}", "label": ("even", "odd")[i % 2]} for i in range(40)]

    monkeypatch.setitem(data.SOURCES, "toy-lines", {TOY: toy_lines})
    assert data.source_problem("toy-lines", TOY) is None
    cfg = toy_cfg(tmp_path, data={"source": "toy-lines"})
    splits = data.build_splits(cfg)
    assert splits["labels"] == ["even", "odd"]
    texts = [ex["text"] for s in ("train", "validation", "test") for ex in splits[s]]
    assert len(texts) == 40 and all(t.startswith("toy line ") for t in texts)


def test_every_tasks_quality_metric_says_which_way_is_better(toy):
    """Task.quality is a key of eval.metrics.HIGHER_IS_BETTER: the retention ratio is 1.0 at the teacher's quality
    and below it for a worse model, whichever way the metric runs."""
    from eval.metrics import HIGHER_IS_BETTER
    from eval.results import _ratios

    assert {t.quality for t in TASKS.values()} <= HIGHER_IS_BETTER.keys()
    assert (HIGHER_IS_BETTER["accuracy"], HIGHER_IS_BETTER["perplexity"]) == (True, False)
    for metric, teacher, worse in (("accuracy", 0.8, 0.6), ("perplexity", 20.0, 40.0)):
        rows = [{"model": m, "variant": "fp32", "format": "pytorch", metric: q, "latency": {}}
                for m, q in (("teacher", teacher), ("student", worse))]
        _ratios(rows, metric, [], 64)
        assert [r["vs_teacher"]["quality_retention"] for r in rows] == pytest.approx([1.0, 0.75 if metric == "accuracy"
                                                                                      else 0.5])


def test_the_shared_report_step_writes_the_toys_own_goals(toy, tmp_path, monkeypatch):
    """The toy binds the shared report step (pipeline.tasks.common:report); what it adds to results.json is the
    task's own part (Task.results): the toy's goals, none of classification's or generation's. Without one, the
    bench's time limit is the only goal."""
    from pipeline.task import lazy
    from tests.test_report_render import _doc, _row

    def bench(ctx):
        _record(ctx)
        rows = [_row("teacher", "fp32", "onnx", "accuracy", 0.8, 4000, {64: 10.0}, {64: 20.0}),
                _row("student", "fp32", "onnx", "accuracy", 0.78, 1000, {64: 2.0}, {64: 4.0})]
        (ctx.out / "latency.json").write_text(json.dumps(_doc(rows)))
        return {"rows": len(rows)}

    def toy_results(res: dict, accuracy_window: float) -> dict:
        from eval.results import budget_goal

        student = next(r for r in res["rows"] if r["model"] == "student")
        kept = student["vs_teacher"]["quality_retention"]  # the shared part, computed before the task's
        return {"goals": [{"goal": "toy student keeps 90% of the teacher's accuracy", "value": kept, "limit": 0.9,
                           "met": kept >= 0.9, "detail": f"window {accuracy_window:g}"},
                          budget_goal(res["bench_seconds"])]}

    # its results read bundle.accuracy_window, so its report step declares it (a change re-runs the report)
    report = Step(lazy("pipeline.tasks.common:report"), ("bundle.accuracy_window",))
    steps = {**TASKS[TOY].steps, "bench": Step(bench, TOY_READS["bench"]), "report": report}
    monkeypatch.setitem(TASKS, TOY, replace(TASKS[TOY], steps=steps, results=toy_results))
    cfg = toy_cfg(tmp_path, bundle={"accuracy_window": 0.02})
    run(cfg, ["report"])
    res = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    assert res["goals"][0] == {"goal": "toy student keeps 90% of the teacher's accuracy",
                               "value": pytest.approx(0.975), "limit": 0.9, "met": True, "detail": "window 0.02"}
    assert [g["goal"] for g in res["goals"][1:]] == ["benchmark of the models completes within 5 minutes"]
    assert status(toy_cfg(tmp_path, bundle={"accuracy_window": 0.03}), "report") == (False, "its settings changed")
    assert res["workloads"] == {} and "toy student keeps 90%" in (cfg.run_dir / "report" / "report.md").read_text()
    monkeypatch.setitem(TASKS, TOY, replace(TASKS[TOY], results=None))
    run(cfg, ["report"], force=("report",))
    goals = json.loads((cfg.run_dir / "report" / "results.json").read_text())["goals"]
    assert [g["goal"] for g in goals] == ["benchmark of the models completes within 5 minutes"]
