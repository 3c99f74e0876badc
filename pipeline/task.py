"""The task interface: what a task binds, and what each of its stage steps receives.

A task (classification, generation, ...) is one `Task` in pipeline/tasks/: the model folders it trains, its
quality metric, the data sources it reads and one `Step` per stage of the graph in pipeline/stage.py. The
stages, their order, folders, manifests, locks and resume rules are the same for every task; a step is the
part of a stage that differs. pipeline/tasks/__init__.py looks `run.task` up, and nothing else does.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from pipeline.errors import PipelineError

Config = Any  # pipeline.config.Config; not imported, so the config module can look tasks up without a cycle


@dataclass
class StageContext:
    """What a step gets: the config, its own (temporary) output folder, and its inputs."""

    cfg: Config
    name: str
    out: Path
    run_dir: Path
    deps: tuple[str, ...]
    key: str = ""  # hash of this stage's settings and inputs: resumable checkpoints must match it
    # the whole graph (stage -> its deps), so a step can read a stage it depends on through another
    graph: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def resume_dir(self) -> Path:
        """Checkpoints of an unfinished run of this stage; kept across a kill, removed on success."""
        return self.run_dir / ".resume" / self.name

    def input(self, stage: str) -> Path:
        """The finished folder of an upstream stage this stage declared as a dependency."""
        if stage not in self.deps:
            raise RuntimeError(f"stage {self.name} reads {stage} without declaring it")
        return self.run_dir / stage

    def upstream(self, stage: str) -> Path:
        """The folder of a stage this one depends on directly or through its dependencies (the manifest chain
        re-runs this stage whenever that one changes)."""
        if stage in self.deps:
            return self.input(stage)
        todo, seen = list(self.deps), set()
        while todo:
            name = todo.pop()
            if name == stage:
                return self.run_dir / stage
            if name not in seen:
                seen.add(name)
                todo += list(self.graph.get(name, ()))
        raise RuntimeError(f"stage {self.name} reads {stage}, which is not upstream of it")


StepFn = Callable[[StageContext], "dict[str, Any]"]


def resolve(target: str) -> Any:
    """What 'package.module:name' names, its module imported."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


# What a training step reads of [train]: all of it but checkpoint_every, which only says how often a resumable
# checkpoint is saved (the weights are the same), so changing it must not throw away the checkpoints it resumes from
TRAIN_READS = ("train.*", "-train.checkpoint_every")


def lazy(target: str) -> Callable:
    """The function 'package.module:name', imported on its first call. Task bindings name their steps this
    way so the registry stays light: the CLI's help, config checks and verify-bundle load no training code."""
    def call(*args, **kwargs):
        return resolve(target)(*args, **kwargs)

    call.__qualname__ = call.__name__ = target.partition(":")[2]
    call.target = target  # type: ignore[attr-defined]
    return call


@dataclass(frozen=True)
class Step:
    """A task's implementation of one stage."""

    fn: StepFn
    # The config keys the step reads, itself and through what it calls ("teacher.max_length"; "train.*" for a
    # whole section): its fingerprint, so a key it does not read never re-runs it, and a key missing here is
    # a stale result. run.seed and run.task always count (pipeline.config.read_keys expands and checks these).
    reads: tuple[str, ...] = ()
    # Under torchrun every rank runs a distributed step (each on its share of the data); the other steps
    # run on rank 0 alone while the rest wait.
    distributed: bool = False
    # Files the step writes for people that no stage reads (generation's samples.md): left out of what the
    # stages after it are keyed on, so a setting only they show (lm.sample_tokens) re-runs this step alone
    notes: tuple[str, ...] = ()
    # Raised by one when what the step writes changes for the same settings and inputs (a fix in how it writes
    # them): a stage a run finished at another revision re-runs, instead of keeping files this pocketformer
    # would not write. Kept in the manifest; one written before revisions existed counts as 1.
    revision: int = 1
    # What the step's result depends on that this machine's installs decide, not the run or the config: tool ->
    # (config) -> its state in a few stable words (the compile stage: {"onnxruntime-qnn": its version, or
    # "absent"}; the bench: which runtime each of bench.targets runs on, or that it cannot run). Recorded with the
    # stage's sources and compared by status, so installing or upgrading a tool re-runs a result made without it
    # (a skip), and the same install re-runs nothing.
    environment: Mapping[str, Callable[[Config], str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """Everything that differs between tasks, bound in one place."""

    name: str
    doc: str
    # model name -> (stage, sub-folder) of its PyTorch checkpoint; eval, quantize, bench and the report use
    # these names everywhere
    models: Mapping[str, tuple[str, str]]
    # the quality column eval writes and the report ranks by: a key of eval.metrics.HIGHER_IS_BETTER ("accuracy",
    # "perplexity"), which says which way is better
    quality: str
    steps: Mapping[str, Step]
    # verify-bundle's replay for this task's bundles: (bundle folder, check_files' result) -> summary with the
    # "lines" it prints; chosen by metadata.json's "task"
    verify: Callable[[Path, dict], dict] | None = None
    # defaults that differ from the shared ones ({section: {key: value}}), under what a config sets
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # the task's load-time checks: config -> the first problem (naming the key and the fix) or None
    validate: Callable[[Config], str | None] | None = None
    # the student search's task side (pipeline/search.py runs the study): () -> the task's candidates class
    # (see pipeline/search.py, "The per-task interface"); None: the task has no search
    search: Callable[[], type] | None = None
    # the task's part of the report's results.json (eval/results.py): (results so far, bundle.accuracy_window) ->
    # its "goals" and "workloads"; None: the bench's time limit is its only goal
    results: Callable[[dict, float], dict] | None = None
    # what phone-bench times on a phone (eval/phone.py): the bundle's .ort and Core ML package of a classifier;
    # False: this task's bundles are timed by the bench stage only, and phone-bench says so
    phone_bench: bool = False

    def step(self, stage: str) -> Step:
        if stage not in self.steps:
            raise PipelineError(f"stage '{stage}' has no step for run.task = '{self.name}'")
        return self.steps[stage]
