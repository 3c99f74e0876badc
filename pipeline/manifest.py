"""Run manifests: what a stage read, what it wrote, with which settings and library versions.

A stage's manifest is written last, inside the stage's temporary folder, and the folder is renamed into
place only after that; so a folder with a manifest is always a finished stage, and an interrupted one
leaves nothing a later stage could mistake for done.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from export.hashing import sha256_file  # noqa: F401  (re-exported: the stages hash files through here)

MANIFEST = "manifest.json"
_VERSIONED = ("torch", "transformers", "tokenizers", "onnx", "onnxruntime", "onnxruntime-extensions",
              "optimum", "optimum-onnx", "coremltools", "numpy", "pocketformer")


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def library_versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED:
        # onnxruntime ships as several distributions of one module (onnxruntime, onnxruntime-gpu): the module's
        # own version is what ran; the "onnxruntime" distribution's can be another install beside it
        version = getattr(sys.modules.get(name), "__version__", None) if name == "onnxruntime" else None
        if isinstance(version, str):
            out[name] = version
            continue
        with suppress(importlib.metadata.PackageNotFoundError):  # not installed: not listed
            out[name] = importlib.metadata.version(name)
    out["python"] = platform.python_version()
    return out


def list_outputs(folder: Path) -> dict[str, dict[str, Any]]:
    """Every file under folder (the manifest excepted) with size and sha256, keyed by relative path."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            out[p.relative_to(folder).as_posix()] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
    return out


def write_whole(path: Path, text: str) -> None:
    """text into path through a .partial file renamed over it: readers never see half a file, and a kill
    mid-write leaves the previous one whole."""
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_manifest(folder: Path, *, stage: str, config: dict, config_hash: str, inputs: dict[str, str],
                   summary: dict, started: float, sources: dict[str, str] | None = None,
                   notes: tuple[str, ...] = (), revision: int = 1) -> dict:
    manifest = {
        "stage": stage,
        "revision": revision,  # the step's (pipeline/task.py Step.revision): an older one re-runs the stage
        "config_hash": config_hash,
        "config": config,
        "inputs": inputs,  # upstream stage -> its content_key()
        # config key -> sha256 of the local files it names (pipeline/stage.py SOURCES), and tool -> its state here
        # (pipeline/task.py Step.environment); not in content_key: a re-run on an edited source or another install
        # that writes the same files leaves everything downstream up to date
        "sources": sources or {},
        "outputs": list_outputs(folder),
        "notes": list(notes),  # outputs for people, not in content_key
        "summary": summary,
        "versions": library_versions(),
        "machine": {"platform": platform.platform(), "processor": platform.machine()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 2),
    }
    write_whole(folder / MANIFEST, json.dumps(manifest, indent=2, default=str))
    return manifest


def read_manifest(folder: Path) -> dict | None:
    """The stage's manifest, or None (not run yet) where it is missing, not JSON, or JSON of another shape:
    a damaged manifest is an unfinished stage, so the stage re-runs instead of every reader failing on it."""
    path = folder / MANIFEST
    with suppress(json.JSONDecodeError, UnicodeDecodeError):
        manifest = json.loads(path.read_text()) if path.is_file() else None
        return manifest if _well_formed(manifest) else None
    return None


def _well_formed(m: object) -> bool:
    """The fields status, content_key and the stages read have the types write_manifest gives them."""
    if not (isinstance(m, dict) and isinstance(m.get("config_hash"), str) and isinstance(m.get("summary"), dict)
            and isinstance(m.get("inputs"), dict) and isinstance(m.get("outputs"), dict)
            and type(m.get("revision", 1)) is int and isinstance(m.get("notes", []), list)):
        return False
    return (all(isinstance(k, str) for k in [*m["inputs"].values(), *m.get("notes", [])])
            and all(isinstance(o, dict) and isinstance(o.get("bytes"), int) and isinstance(o.get("sha256"), str)
                    for o in m["outputs"].values()))


def content_key(folder: Path) -> str | None:
    """What a downstream stage is keyed on: the sha256 of every file the finished stage wrote but its notes
    (files for people, Step.notes) and, in turn, its own inputs' keys; not its settings, times, machine or
    summary. So a re-run that writes the same files (a setting that changed only a note, a byte-identical
    rebuild) leaves everything downstream up to date, while any change upstream of it that reaches a file still
    reaches it; a setting a downstream stage reads itself is in that stage's own fingerprint. None if the stage
    has not finished."""
    manifest = read_manifest(folder)
    if manifest is None:
        return None
    notes = set(manifest.get("notes", []))
    return sha256_json({"inputs": manifest.get("inputs", {}),
                        "outputs": {rel: meta.get("sha256") for rel, meta in manifest.get("outputs", {}).items()
                                    if rel not in notes}})


def folder_key(folder: Path) -> str | None:
    """content_key() of a folder no stage owns (no manifest): the sha256 of each file under it, by relative
    path. None when it holds no file, so an absent folder and an emptied one read the same."""
    files = list_outputs(folder) if folder.is_dir() else {}
    return sha256_json({rel: meta["sha256"] for rel, meta in files.items()}) if files else None


def outputs_intact(folder: Path, manifest: dict, cache) -> str | None:
    """None if every recorded output is still there with its recorded size and sha256, else what differs.
    cache: a pipeline.hashcache.HashCache, so unchanged files are not hashed again on every check."""
    for rel, meta in manifest.get("outputs", {}).items():
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != meta["bytes"]:
            return f"{rel} changed size"
        if cache.sha256(p) != meta.get("sha256"):
            return f"{rel} changed (its sha256 differs from the manifest's)"
    return None
