"""Runtime faults that used to end in a traceback or pass silently: a full disk or a read-only folder while a
stage or a bundle is written, quality gates on too few texts, a PCA start over a tiny vocabulary, fewer
training windows than asked for, a context longer than the teacher's positions. Each is one PipelineError
(or a recorded warning) naming the numbers and the fix."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from conftest import use_toy_stages

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def _toy(monkeypatch, fn):
    use_toy_stages(monkeypatch, [("a", fn, (), ("data",))])


def _cfg(tmp_path: Path, **sections):
    return config_from_dict({"run": {"runs_dir": str(tmp_path / "runs"), "name": "r"}, **sections})


# ---- a full disk -----------------------------------------------------------------------------------------

def test_full_disk_while_a_stage_writes_is_one_error_and_leaves_no_partial(monkeypatch, tmp_path):
    from pipeline.stage import run

    def fills_the_disk(ctx):
        (ctx.out / "big.bin").write_bytes(b"x" * 5000)
        raise OSError(errno.ENOSPC, "No space left on device", str(ctx.out / "more.bin"))

    _toy(monkeypatch, fills_the_disk)
    cfg = _cfg(tmp_path)
    with pytest.raises(PipelineError) as e:
        run(cfg, ["a"])
    msg = str(e.value)
    assert "no space left on the device while writing" in msg and ".a.partial" in msg
    assert "4.9 KB at least" in msg and "free there" in msg and "run.runs_dir" in msg
    assert not (cfg.run_dir / ".a.partial").exists() and not (cfg.run_dir / "a").exists()


def test_full_disk_while_publishing_a_bundle_names_its_size_and_removes_the_copy(monkeypatch, tmp_path):
    from export import publish as P

    src = tmp_path / "bundle"
    (src / "model").mkdir(parents=True)
    (src / "model" / "m.onnx").write_bytes(b"w" * 3000)
    (src / "metadata.json").write_text("{}")
    dest = tmp_path / "dist" / "run"
    real = shutil.copy2

    def copy2(s, d, *a, **k):
        if str(s).endswith("m.onnx"):
            raise OSError(errno.ENOSPC, "No space left on device", str(d))
        return real(s, d, *a, **k)

    monkeypatch.setattr(shutil, "copy2", copy2)
    with pytest.raises(PipelineError) as e:
        P.publish(src, dest)
    msg = str(e.value)
    assert f"while writing {dest}" in msg and "it needs 2.9 KB (the bundle's size)" in msg
    assert "bundle.dist_dir" in msg and "free there" in msg
    assert not dest.exists() and list((tmp_path / "dist").iterdir()) == []  # no hidden partial copy left


def test_other_copy_failures_keep_their_traceback(monkeypatch, tmp_path):
    from export import publish as P

    src = tmp_path / "bundle"
    src.mkdir()
    (src / "a.txt").write_text("a")

    def broken(s, d, *a, **k):
        raise OSError(errno.EIO, "Input/output error", str(s))

    monkeypatch.setattr(shutil, "copy2", broken)
    with pytest.raises(OSError, match="Input/output error") as e:
        P.publish(src, tmp_path / "dist" / "r")
    assert not isinstance(e.value, PipelineError)


# ---- a read-only runs or dist folder -----------------------------------------------------------------------

def test_read_only_runs_folder_names_the_folder_and_the_setting(monkeypatch, tmp_path):
    from pipeline.stage import run

    _toy(monkeypatch, lambda ctx: {})
    cfg = _cfg(tmp_path)
    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self == cfg.run_dir:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PipelineError, match=r"cannot write .*runs/r: Permission denied .*run\.runs_dir.*chmod"):
        run(cfg, ["a"])


def test_read_only_lock_file_or_partial_folder(monkeypatch, tmp_path):
    from pipeline import lock
    from pipeline.stage import run

    _toy(monkeypatch, lambda ctx: {})
    cfg = _cfg(tmp_path)
    real_open = os.open

    def ro_open(path, *a, **k):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(lock.os, "open", ro_open)
    with pytest.raises(PipelineError, match=r"cannot write .*runs/r \(.*\.lock\): Read-only file system"):
        run(cfg, ["a"])
    monkeypatch.setattr(lock.os, "open", real_open)

    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self.name == ".a.partial":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PipelineError, match=r"cannot write .*\.a\.partial: Permission denied.*run\.runs_dir"):
        run(cfg, ["a"])


def test_read_only_dist_folder(monkeypatch, tmp_path):
    from export import publish as P

    src = tmp_path / "bundle"
    src.mkdir()
    (src / "a.txt").write_text("a")
    dest = tmp_path / "dist" / "run"
    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self == dest.parent:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PipelineError, match=r"cannot write .*dist/run \(.*dist\): Permission denied.*bundle\.dist_dir"):
        P.publish(src, dest)


@pytest.mark.skipif(ROOT, reason="root ignores file permissions")
def test_read_only_folders_with_chmod(monkeypatch, tmp_path):
    from export import publish as P
    from pipeline.stage import run

    _toy(monkeypatch, lambda ctx: {})
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        cfg = config_from_dict({"run": {"runs_dir": str(ro / "runs"), "name": "r"}})
        with pytest.raises(PipelineError, match=r"cannot write .*run\.runs_dir"):
            run(cfg, ["a"])
        src = tmp_path / "bundle"
        src.mkdir()
        (src / "a.txt").write_text("a")
        with pytest.raises(PipelineError, match=r"cannot write .*bundle\.dist_dir"):
            P.publish(src, ro / "dist" / "r")
    finally:
        ro.chmod(0o755)
