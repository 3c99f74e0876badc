"""The task registry: `run.task` is looked up here and nowhere else.

Adding a task is a new package beside classification/ and generation/ that builds a `pipeline.task.Task`,
plus one line below (docs/adding-a-task.md walks through it).
"""
from __future__ import annotations

from pipeline.errors import lookup
from pipeline.task import Task
from pipeline.tasks.classification import TASK as CLASSIFICATION
from pipeline.tasks.generation import TASK as GENERATION

TASKS: dict[str, Task] = {t.name: t for t in (CLASSIFICATION, GENERATION)}


def get_task(name: str) -> Task:
    return lookup(TASKS, name, f"run.task '{name}'", "Known tasks")


def task_of(cfg) -> Task:
    """The task a run's config names (run.task)."""
    return get_task(cfg.run.task)
