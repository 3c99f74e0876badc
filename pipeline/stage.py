"""The stage graph and the runner that executes stages in dependency order, skipping finished ones."""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from export import procs
from pipeline.config import Config, read_keys
from pipeline.errors import NO_SPACE, PipelineError, disk_error, lookup, tree_bytes, writing
from pipeline.hashcache import HashCache
from pipeline.lock import run_lock
from pipeline.manifest import content_key, folder_key, outputs_intact, read_manifest, sha256_json, write_manifest
from pipeline.task import StageContext
from pipeline.tasks import task_of

log = logging.getLogger("pocketformer")


@dataclass(frozen=True)
class Stage:
    """One node of the graph, the same for every task; what it does is the task's Step (pipeline/task.py)."""

    name: str
    deps: tuple[str, ...] = ()
    doc: str = ""
    # Extra freshness test for what a stage writes outside its folder (the bundle's published copy):
    # (config, the stage's manifest) -> why it must re-run, or None. Its manifest and files alone cannot tell.
    check: Callable[[Config, dict], str | None] | None = None
    # Run only when named (its command, `run --until` it, or a target that needs it), never by a plain `run`
    # / `make all`; `status` still shows it.
    optional: bool = False
    # Stages read when they have run, never run for it (the report shows a finished search): their content is
    # part of this stage's inputs while they exist, so a search run, re-run or removed later re-runs this one
    reads_if_present: tuple[str, ...] = ()
    # Folders of the run no stage writes (no manifest) that this stage reads when they hold files: the phone
    # measurements phone-bench keeps in runs/<run>/phone/, which the report merges. Their files' content is
    # part of this stage's inputs, so a measurement removed, or written by a phone-bench that stopped before
    # re-rendering the report, re-runs it
    reads_files: tuple[str, ...] = ()


_TRAIN = ("data", "teacher", "distill", "baseline")
# The graph, in run order. A stage waits for and hashes what any task's step reads.
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("data", (), "Read, clean and split the task's data; write train/validation/test JSONL"),
    Stage("teacher", ("data",), "Fine-tune (classification) or load (generation) the teacher; write teacher/model"),
    Stage("logits", ("data", "teacher"), "Cache the teacher's outputs on the training data (the teacher runs once)"),
    Stage("distill", ("data", "teacher", "logits"), "Build the student from the teacher and distil it"),
    Stage("baseline", ("data", "teacher", "logits"), "Train the recurrent baselines (plain and distilled)"),
    Stage("eval", _TRAIN, "Score every model on the held-out test split (accuracy or perplexity)"),
    Stage("quantize", (*_TRAIN, "eval"), "ONNX files per model and variant, each checked against its source"),
    Stage("compile", ("data", "quantize"), "Qualcomm's HTP compiler on every static QDQ file, per chip and length, "
          "each compiled graph checked on the HTP emulator"),
    Stage("export", (*_TRAIN, "eval", "quantize"), "ORT mobile-format files and Core ML packages, each checked"),
    Stage("peer", ("data", "teacher", "distill", "eval"), "Optimum's own export and int8 quantization of the "
          "teacher and student, scored on the test split: the files the bench times ours against"),
    Stage("bench", (*_TRAIN, "eval", "quantize", "compile", "export", "peer"),
          "Latency of every model variant on every target"),
    Stage("report", ("data", "eval", "quantize", "compile", "export", "bench"),
          "Results table, speed-ups, NPU readiness and plots from the bench (and a finished search's trials, "
          "and the phone rows phone-bench kept)",
          reads_if_present=("search",), reads_files=("phone",)),
    Stage("bundle", (*_TRAIN, "quantize", "compile", "export", "report"),
          "The app bundle of the chosen model, checked, published to <bundle.dist_dir>/<run>/",
          check=lambda cfg, manifest: _published(cfg.run_dir / "bundle", manifest)),
    Stage("web-bundle", ("data", "quantize", "export", "report"),
          "The browser bundle with its demo page, published to <bundle.dist_dir>/<run>-web/",
          check=lambda cfg, manifest: _published(cfg.run_dir / "web-bundle", manifest)),
    Stage("search", ("data", "teacher", "logits"),
          "Student search under [search]'s latency budget on a target (docs/search.md); only when asked",
          optional=True),
)}
GRAPH = {n: s.deps for n, s in STAGES.items()}  # stage -> its deps, for StageContext.upstream


