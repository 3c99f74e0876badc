"""`python -m pipeline verify-bundle DIR`: check a bundle on any machine.

1. metadata.json is well formed, lists at least one file, and every path it names stays inside the bundle;
2. every listed file exists with its size and sha256 (a changed file fails, naming it, and saying when it is a
   copy of another listed file or matches none: a file from another run), and no other file is there (what
   file managers leave, .DS_Store and the like, excepted);
3. the bundle's task and kind (metadata.json "task" and "kind": app / web) pick the checks: the task's verify
   (pipeline/tasks/<task>/verify.py) checks metadata.json against its own digest and the bundle's files (the
   Kotlin / Swift samples: regenerated from it, byte for byte), then replays the samples with the shipped files in a fresh process and compares them with what the build stored.
Needs no torch, transformers or onnx (tests/test_verify_bundle.py runs it with those imports blocked).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.errors import PipelineError, error_line
from pipeline.verify_bundle_meta import METADATA, bundle_kind, is_int, load_metadata, resolve


def check_files(bundle: Path) -> dict:
    """metadata.json's hashes against the files. Raises PipelineError naming the first bad file."""
    from export.bundle import SCHEMA_VERSION
    from pipeline.manifest import sha256_file

    meta = load_metadata(bundle)
    if not is_int(version := meta.get("schema_version")):
        raise PipelineError(f"{bundle}: metadata.json's schema_version is {version!r}, not an integer: the file was "
                            f"edited; restore it from the build's runs/<run>/ folder, or rebuild the bundle with "
                            f"`make bundle` (a web bundle: `make web-bundle`)")
    if version != SCHEMA_VERSION:
        raise PipelineError(f"{bundle}: metadata.json has schema_version {meta.get('schema_version')!r}, this "
                            f"verify-bundle reads {SCHEMA_VERSION} (a digest of metadata.json, its kind); rebuild "
                            f"the bundle with `make bundle`, which re-runs the stage for an older schema (a web "
                            f"bundle: `make web-bundle`, which re-runs for an older schema too)")
    # a web bundle is published by its own stage, to its own folder
    make, dist = ("web-bundle", "dist/<run>-web") if meta.get("kind") == "web" else ("bundle", "dist/<run>")
    restore = f"restore it from the build's runs/<run>/ folder or re-publish with `make {make}`"
    for rel, info in meta["files"].items():
        path = resolve(bundle, rel, "files")
        if not path.is_file():
            raise PipelineError(f"{bundle}: {rel} is missing; {restore} (it rebuilds {dist} when the copy "
                                f"differs)")
        digest = sha256_file(path)
        if path.stat().st_size != info["bytes"] or digest != info["sha256"]:
            raise PipelineError(f"{bundle}: {rel} {_changed(meta, rel, digest)}; {restore}")
    listed = set(meta["files"])
    extra = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                   if p.is_file() and p.name != METADATA and p.relative_to(bundle).as_posix() not in listed)
    # a file the build did not write is checked by nothing, and an app copying the folder ships it (a stray
    # model, a script): refused. What file managers leave behind is let through, and named.
    foreign = [rel for rel in extra if not _os_litter(rel)]
    if foreign:
        raise PipelineError(f"{bundle}: {len(foreign)} file{'s' if len(foreign) > 1 else ''} that metadata.json "
                            f"does not list ({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}): not "
                            f"part of the build, so no sha256 or replay checks {'them' if len(foreign) > 1 else 'it'}; "
                            f"delete {'them' if len(foreign) > 1 else 'it'}, or {restore}")
    return {"meta": meta, "checked": len(listed), "unlisted": extra}


def _os_litter(rel: str) -> bool:
    """Finder's, Explorer's and macOS archives' own files (.DS_Store, ._name, __MACOSX/, Thumbs.db)."""
    parts = rel.split("/")
    return parts[-1] in (".DS_Store", "Thumbs.db", "desktop.ini") or parts[-1].startswith("._") \
        or "__MACOSX" in parts


