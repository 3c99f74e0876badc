"""One writer per run folder: `runs/<run>/.lock`, held with flock while stages run.

Two processes running stages of the same run would both write `.<stage>.partial/`, delete each other's
temporary folders and rename over each other's results. The lock is taken without waiting, so the second
process stops at once with the first one's pid. The kernel drops a flock when its holder exits (even on
SIGKILL), so a crashed run never leaves a stale lock behind; the file itself stays and is reused.
"""
from __future__ import annotations

import fcntl
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pipeline.errors import PipelineError, make_folder, writing

LOCK_NAME = ".lock"
# Run folders this process holds: `run` holds the lock and calls `run_stage`, which takes it too (for callers
# that run one stage directly). A second flock on a new descriptor of the same file would conflict with our
# own first one, so a nested take holds nothing more; the outermost one releases.
_HELD: set[Path] = set()


def _holder(path: Path) -> str:
    """What the holder wrote into the lock file: 'pid N on HOST' (or a note when it cannot be read)."""
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "a process that has not written its pid yet"


@contextmanager
def run_lock(run_dir: Path, what: str) -> Iterator[None]:
    """Hold runs/<run>/.lock for the block; raise PipelineError at once if another process holds it.

    `what` is the command being run, for the message the other process would see."""
    path = (run_dir / LOCK_NAME).resolve()
    if path in _HELD:
        yield
        return
    with writing(run_dir):  # a read-only or full runs folder: one PipelineError
        make_folder(run_dir, "run.runs_dir")
        # O_CREAT without O_TRUNC: truncating would erase the holder's pid before we know we may write
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineError(
                f"run folder {run_dir} is in use by another pocketformer process ({_holder(path)}). Two runs "
                f"writing one folder would delete each other's stage output: wait for it to finish, or stop it "
                f"(kill <pid>), then run the command again; or give this run another name with "
                f"--set run.name=...") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}: {what}\n".encode())
        os.fsync(fd)
        _HELD.add(path)
        try:
            yield
        finally:
            _HELD.discard(path)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
