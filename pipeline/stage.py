"""The stage registry and the runner that executes stages in dependency order, skipping finished ones."""
from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.config import SECTIONS, Config
from pipeline.errors import PipelineError
from pipeline.hashcache import HashCache
from pipeline.lock import run_lock
from pipeline.manifest import content_key, outputs_intact, read_manifest, sha256_json, write_manifest

log = logging.getLogger("pocketformer")


@dataclass
class StageContext:
    """What a stage function gets: the config, its own (temporary) output folder, and its inputs."""

    cfg: Config
    name: str
    out: Path
    run_dir: Path
    deps: tuple[str, ...]
    key: str = ""  # hash of this stage's settings and inputs: resumable checkpoints must match it

    @property
    def resume_dir(self) -> Path:
        """Checkpoints of an unfinished run of this stage; kept across a kill, removed on success."""
        return self.run_dir / ".resume" / self.name

    def input(self, stage: str) -> Path:
        """The finished folder of an upstream stage this stage declared as a dependency."""
        if stage not in self.deps:
            raise RuntimeError(f"stage {self.name} reads {stage} without declaring it")
        return self.run_dir / stage


@dataclass(frozen=True)
class Stage:
    name: str
    fn: Callable[[StageContext], dict[str, Any]]  # the classification implementation
    deps: tuple[str, ...] = ()
    # The config keys this stage reads ("teacher.max_length"; "train.*" or "train" for a whole section): its
    # fingerprint, so a key no stage reads never re-runs anything. Per task in READS; this is the fallback.
    reads: tuple[str, ...] = ()
    doc: str = ""
    # Stages that only measure (like bench) can be told to re-run even when inputs are unchanged.
    always: bool = False
    # Under torchrun every rank runs a distributed stage (each on its share of the data); the other
    # stages run on rank 0 alone while the rest wait.
    distributed: bool = False
    # Extra freshness test for what a stage writes outside its folder (the bundle's published copy):
    # (config, the stage's manifest) -> why it must re-run, or None. Its manifest and files alone cannot tell.
    check: Callable[[Config, dict], str | None] | None = None


STAGES: dict[str, Stage] = {}
# One pipeline, two tasks: a stage may have a different implementation per run.task (same name, same
# folder, same place in the graph), registered with register(name, task="generation").
TASK_IMPLS: dict[tuple[str, str], Callable[[StageContext], dict[str, Any]]] = {}
# (stage, task) -> the config keys that task's implementation reads (checked by read_keys at registration)
READS: dict[tuple[str, str], tuple[str, ...]] = {}
# Every stage's result depends on these; the run name, paths and thread counts do not change it.
ALWAYS_READ = ("run.seed", "run.task")


def read_keys(reads: tuple[str, ...]) -> tuple[str, ...]:
    """reads with every section wildcard ("train.*" or "train") expanded into its keys, sorted. An unknown
    section or key is a bug in a stage's declaration: it would never re-run the stage, so it fails at import."""
    out = set(ALWAYS_READ)
    for entry in reads:
        section, _, key = entry.partition(".")
        if section not in SECTIONS:
            raise ValueError(f"reads names unknown section '{section}' in {entry!r}")
        names = [f.name for f in dataclasses.fields(SECTIONS[section])]
        if key in ("", "*"):
            out.update(f"{section}.{k}" for k in names)
        elif key in names:
            out.add(entry)
        else:
            raise ValueError(f"reads names unknown key {entry!r}")
    return tuple(sorted(out))


def register(name: str, *, deps: tuple[str, ...] = (), reads: tuple[str, ...] = (), always: bool = False,
             task: str = "classification", distributed: bool = False,
             check: Callable[[Config, dict], str | None] | None = None):
    """reads: the config keys this task's implementation reads, its own and through the functions it calls
    ("section.key", or "section.*" where it reads the whole section). A key missing here is a stale result."""
    keys = read_keys(reads)

    def wrap(fn):
        TASK_IMPLS[(name, task)] = fn
        READS[(name, task)] = keys
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        old = STAGES.get(name)
        if old is None:
            STAGES[name] = Stage(name, fn, deps, keys, doc, always, distributed, check)
        else:
            # One graph for both tasks: the stage waits for what any task's implementation declares (a
            # superset of deps can only re-run a stage too often, never skip a needed run). Its fingerprint
            # is the running task's own READS entry.
            first = task == "classification"
            STAGES[name] = Stage(name, fn if first else old.fn, tuple(dict.fromkeys(old.deps + deps)),
                                 old.reads if not first else keys, doc if first else old.doc,
                                 always if first else old.always, distributed if first else old.distributed,
                                 old.check or check)
        return fn
    return wrap