def _changed(meta: dict, rel: str, digest: str) -> str:
    """What a file whose sha256 differs from metadata.json's is, as far as the hashes tell."""
    twins = sorted(r for r, info in meta["files"].items() if r != rel and info["sha256"] == digest)
    if twins:
        return f"was replaced by a copy of {' = '.join(twins)} (its sha256 is that file's, not its own)"
    run = meta.get("run")
    return (f"was changed: it is not the file this bundle{f' (run {run!r})' if isinstance(run, str) else ''} was "
            f"built with (its sha256 matches no file metadata.json lists): edited, damaged, or from another run")


def verify_bundle(bundle: Path) -> dict:
    """Every check above; raises PipelineError on the first failure, returns a summary otherwise."""
    from pipeline.tasks import TASKS

    bundle = Path(bundle)
    files = check_files(bundle)
    task, _ = bundle_kind(bundle, files["meta"])  # the task's verify dispatches on the kind
    if task not in TASKS or TASKS[task].verify is None:
        raise PipelineError(f"{bundle}/{METADATA}: 'task' is {task!r}, which verify-bundle cannot replay (known: "
                            f"{', '.join(t for t in TASKS if TASKS[t].verify)}); rebuild the bundle with `make bundle`")
    return TASKS[task].verify(bundle, files)


def add_cli(subparsers) -> None:
    from pipeline.cli_args import common_options

    p = subparsers.add_parser("verify-bundle", help="check a bundle (app or web): hashes, metadata, models load, sample outputs match")
    p.add_argument("bundle", nargs="?", help="bundle folder, e.g. dist/demo; left out: the bundles the config's run "
                                             "published (<bundle.dist_dir>/<run.name> and <run.name>-web)")
    common_options(p, force=False)


def published(args: argparse.Namespace) -> list[Path]:
    """The bundles the config's run published (app, then web), for `make verify-bundle CONFIG=...`."""
    from pipeline.cli_args import apply_env
    from pipeline.config import load_config

    apply_env(args)
    cfg = load_config(args.config, args.overrides)
    app = Path(cfg.bundle.dist_dir) / cfg.run.name
    found = [p for p in (app, app.with_name(f"{app.name}-web")) if p.is_dir()]
    if not found:
        raise PipelineError(f"run {cfg.run.name!r} ({args.config}) has no published bundle: {app} does not exist; "
                            f"build it with `make bundle` (the web bundle: `make web-bundle`) or pass a bundle folder")
    return found


def run_cli(args: argparse.Namespace) -> int:
    # an empty value is an unset shell variable (verify-bundle "$DIR"), not a choice: it would verify the demo's
    if empty := [f for f, v in (("the bundle folder", args.bundle), ("--config", args.config)) if v == ""]:
        print(f"error: {empty[0]} is empty (an unset variable?): give a bundle folder, or --config for its run's "
              f"published bundles", file=sys.stderr)
        return 2
    try:
        if args.bundle and (args.config or args.overrides):
            raise PipelineError("give a bundle folder or --config / --set (its run's published bundles), not both")
        for bundle in [Path(args.bundle)] if args.bundle else published(args):
            s = verify_bundle(bundle)
            for line in s["lines"]:
                print(f"  {line}")
            if s["unlisted_files"]:
                print(f"  note: file managers' files, not in metadata.json (not checked): "
                      f"{', '.join(s['unlisted_files'][:5])}")
            print(f"bundle OK: {s['bundle']} ({s['files_checked']} files, sha256 match)")
    except (PipelineError, PermissionError) as e:
        print(error_line(e), file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    """`python -m pipeline verify-bundle DIR` without loading the stages (and so torch)."""
    parser = argparse.ArgumentParser(prog="python -m pipeline")
    add_cli(parser.add_subparsers(dest="command", required=True))
    return run_cli(parser.parse_args(argv))
