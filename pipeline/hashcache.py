"""sha256 of run files, remembered by stat signature so that `status` can compare contents cheaply.

A stage is up to date only if every file it wrote still has the sha256 its manifest recorded: equal sizes
prove nothing (swapping two labels of equal length in labels.json keeps the size). Hashing a whole run
(hundreds of MB of ONNX files) on every `status` or `make` would cost seconds, so a file's sha256 is kept
in `runs/<run>/.sha256-cache.json` with its size, mtime, ctime and inode, and re-computed when any of them
moved. Writing a file changes mtime and ctime, replacing it changes the inode, and ctime cannot be set
from user space (a tool restoring mtime still moves it), so a stale cache entry cannot survive an edit.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from export import procs
from pipeline.manifest import sha256_file

CACHE_NAME = ".sha256-cache.json"


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class HashCache:
    """Cached sha256 of files under one run folder; save() writes the cache back (atomically)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.path = run_dir / CACHE_NAME
        self.entries: dict[str, list] = {}
        self.dirty = False
        try:
            loaded = json.loads(self.path.read_text())
            if isinstance(loaded, dict):
                self.entries = loaded
        except (OSError, ValueError):
            pass  # no cache or a damaged one: every file is hashed again, which is only slower

    def _key(self, path: Path) -> str:
        try:
            return path.relative_to(self.run_dir).as_posix()  # the stages' own files: the run folder can move
        except ValueError:
            return str(path.resolve())  # a source a stage reads (a data file, a teacher folder)

    def sha256(self, path: Path) -> str:
        sig = _signature(path.stat())
        key = self._key(path)
        entry = self.entries.get(key)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == sig:
            return entry[1]
        digest = sha256_file(path)
        if _signature(path.stat()) == sig:  # a file being written while hashed is not remembered
            self.entries[key] = [sig, digest]
            self.dirty = True
        return digest

    def remember(self, path: Path, digest: str) -> None:
        """Record a sha256 just computed elsewhere (the manifest of a stage that has just finished)."""
        self.entries[self._key(path)] = [_signature(path.stat()), digest]
        self.dirty = True

    def save(self) -> None:
        if not self.dirty or not self.run_dir.is_dir():
            return
        # named by pid and start time, so a killed save's file is not kept for an unrelated process given its pid
        tmp = self.path.with_name(f"{CACHE_NAME}.{procs.tag()}.part")
        for old in self.run_dir.glob(f"{CACHE_NAME}.*.part"):  # a save that was killed before its rename
            if old != tmp and not procs.writer_alive(old.name[len(CACHE_NAME) + 1:-len(".part")], old):
                old.unlink(missing_ok=True)
        try:
            tmp.write_text(json.dumps(self.entries, sort_keys=True))
            tmp.replace(self.path)  # two processes saving at once: the last one wins, neither is corrupt
        except OSError:
            tmp.unlink(missing_ok=True)  # a read-only run folder: the cache is an optimisation only
        self.dirty = False