def _marker(run_dir: Path, name: str) -> Path:
    """runs/<run>/.<stage>.running: who runs the stage now (pid, start time, host), for `status` alone. The
    runner never reads it: a stage is finished only by its manifest, so a marker left by a kill means nothing
    more than that the stage was interrupted."""
    return run_dir / f".{name}.running"


def running(run_dir: Path, name: str) -> str | None:
    """'running now (pid N)' when a live process runs stage `name` of this run folder; None when none does (no
    marker, or the process that wrote it is gone, or its pid now belongs to another process)."""
    try:
        who = json.loads(_marker(run_dir, name).read_text())
        pid, start, host = int(who["pid"]), int(who["start"]), str(who["host"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if host != socket.gethostname():  # a run folder on a shared disk: another machine's pids cannot be checked
        return f"running on {host} (pid {pid}), unless it was killed there"
    return f"running now (pid {pid})" if procs.alive(pid, start) else None


def default_targets() -> list[str]:
    """What a plain `run` (make all) runs: every stage but the optional ones."""
    return [n for n, s in STAGES.items() if not s.optional]


def _published(folder, manifest: dict) -> str | None:
    """Why a bundle stage must re-run although its folder is up to date: it was written in an older bundle
    format, or its published copy (the summary's dist path) is missing or differs, or a killed copy left a
    temporary folder (publish removes those)."""
    from export.bundle import stale_schema
    from export.publish import published_differs

    dist = manifest.get("summary", {}).get("dist")
    if not dist:
        return None  # nothing was published (a task without this bundle writes only a README)
    return stale_schema(folder) or published_differs(folder, Path(dist))


def order(targets: list[str]) -> list[str]:
    """Targets and everything they depend on, dependencies first; a stage another one reads if present (the
    search, for the report) comes first when both are targets, so one run leaves the reader up to date."""
    seen: list[str] = []

    def visit(name: str) -> None:
        stage = lookup(STAGES, name, f"stage '{name}'", "Known stages")
        for dep in (*stage.deps, *(d for d in stage.reads_if_present if d in targets)):
            visit(dep)
        if name not in seen:
            seen.append(name)

    for t in targets:
        visit(t)
    return seen


def config_hash(cfg: Config, stage: Stage) -> tuple[dict, str]:
    """The values of exactly the keys the running task's step reads ({"section.key": value}) and their hash."""
    relevant = {dotted: cfg.value(dotted) for dotted in read_keys(task_of(cfg).step(stage.name).reads)}
    return relevant, sha256_json(relevant)


# Config keys naming local files or folders whose bytes a stage reads -> that stage. Their content is part of the
# stage's key, so an edited data file or teacher folder re-runs it (the path string alone would not change). A hub
# id or a packaged name is no local path and has no digest; downstream stages stay keyed on what this one wrote.
SOURCES = {"data.train_path": "data", "data.validation_path": "data", "data.test_path": "data",
           "teacher.model": "teacher"}


def source_digests(cfg: Config, name: str) -> dict[str, str]:
    """What stage `name` reads from outside the run (its manifest's "sources"): {key: sha256 over every file
    under the path it names} for the SOURCES it reads, and {tool: its state here} for what its step's result
    depends on in this machine's installs (Step.environment: the compile stage's onnxruntime-qnn, the bench's
    runtimes)."""
    out = {tool: state(cfg) for tool, state in task_of(cfg).step(name).environment.items()}
    keys = [k for k, stage in SOURCES.items() if stage == name]
    if not keys:
        return out  # most stages: no need to read the hash cache
    cache = HashCache(cfg.run_dir)
    for key in keys:
        path = Path(cfg.value(key)) if cfg.value(key) else None
        if path is None or not path.exists():
            continue  # not a local path: the stage itself says what is wrong with it
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out[key] = sha256_json({p.relative_to(path).as_posix(): cache.sha256(p) for p in files})
    cache.save()
    return out


def stage_inputs(run_dir, stage: Stage) -> dict[str, str]:
    """The content keys a stage's run is keyed on: its deps, those of reads_if_present that have run and
    those of reads_files that hold files."""
    keys = {dep: content_key(run_dir / dep) for dep in (*stage.deps, *stage.reads_if_present)
            if dep in stage.deps or read_manifest(run_dir / dep) is not None}
    keys.update({name: key for name in stage.reads_files if (key := folder_key(run_dir / name)) is not None})
    return keys


def status(cfg: Config, name: str, accept: dict[str, set[str]] | None = None) -> tuple[bool, str]:
    """(up to date?, why not). accept: per input, earlier content keys that still count as current (phone-bench
    asks whether the bundle holds the current model: a report it re-rendered itself changes no model)."""
    stage = STAGES[name]
    folder = cfg.run_dir / name
    manifest = read_manifest(folder)
    if manifest is None:
        return False, "not run yet"
    if manifest.get("config_hash") != config_hash(cfg, stage)[1]:
        return False, "its settings changed"
    if (was := manifest.get("revision", 1)) != (now := task_of(cfg).step(name).revision):
        return False, f"what its step writes changed in this pocketformer (revision {was} -> {now})"
    recorded = manifest.get("sources", {})
    tools = task_of(cfg).step(name).environment
    for key, digest in source_digests(cfg, name).items():
        if recorded.get(key) == digest:
            continue
        if key not in tools:
            return False, f"the content of {key} ({cfg.value(key)}) changed"
        if key not in recorded:  # a manifest from before the step recorded it: re-run once
            return False, f"its run did not record the installed {key} (now {digest})"
        return False, f"the installed {key} changed ({recorded[key]} -> {digest})"
    recorded = manifest.get("inputs", {})
    now = stage_inputs(cfg.run_dir, stage)
    for dep in (*stage.deps, *stage.reads_if_present, *stage.reads_files):
        if recorded.get(dep) != now.get(dep) and recorded.get(dep) not in (accept or {}).get(dep, set()):
            return False, f"its input '{dep}' changed"
    cache = HashCache(cfg.run_dir)
    try:
        changed = outputs_intact(folder, manifest, cache)
    finally:
        cache.save()
    if changed:
        return False, f"its files were changed or removed ({changed})"
    if stage.check is not None and (why := stage.check(cfg, manifest)):
        return False, why
    return True, "up to date"


def statuses(cfg: Config, names: list[str],
             accept: dict[str, set[str]] | None = None) -> dict[str, tuple[bool, str]]:
    """status() of each stage in names (dependencies first), where a stage whose input will re-run is not
    up to date either: `run` would re-run it after its input. accept: as for status()."""
    out: dict[str, tuple[bool, str]] = {}
    for name in order(names):
        fresh, why = status(cfg, name, accept)
        stale = [d for d in STAGES[name].deps if d in out and not out[d][0]]
        out[name] = (False, f"its input '{stale[0]}' will re-run") if fresh and stale else (fresh, why)
    return out


def run_stage(cfg: Config, name: str) -> dict | None:
    from distill import distributed as D

    # rank 0 holds the run folder's lock for the whole launch, and says which stage it runs
    with run_lock(cfg.run_dir, f"stage {name} of {cfg.source or 'a config'}") if D.is_main() else nullcontext():
        with _marked(cfg.run_dir, name) if D.is_main() else nullcontext():
            return _run_stage(cfg, name)


@contextmanager
def _marked(run_dir: Path, name: str) -> Iterator[None]:
    """The stage's running marker for the block (see running()); the run lock is held, so no other writer."""
    marker = _marker(run_dir, name)
    with writing(marker):
        marker.write_text(json.dumps({"pid": os.getpid(), "start": procs.start_time(os.getpid()),
                                      "host": socket.gethostname()}))
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def _run_stage(cfg: Config, name: str) -> dict | None:
    from distill import distributed as D

    stage = STAGES[name]
    run_dir = cfg.run_dir
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    for dep in stage.deps:
        if read_manifest(run_dir / dep) is None:
            # run_stage runs one stage; run() (and the CLI) run what it needs first. The command line helps only
            # where cfg came from a file, and only with the same --set items (a <defaults> source is no file)
            cli = (f", or `python -m pipeline {dep} --config {cfg.source}` (with the same --set items) before it"
                   if cfg.source and Path(cfg.source).is_file() else "")
            raise PipelineError(f"stage '{name}' needs stage '{dep}' first: run_stage runs one stage; run "
                                f"pipeline.stage.run(cfg, ['{name}']) instead, which runs what it needs first{cli}")
    relevant, chash = config_hash(cfg, stage)
    inputs = stage_inputs(run_dir, stage)
    sources = source_digests(cfg, name)
    step = task_of(cfg).step(name)
    # resume only onto the same sources and step revision (a revision of 1 leaves the key as it always was)
    key = sha256_json([chash, inputs] + ([sources] if sources else [])
                      + ([step.revision] if step.revision > 1 else []))
    if not D.is_main():
        # other ranks compute their share of a distributed stage into a private folder that is dropped
        if step.distributed:
            scratch = run_dir / f".{name}.rank{D.rank()}.partial"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            try:
                step.fn(StageContext(cfg, name, scratch, run_dir, stage.deps, key, GRAPH))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        D.barrier()  # rank 0 has written and renamed the stage folder
        return None
    tmp = run_dir / f".{name}.partial"
    with writing(tmp):
        if tmp.exists():
            shutil.rmtree(tmp)  # left by an interrupted run; never reused
        tmp.mkdir(parents=True)
    started = time.time()
    try:
        ctx = StageContext(cfg, name, tmp, run_dir, stage.deps, key, GRAPH)
        summary = step.fn(ctx) or {}
        manifest = write_manifest(tmp, stage=name, config=relevant, config_hash=chash, inputs=inputs,
                                  summary=summary, started=started, sources=sources, notes=step.notes,
                                  revision=step.revision)
    except BaseException as e:
        written = tree_bytes(tmp)  # what the stage had written when it failed: a full disk needs at least this
        shutil.rmtree(tmp, ignore_errors=True)
        # only a full disk is translated here: a permission error inside a stage may be a file it reads
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            raise disk_error(e, tmp, "run.runs_dir", written, f"at least (what stage '{name}' had written "
                                                              f"when the disk filled)") from e
        raise
    final = run_dir / name
    try:
        with writing(final):
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    cache = HashCache(run_dir)  # the manifest's hashes are fresh: the next status need not hash again
    for rel, meta in manifest["outputs"].items():
        cache.remember(final / rel, meta["sha256"])
    cache.save()
    shutil.rmtree(ctx.resume_dir, ignore_errors=True)  # finished: its checkpoints are spent
    D.barrier()
    return manifest


def run(cfg: Config, targets: list[str], *, force: tuple[str, ...] = ()) -> list[str]:
    """Run targets and whatever they need that is not up to date. Returns the stages that ran."""
    from distill import distributed as D

    D.init()
    names = order(targets)  # an unknown stage fails before the lock is taken
    for name in names:  # and a stage the run's task binds no step for, before any stage before it has run
        task_of(cfg).step(name)
    what = targets[0] if len(targets) == 1 else f"run until {targets[-1]}"
    with run_lock(cfg.run_dir, f"{what} of {cfg.source or 'a config'}") if D.is_main() else nullcontext():
        ran = _run(cfg, names, force)
    D.finish()  # every rank leaves the process group before it exits (not on an error: the others may be gone)
    return ran


def _drop_leftover(run_dir: Path, name: str) -> None:
    """The scratch folder of an interrupted re-run of a stage that is up to date (a killed --force): the finished
    folder stands and the scratch is never reused, so it only holds disk (a stage running again replaces it)."""
    left = run_dir / f".{name}.partial"
    if left.exists():
        with writing(left):
            shutil.rmtree(left)
        log.info("[%s] removed %s, what an interrupted run had left", name, left)


def _run(cfg: Config, names: list[str], force: tuple[str, ...]) -> list[str]:
    from distill import distributed as D

    ran = []
    for name in names:
        # computed after its inputs ran: an input that wrote the same files leaves this stage up to date
        fresh, why = status(cfg, name)
        if fresh and name not in force:
            if D.is_main():
                _drop_leftover(cfg.run_dir, name)
            log.info("[%s] up to date, skipped", name)
            continue
        if D.is_main():
            log.info("[%s] running (%s)", name, why if not fresh else "re-run requested")
        t0 = time.time()
        run_stage(cfg, name)
        if D.is_main():
            log.info("[%s] done in %.1f s -> %s", name, time.time() - t0, cfg.run_dir / name)
        ran.append(name)
    return ran
