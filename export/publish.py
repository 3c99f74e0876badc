"""The bundle's published copy (<bundle.dist_dir>/<run>/): an all-or-nothing copy, cleanup of what a killed
copy left, and the check that tells the runner the copy is gone or differs (so `make bundle` re-publishes
instead of saying "up to date")."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from export import procs
from export.hashing import METADATA, sha256_file
from pipeline.errors import PipelineError, disk_error, make_folder, tree_bytes


def _temp_name(dest: Path, kind: str) -> str:
    return f".{dest.name}.{kind}-{procs.tag()}"  # pid and start time: a reused pid is not taken for this copy


def stale_temps(dest: Path) -> list[Path]:
    """Hidden .<name>.partial-<pid>-<start> / .old-<pid>-<start> folders beside dest whose process is gone (or
    whose pid now belongs to another process): a copy killed before it could clean up. A live writer's folder is
    a copy in progress and is left alone; older names hold the pid alone (pipeline.procs.alive judges those)."""
    if not dest.parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(dest.name)}\.(partial|old)-(\d+(?:-\d+)?)")
    return sorted(p for p in dest.parent.iterdir()
                  if (m := pattern.fullmatch(p.name)) and not procs.writer_alive(m.group(2), p))


class _CopyFailed(Exception):
    """An OSError of one file's copy, carried past copytree (which would fold it into a shutil.Error whose
    errno is lost, so a full disk could not be told from any other failure)."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


def _copy_file(src: str, dst: str) -> str:
    try:
        return shutil.copy2(src, dst)
    except OSError as e:
        raise _CopyFailed(e) from e


def publish(src: Path, dest: Path) -> Path:
    """Copy src to dest so that dest is only ever absent, the old bundle or the complete new one: the copy is
    made in a hidden sibling folder and renamed into place (an interrupted run leaves no half bundle, and the
    next run removes what a killed one left). A full disk or a read-only bundle.dist_dir is one
    PipelineError naming the folder (and, for a full disk, the bundle's size and the free space)."""
    s, d = src.resolve(), dest.resolve()
    if s == d or d in s.parents or s in d.parents:  # replacing dest whole would delete src (the config refuses it)
        raise PipelineError(f"cannot publish {src} to {dest}: one holds the other; point bundle.dist_dir at a "
                            f"folder apart from run.runs_dir")
    try:
        make_folder(dest.parent, "bundle.dist_dir")
        for stale in stale_temps(dest):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = dest.parent / _temp_name(dest, "partial")
        old = dest.parent / _temp_name(dest, "old")
        try:
            shutil.copytree(src, tmp, copy_function=_copy_file)
            if dest.exists():
                dest.rename(old)
            tmp.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    except (_CopyFailed, OSError) as failed:
        e = failed.error if isinstance(failed, _CopyFailed) else failed
        err = disk_error(e, dest, "bundle.dist_dir", tree_bytes(src), "(the bundle's size)")
        if err is None:
            raise e  # not a disk problem: a bug keeps its traceback
        raise err from e
    return dest


def published_differs(src: Path, dest: Path) -> str | None:
    """Why dest is not a faithful copy of the bundle folder src (None when it is): missing, a file added,
    removed or changed (sizes and sha256 against src's metadata.json), or a killed copy's leftovers."""
    if not dest.is_dir():
        return f"its published copy {dest} is missing"
    stale = stale_temps(dest)
    if stale:
        return f"a killed copy left {stale[0]} beside its published copy"
    try:
        meta = json.loads((src / METADATA).read_text())
        files = meta["files"]
    except (OSError, ValueError, KeyError):
        return f"{src / METADATA} is unreadable"
    if not (dest / METADATA).is_file() or (dest / METADATA).read_bytes() != (src / METADATA).read_bytes():
        return f"the metadata.json of its published copy {dest} differs"
    there = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()} - {METADATA}
    if there != set(files):
        return f"its published copy {dest} has files added or removed"
    for rel, info in files.items():
        p = dest / rel
        if p.stat().st_size != info["bytes"] or sha256_file(p) != info["sha256"]:
            return f"{rel} of its published copy {dest} was changed"
    return None