def implementation(cfg: Config, name: str) -> Callable[[StageContext], dict[str, Any]]:
    fn = TASK_IMPLS.get((name, cfg.run.task))
    if fn is None:
        raise PipelineError(f"stage '{name}' has no implementation for run.task = '{cfg.run.task}'")
    return fn


def order(targets: list[str]) -> list[str]:
    """Targets and everything they depend on, dependencies first."""
    seen: list[str] = []

    def visit(name: str) -> None:
        if name not in STAGES:
            raise PipelineError(f"unknown stage '{name}'. Known stages: {', '.join(STAGES)}")
        for dep in STAGES[name].deps:
            visit(dep)
        if name not in seen:
            seen.append(name)

    for t in targets:
        visit(t)
    return seen


def stage_reads(cfg: Config, stage: Stage) -> tuple[str, ...]:
    """The config keys the running task's implementation of stage reads."""
    return READS.get((stage.name, cfg.run.task)) or read_keys(stage.reads)


def config_hash(cfg: Config, stage: Stage) -> tuple[dict, str]:
    """The values of exactly the keys the stage reads ({"section.key": value}) and their hash."""
    relevant = {}
    for dotted in stage_reads(cfg, stage):
        section, key = dotted.split(".")
        relevant[dotted] = getattr(getattr(cfg, section), key)
    return relevant, sha256_json(relevant)


def status(cfg: Config, name: str) -> tuple[bool, str]:
    """(up to date?, why not)."""
    stage = STAGES[name]
    folder = cfg.run_dir / name
    manifest = read_manifest(folder)
    if manifest is None:
        return False, "not run yet"
    if manifest.get("config_hash") != config_hash(cfg, stage)[1]:
        return False, "its settings changed"
    for dep in stage.deps:
        if manifest.get("inputs", {}).get(dep) != content_key(cfg.run_dir / dep):
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


def statuses(cfg: Config, names: list[str]) -> dict[str, tuple[bool, str]]:
    """status() of each stage in names (dependencies first), where a stage whose input will re-run is not
    up to date either: `run` would re-run it after its input."""
    out: dict[str, tuple[bool, str]] = {}
    for name in order(names):
        fresh, why = status(cfg, name)
        stale = [d for d in STAGES[name].deps if d in out and not out[d][0]]
        out[name] = (False, f"its input '{stale[0]}' will re-run") if fresh and stale else (fresh, why)
    return out


def run_stage(cfg: Config, name: str) -> dict | None:
    from distill import distributed as D

    if not D.is_main():  # rank 0 holds the run folder's lock for the whole launch
        return _run_stage(cfg, name)
    with run_lock(cfg.run_dir, f"stage {name} of {cfg.source or 'a config'}"):
        return _run_stage(cfg, name)


def _run_stage(cfg: Config, name: str) -> dict | None:
    from distill import distributed as D

    stage = STAGES[name]
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    for dep in stage.deps:
        if read_manifest(run_dir / dep) is None:
            raise PipelineError(f"stage '{name}' needs stage '{dep}' first: run `python -m pipeline {dep} "
                                f"--config {cfg.source}`")
    relevant, chash = config_hash(cfg, stage)
    inputs = {dep: content_key(run_dir / dep) for dep in stage.deps}
    key = sha256_json([chash, inputs])
    if not D.is_main():
        # other ranks compute their share of a distributed stage into a private folder that is dropped
        if stage.distributed:
            scratch = run_dir / f".{name}.rank{D.rank()}.partial"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            try:
                implementation(cfg, name)(StageContext(cfg, name, scratch, run_dir, stage.deps, key))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        D.barrier()  # rank 0 has written and renamed the stage folder
        return None
    tmp = run_dir / f".{name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)  # left by an interrupted run; never reused
    tmp.mkdir(parents=True)
    started = time.time()
    try:
        ctx = StageContext(cfg, name, tmp, run_dir, stage.deps, key)
        summary = implementation(cfg, name)(ctx) or {}
        manifest = write_manifest(tmp, stage=name, config=relevant, config_hash=chash, inputs=inputs,
                                  summary=summary, started=started)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = run_dir / name
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
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
    if not D.is_main():
        return _run(cfg, names, force)
    what = targets[0] if len(targets) == 1 else f"run until {targets[-1]}"
    with run_lock(cfg.run_dir, f"{what} of {cfg.source or 'a config'}"):
        return _run(cfg, names, force)


def _run(cfg: Config, names: list[str], force: tuple[str, ...]) -> list[str]:
    from distill import distributed as D

    ran = []
    for name in names:
        fresh, why = status(cfg, name)
        upstream_ran = any(d in ran for d in STAGES[name].deps)
        if fresh and not upstream_ran and name not in force:
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
