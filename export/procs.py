"""Is the process that left a temp file or a marker still running?

A pid alone cannot say: once its process has died the kernel hands the number to the next process that starts
(soon in a container, whose pids restart from 1), and a folder named after a live but unrelated pid would be
taken for a write in progress for good. So what a process leaves is named by its pid AND its start time
(tag(): "<pid>-<start>"), and it counts as alive only while a process with that pid started at that time runs.
"""
from __future__ import annotations

import os
from pathlib import Path

# Start times are whole seconds since the epoch, computed from the boot time, which the system clock's
# corrections can move by a second or two: within this many seconds they are the same start. An unrelated
# process would need to get the same pid within seconds of the writer's start, after the writer had died.
_SLACK_S = 2


def _psutil():
    import psutil  # imported when needed: verify-bundle loads the bundle code where only onnxruntime is installed

    return psutil


def start_time(pid: int) -> int:
    """When process pid (a running one) started: whole seconds since the epoch."""
    return int(_psutil().Process(pid).create_time())


def tag() -> str:
    """This process's "<pid>-<start>", for the names of its temp files and markers."""
    return f"{os.getpid()}-{start_time(os.getpid())}"


def parse_tag(text: str) -> tuple[int, int | None] | None:
    """(pid, start) of a tag; start is None for an older name that holds the pid alone. None: not a tag."""
    pid, _, start = text.partition("-")
    if not pid.isdigit() or not (start.isdigit() or start == ""):
        return None
    return int(pid), int(start) if start else None


def alive(pid: int, start: int | None, written: Path | None = None) -> bool:
    """Whether the process that wrote something is still running: pid runs and started at `start`.
    start None (an older name without it): the process at pid counts only if it started before `written` (the
    temp file or folder) was last modified, as its writer must have; without `written`, a running pid is enough."""
    psutil = _psutil()
    try:
        now = start_time(pid)
    except psutil.AccessDenied:
        return True  # another user's live process that will not say when it started: left alone, as before
    except psutil.Error:  # no such process, or a zombie: its writing is over
        return False
    if start is not None:
        return abs(now - start) <= _SLACK_S
    try:
        return written is None or now <= written.stat().st_mtime + _SLACK_S
    except OSError:
        return False  # gone meanwhile: nothing to keep


def writer_alive(text: str, written: Path) -> bool:
    """Whether the temp file or folder `written`, named with tag `text`, is another process's write in
    progress. Our own is not: this process is asking, so its earlier call finished or failed."""
    parsed = parse_tag(text)
    if parsed is None:
        return False
    pid, start = parsed
    return pid != os.getpid() and alive(pid, start, written)
