"""The bundle's published copy (<bundle.dist_dir>/<run>/): `make bundle` re-publishes it when it is missing or
differs instead of saying "up to date", and a killed copy's hidden temporary folder is removed by the next run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_bundle_stage import bundled_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return bundled_run(tmp_path_factory)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_missing_or_changed_published_copy_reruns_the_stage(built):
    from pipeline.stage import run, status

    _, cfg = built
    dist = Path(cfg.bundle.dist_dir) / "tiny"
    src = cfg.run_dir / "bundle"
    assert status(cfg, "bundle") == (True, "up to date")
    shutil.rmtree(dist)
    fresh, why = status(cfg, "bundle")
    assert not fresh and why == f"its published copy {dist} is missing"
    assert run(cfg, ["bundle"]) == ["bundle"]  # on today's main: [] ("up to date"), and no dist/tiny
    assert (dist / "metadata.json").read_bytes() == (src / "metadata.json").read_bytes()
    assert status(cfg, "bundle") == (True, "up to date")

    (dist / "labels.json").write_text("[]")
    assert status(cfg, "bundle") == (False, f"labels.json of its published copy {dist} was changed")
    shutil.copy2(src / "labels.json", dist / "labels.json")
    (dist / "extra.txt").write_text("not in the bundle")
    assert status(cfg, "bundle") == (False, f"its published copy {dist} has files added or removed")
    (dist / "extra.txt").unlink()
    (dist / "metadata.json").write_text("{}")
    assert status(cfg, "bundle")[1] == f"the metadata.json of its published copy {dist} differs"
    shutil.copy2(src / "metadata.json", dist / "metadata.json")

    # a copy killed mid-way (its process gone) left 20 MB in a hidden folder: the next run removes it
    stale = dist.parent / f".tiny.partial-{_dead_pid()}"
    shutil.copytree(src / "model", stale / "model")
    fresh, why = status(cfg, "bundle")
    assert not fresh and why == f"a killed copy left {stale} beside its published copy"
    assert run(cfg, ["bundle"]) == ["bundle"]
    assert sorted(p.name for p in dist.parent.iterdir()) == ["tiny"]
    assert status(cfg, "bundle") == (True, "up to date")


def test_publish_removes_dead_copies_and_keeps_live_ones(tmp_path):
    from export.publish import publish, stale_temps

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("new")
    dest = tmp_path / "dist" / "run"
    dead = [dest.parent / f".run.partial-{_dead_pid()}", dest.parent / f".run.old-{_dead_pid()}"]
    live = dest.parent / f".run.partial-{os.getppid()}"  # a copy in progress in a live process
    other = dest.parent / f".other.partial-{_dead_pid()}"  # another run's: not ours to judge
    for folder in (*dead, live, other):
        (folder / "model").mkdir(parents=True)
    assert stale_temps(dest) == sorted(dead)
    publish(src, dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted([other.name, live.name, "run"])
    assert (dest / "a.txt").read_text() == "new"


def test_a_reused_pid_does_not_keep_a_killed_copy(tmp_path):
    """A killed copy's folder named by its pid alone was kept for good once that pid went to another process: it
    is named by pid and start time now, and kept only while that very process runs. A folder of the older name
    counts only if the process at its pid started before the folder was written."""
    import psutil

    from export.publish import publish, stale_temps

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("new")
    dest = tmp_path / "dist" / "run"
    ppid = os.getppid()  # a live process: pytest's parent
    started = int(psutil.Process(ppid).create_time())
    reused = dest.parent / f".run.partial-{ppid}-{started - 3600}"  # its pid, another (dead) process's start
    old_name = dest.parent / f".run.old-{ppid}"  # written before that process started: not its folder
    live = dest.parent / f".run.partial-{ppid}-{started}"  # a copy in progress in that very process
    for folder in (reused, old_name, live):
        (folder / "model").mkdir(parents=True)
    os.utime(old_name, (started - 3600, started - 3600))
    assert stale_temps(dest) == sorted([old_name, reused])  # on main: [] (the pid runs, so all three were kept)
    publish(src, dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted([live.name, "run"])


def test_generation_runs_publish_nothing_and_old_schemas_rebuild(built, monkeypatch):
    from pipeline.stage import STAGES

    _, cfg = built

    def published_check(cfg, manifest):
        return STAGES["bundle"].check(cfg, manifest)

    assert published_check(cfg, {"summary": {"skipped": "app bundles are built for classification"}}) is None
    manifest = json.loads((cfg.run_dir / "bundle" / "manifest.json").read_text())
    assert manifest["summary"]["dist"] == str(Path(cfg.bundle.dist_dir) / "tiny")
    assert published_check(cfg, manifest) is None
    # a bundle written in an older format is rebuilt by `make bundle` (verify-bundle's advice for it)
    import export.bundle

    monkeypatch.setattr(export.bundle, "SCHEMA_VERSION", export.bundle.SCHEMA_VERSION + 1)
    assert published_check(cfg, manifest) == "its bundle has schema 3, this code writes 4"
    # the web bundle is held to the same rule: a web bundle of an older format (or none) is rebuilt, and one
    # that published nothing (a task without a web bundle) is not
    assert STAGES["web-bundle"].check(cfg, {"summary": {"dist": str(cfg.run_dir / "nowhere")}}).startswith(
        "its bundle has schema")
    assert STAGES["web-bundle"].check(cfg, {"summary": {"skipped": "no web bundle"}}) is None
