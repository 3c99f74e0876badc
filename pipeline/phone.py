"""`make phone-bench` (`pocketformer phone-bench`): the bundled model timed on a real phone or a Mac
(eval/phone.py measures and merges), then report/results.json written, the report (md / html) re-rendered
and the report manifest's file list refreshed, so the report is not taken as changed (the bundle, which
quotes the report, then rebuilds)."""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

from pipeline.config import load_config
from pipeline.errors import PipelineError
from pipeline.lock import run_lock
from pipeline.manifest import MANIFEST, content_key, folder_key, list_outputs, read_manifest, write_whole


def phone_bench(cfg, platform_name: str = "android", adb: str | None = None, perf_test: str | None = None,
                serial: str | None = None) -> dict:
    """Measure on the device, merge into report/results.json and re-render the report; returns device,
    targets, runs and seq_len."""
    from eval.phone import measure_phone
    from pipeline.tasks import task_of

    if not task_of(cfg).phone_bench:  # before the staleness check: such a bundle has no .ort or Core ML classifier
        raise PipelineError(f"phone-bench times a text-classification bundle (its .ort on Android, its Core ML "
                            f"package on a Mac); run.task = '{cfg.run.task}' ({cfg.source}) makes a bundle it does "
                            f"not time: that model's latency is in the bench stage's rows (`make bench`). Give "
                            f"phone-bench a classification run's config, e.g. --config configs/demo.toml")
    _refuse_stale_bundle(cfg)
    out = measure_phone(cfg, platform_name, adb, perf_test, serial)
    write_results(cfg.run_dir, out.pop("results"), out["targets"], out.pop("keep"))
    return out


def _refuse_stale_bundle(cfg) -> None:
    """An out-of-date bundle holds an older model: timing it would merge its rows into the new report, with the
    NPU file taken from the new quantize folder. phone-bench re-renders the report, which the bundle quotes: a
    bundle built on a report phone-bench has re-rendered since the report stage ran holds the same model, so a
    second phone (or the Mac) needs no rebuild."""
    from pipeline.stage import statuses

    if not (cfg.run_dir / "bundle" / "metadata.json").is_file():
        return  # measure_phone says there is no bundle, and how to build one
    report = read_manifest(cfg.run_dir / "report") or {}
    earlier = set(report.get("summary", {}).get("phone_bench_replaced", []))
    fresh, why = statuses(cfg, ["bundle"], accept={"report": earlier})["bundle"]
    if not fresh:
        raise PipelineError(f"the bundle is out of date ({why}): run `make bundle` first")


def write_results(run_dir: Path, results: dict, new_targets: list[str], keep: dict[str, dict]) -> None:
    """Validate, then write the kept phone rows (runs/<run>/phone/<file>: record, which the next report
    re-merges) and results.json atomically, re-render the report and refresh its manifest."""
    from eval.report import write_report
    from eval.results import validate_results

    problems = validate_results(results)
    if problems:
        raise PipelineError(f"phone rows would break eval/SCHEMA.md ({problems[0]}); nothing was written")
    (run_dir / "phone").mkdir(exist_ok=True)
    for name, record in keep.items():  # each whole or not at all: a half-written file would fail every report
        write_whole(run_dir / "phone" / name, json.dumps(record, indent=2))
    report = run_dir / "report"
    write_whole(report / "results.json", json.dumps(results, indent=2))
    write_report(results, report)
    manifest = read_manifest(report)
    if manifest is not None:
        _refresh_manifest(run_dir, manifest, new_targets)


def _refresh_manifest(run_dir: Path, manifest: dict, new_targets: list[str]) -> None:
    """The report manifest after phone-bench re-rendered the report: its files, the phone folder it now merges
    (an input of the report stage, so the stage stays up to date) and, in phone_bench_replaced, the report's
    earlier content keys: a bundle built on one of them holds the same model (eval/phone.py _bundle)."""
    report = run_dir / "report"
    summary = manifest.setdefault("summary", {})
    summary["phone_bench_replaced"] = [*summary.get("phone_bench_replaced", []), content_key(report)]
    summary["phone_targets"] = sorted(set(summary.get("phone_targets", [])) | set(new_targets))
    manifest["outputs"] = list_outputs(report)
    if phone := folder_key(run_dir / "phone"):  # None only when nothing was ever kept (no provider ran)
        manifest["inputs"]["phone"] = phone
    write_whole(report / MANIFEST, json.dumps(manifest, indent=2, default=str))


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("phone-bench", help="time the bundled model on an Android phone (adb) or a Mac "
                                                  "(Core ML) and merge the rows into report/results.json")
    from pipeline.cli_args import common_options

    common_options(p, force=False)
    p.add_argument("--platform", choices=("android", "apple"), default="android")
    p.add_argument("--adb", default=None, help="adb executable (default: phone.adb, 'adb' on PATH)")
    p.add_argument("--perf-test", dest="perf_test", default=None, help="onnxruntime_perf_test for Android arm64")
    p.add_argument("--serial", default=None, help="adb device serial (default: the only device attached)")


def run_cli(args: argparse.Namespace) -> int:
    """Called inside pipeline.cli.main, which prints a PipelineError as one line."""
    cfg = load_config(args.config, args.overrides)
    # it rewrites report/ of the run; no run folder: phone_bench says what to run first
    with run_lock(cfg.run_dir, "phone-bench") if cfg.run_dir.is_dir() else nullcontext():
        out = phone_bench(cfg, args.platform, args.adb, args.perf_test, args.serial)
    d = out["device"]
    print(f"{d['name']} ({d.get('soc') or 'SoC unknown'}), {out['seq_len']} tokens:")
    for target, run in zip(out["targets"], out["runs"]):
        e = run.get("entry")
        print(f"  {target}: " + (f"p50 {e['p50_ms']:.2f} ms, p90 {e['p90_ms']:.2f} ms" if e
                                 else f"{run['status']}: {run['reason']}"))
    print(f"merged into {cfg.run_dir / 'report' / 'results.json'} (report.md / report.html re-rendered)")
    if not any(run.get("entry") for run in out["runs"]):
        # the rows say why, and the report shows them; a script must still see that nothing was timed
        print("error: phone-bench timed nothing: every run failed or skipped (reasons above); fix the first "
              "reason or choose other phone.providers", file=sys.stderr)
        return 1
    return 0
