"""One exception type for problems the user can fix.

The CLI prints these as a single line (no traceback): the message must name the problem and the fix.
Anything else that escapes is a bug and keeps its traceback.
"""
import errno as _errno
import os as _os
import shutil as _shutil
from contextlib import contextmanager as _contextmanager, suppress as _suppress


class PipelineError(Exception):
    """A user-facing error: bad config, bad data, missing artifact, unsupported model."""


class VariantSkipped(PipelineError):
    """An exporter found that this model cannot have this variant (ORT has no fusions for its type, its graph
    defeats the quantizer's preparation): no file is written, the quantize stage records the variant as
    skipped with this message and makes the others; later stages treat it as never asked for."""


def lookup(registry, name: str, unknown: str, known: str = "Known"):
    """registry[name]; else one error: "unknown <unknown>. <known>: <every registered name>"."""
    if name not in registry:
        raise PipelineError(f"unknown {unknown}. {known}: {', '.join(registry)}")
    return registry[name]


# Disk problems while a folder is written: a full disk and a folder we may not write are the user's to fix
# (free space, another folder, permissions), so they become one PipelineError naming the folder and the
# setting that chose it, instead of an OSError traceback from deep inside a writer.
NO_SPACE = frozenset({_errno.ENOSPC, _errno.EDQUOT})
NOT_WRITABLE = frozenset({_errno.EACCES, _errno.EPERM, _errno.EROFS})


def tree_bytes(path) -> int:
    """Bytes of the files under path (a file's own size; 0 when it is gone or unreadable)."""
    try:
        if _os.path.isfile(path):
            return _os.path.getsize(path)
        total = 0
        for root, _, files in _os.walk(path):
            for f in files:
                with _suppress(OSError):
                    total += _os.lstat(_os.path.join(root, f)).st_size
        return total
    except OSError:
        return 0


def free_bytes(path) -> int | None:
    """Free bytes on the disk that holds path (or its nearest existing parent); None when unknown."""
    p = _os.path.abspath(path)
    while not _os.path.exists(p) and _os.path.dirname(p) != p:
        p = _os.path.dirname(p)
    try:
        return _shutil.disk_usage(p).free
    except OSError:
        return None


def mount_point(path) -> str:
    """The mount point of the disk that holds path (or its nearest existing parent): the disk a message names."""
    p = _os.path.abspath(path)
    while not _os.path.exists(p) and _os.path.dirname(p) != p:
        p = _os.path.dirname(p)
    while not _os.path.ismount(p) and _os.path.dirname(p) != p:
        p = _os.path.dirname(p)
    return p


def human_bytes(n: int | None) -> str:
    if n is None:
        return "an unknown amount"
    for unit in ("bytes", "KB", "MB"):
        if n < 1024:
            return f"{n:,} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


# How ONNX Runtime (and the OS through it) says a file could not be written: a full disk, a read-only folder. A
# converter or compiler failing so has not refused the model, and a stage must not record it as a verdict.
_WRITE_FAILURES = ("Failed to write", "Failed to save", "No space left", "Disk quota exceeded",
                   "Read-only file system")


def write_failure(message: str) -> bool:
    return any(w in message for w in _WRITE_FAILURES)


def disk_error(exc: BaseException, folder, setting: str, needed: int | None = None,
               needed_note: str = "") -> "PipelineError | None":
    """One PipelineError for a full disk (ENOSPC, EDQUOT) or a folder that cannot be written (EACCES, EPERM,
    EROFS) while `folder` was written; None for any other error (a bug keeps its traceback).

    setting: the config key that chose the folder (run.runs_dir, bundle.dist_dir). needed: the bytes the
    write needs (needed_note says how it was counted, e.g. "at least, what it had written")."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    # the file being written: a copy's error (shutil.copyfile) names its source first and its destination second,
    # and the source's disk is not the one to free
    target = exc.filename2 or exc.filename
    where = f" ({target})" if target and str(target) != str(folder) else ""
    if exc.errno in NO_SPACE:
        need = f"it needs {human_bytes(needed)}{' ' + needed_note if needed_note else ''}, " if needed is not None \
            else ""
        return PipelineError(
            f"no space left on the disk mounted at {mount_point(folder)} while writing {folder}{where}: "
            f"{need}{human_bytes(free_bytes(folder))} free there. Free some space on that disk, or point {setting} "
            f"at a disk with room (nothing half-written was left)")
    if exc.errno in NOT_WRITABLE or isinstance(exc, PermissionError):
        return PipelineError(
            f"cannot write {folder}{where}: {exc.strerror or 'permission denied'} (a read-only disk, or a folder "
            f"this user may not write). Point {setting} at a writable folder, or make it writable "
            f"(chmod u+w / chown)")
    return None


def make_folder(folder, setting: str) -> None:
    """folder.mkdir(parents=True), with a folder that cannot be made (a part of its path is a file, or a place
    such as /proc that takes no new folders) as one PipelineError naming the setting that chose it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileNotFoundError, NotADirectoryError, FileExistsError) as e:
        raise PipelineError(f"cannot create the folder {folder} ({e.strerror}: {e.filename}): a part of its path is "
                            f"a file, or that place takes no new folders. Point {setting} at a folder that can be "
                            f"made") from None


@_contextmanager
def writing(folder, setting: str = "run.runs_dir"):
    """A full disk or a folder that cannot be written while the block writes folder: one PipelineError naming it
    (disk_error); any other OSError keeps its traceback."""
    try:
        yield
    except OSError as e:
        if (err := disk_error(e, folder, setting)) is None:
            raise
        raise err from e


def error_line(e: PipelineError | PermissionError) -> str:
    """The CLI's last word on a problem the user can fix: a PipelineError's message, or one line for a file or
    folder this process may not read or write (a PermissionError)."""
    if isinstance(e, PipelineError):
        return f"error: {e}"
    what = f" {e.filename}" if e.filename else ""
    return (f"error: permission denied on{what} ({e.strerror or e}): give this user read (and, for a run folder, "
            f"write) access, or point the setting at a folder it owns")
