"""Command line: `python -m pipeline run --config configs/demo.toml [--set key=value ...]`, one
subcommand per stage (running what it needs first), and `status`. Heavy libraries load only when a
stage runs, so --help and config errors are instant."""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import TYPE_CHECKING

from pipeline.cli_args import DEFAULT_CONFIG, ENV_CONFIG, apply_env, common_options
from pipeline.errors import PipelineError, error_line

if TYPE_CHECKING:
    from pipeline.config import Config


def _stages():
    from pipeline.stage import STAGES

    return STAGES


def _duration(seconds: float) -> str:
    whole = round(seconds)
    return f"{seconds:.1f} s" if seconds < 60 else f"{whole // 60} min {whole % 60} s"


def status_table(cfg: Config, states: dict[str, tuple[bool, str]]) -> str:
    """`status`: a line per stage (its state, when its manifest says it last ran and for how long) and the
    time the stages that have run took in all, so a user sees where a run's hours went without a log."""
    from pipeline.manifest import read_manifest

    lines, total = [f"{'stage':10s} {'last run began':16s} {'took':>12s}  state"], 0.0
    for name, (_, why) in states.items():
        manifest = read_manifest(cfg.run_dir / name) or {}
        seconds, began = manifest.get("seconds"), manifest.get("started")
        ran = isinstance(seconds, (int, float)) and isinstance(began, str)
        began, took = (began.replace("T", " ")[:16], _duration(seconds)) if ran else ("-", "-")
        total += seconds if ran else 0.0
        lines.append(f"{name:10s} {began:16s} {took:>12s}  {why}")
    lines.append(f"{'in all':10s} {'':16s} {_duration(total):>12s}  (the last run of every stage listed)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description="pocketformer: distil, quantize, "
                                     "export, benchmark and ship small text models")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {"run": "run every stage (or up to --until), skipping those already up to date",
                "status": "show which stages are done and which would run",
                "show-config": "print the fully resolved config",
                # an optional stage brings its own command and flags (search.add_cli below)
                **{name: stage.doc for name, stage in _stages().items() if not stage.optional}}
    for name, doc in commands.items():
        common_options(sub.add_parser(name, help=doc), force=name not in ("status", "show-config"))
    sub.choices["run"].add_argument("--until", default=None, help="last stage to run")
    from pipeline import phone
    from pipeline import search
    from pipeline import verify

    search.add_cli(sub)
    verify.add_cli(sub)
    phone.add_cli(sub)
    return parser


# Library warnings that say nothing the pipeline does not already handle, each with why it is dropped:
_QUIET = (
    # quantize_dynamic, once per file: the pipeline runs that pre-processing before quantize_static
    # (export/quantize.py, export/npu.py), where calibration needs it, and checks every quantized file either way
    "pre-processing before quantization",
    # coremltools on Linux, at import (_MLModelProxy, _MLCPUComputeDeviceProxy, ...): Core ML prediction needs
    # macOS, and export/coreml.py records that reason
    "Failed to load _ML",
    # coremltools 9 on torch 2.13: the pinned pair the export tests convert and read back on every run
    "has not been tested with coremltools",
    # coremltools on nn.Embedding's padding_idx: it only shapes gradients, so the converted lookup is the same
    "Core ML embedding (gather) layer does not support any inputs besides",
    # transformers, once per process on models it loads for export: settings of its own, not the user's
    "`torch_dtype` is deprecated",
    "was set in the config but it is unrecognized",
    # optimum's export of the teacher for the optimum-* peers: opset 17 is this project's pinned ceiling
    # (export/onnx_export.py MAX_OPSET), and the file is checked against its source either way
    "is lower than the recommended minimum opset",
    "Weight deduplication check in the ONNX export requires accelerate",
)


def _not_quiet(record: logging.LogRecord) -> bool:
    return not any(q in record.getMessage() for q in _QUIET)


def _quiet_libraries() -> None:
    """Before the stages run: the libraries' console output that says nothing a user can act on."""
    import warnings

    import onnxruntime as ort
    from optimum.utils import logging as optimum_logging
    from transformers.utils import logging as hf_logging

    # transformers and optimum print through handlers of their own, which the root's filter never sees
    for root in (hf_logging.get_logger(), optimum_logging.get_logger()):
        for handler in root.handlers:
            handler.addFilter(_not_quiet)
    # onnxruntime's C++ log, for the sessions its quantizer opens itself: errors only. Its warnings are graph
    # clean-ups ("Removing initializer ... It is not used by any node", dozens per int8 file); the stages check
    # every file they write against its source either way
    ort.set_default_logger_severity(3)
    # torch.jit.trace of transformers' attention mask for Core ML: that constant is the same for every input
    warnings.filterwarnings("ignore", message="torch.tensor results are registered as constants")


def main(argv: list[str] | None = None) -> int:
    # The project's own loggers speak at INFO; libraries only from WARNING up: onnxruntime's quantizer and
    # graph optimizer log every tensor and fusion at INFO on the root logger (dozens of lines per file).
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:  # on the handler: it sees what the libraries' loggers propagate
        handler.addFilter(_not_quiet)
    for name in ("pocketformer", "pipeline"):
        logging.getLogger(name).setLevel(logging.INFO)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["verify-bundle"]:  # before the stages load: it must run where only onnxruntime is installed
        from pipeline import verify

        return verify.main(argv)
    args = build_parser().parse_args(argv)
    apply_env(args)
    # an empty value is an unset shell variable (--config "$CFG"), not a choice: it would quietly mean the
    # defaults (the demo) or every stage
    left_out = {"config": f"${ENV_CONFIG}, else {DEFAULT_CONFIG}", "until": "every stage"}
    if empty := [flag for flag in left_out if getattr(args, flag, None) == ""]:
        print(f"error: --{empty[0]} is empty (an unset variable?): give a value, or leave --{empty[0]} out "
              f"({left_out[empty[0]]})", file=sys.stderr)
        return 2
    try:
        from pipeline.config import dumps, load_config
        from pipeline.stage import STAGES, default_targets, run, running, statuses

        if args.command == "phone-bench":  # verify-bundle returned above
            from pipeline import phone

            return phone.run_cli(args)
        flags: dict[str, str] = {}
        if args.command == "search":  # its flags are overrides of [search] keys (so its fingerprint has them)
            from pipeline import search

            flags = search.flag_overrides(args)
            args.overrides = args.overrides + list(flags)
        cfg = load_config(args.config, args.overrides, flags)
        if args.command not in ("show-config", "status"):
            _quiet_libraries()
        if args.command == "search":
            return search.run_cli(cfg, args)
        if args.command == "show-config":
            print(dumps(cfg))
            return 0
        if args.command == "status":
            states = statuses(cfg, list(STAGES))
            # a stage a live process runs now has no manifest yet: say so, not "not run yet" or "interrupted"
            live = {name: now for name in STAGES if (now := running(cfg.run_dir, name))}
            states.update({name: (False, now) for name, now in live.items()})
            print(status_table(cfg, states))
            if not cfg.run_dir.is_dir():  # a mistyped run.name / runs_dir looks like a run that never ran: say so
                others = sorted(p.name for p in cfg.run_dir.parent.glob("*") if p.is_dir() and p.name[0] != ".")
                print(f"note: there is no run folder {cfg.run_dir} yet" +
                      (f"; the runs in {cfg.run_dir.parent}: {', '.join(others[:10])}" if others else ""))
            # an interrupted stage's scratch folder: never taken as finished, replaced when the stage runs again.
            # A running stage's (rank 0's .<stage>.partial, other ranks' .<stage>.rankN.partial) is its work.
            for left in sorted(cfg.run_dir.glob(".*.partial")):
                if re.sub(r"\.rank\d+$", "", left.name[1:-len(".partial")]) not in live:
                    print(f"note: {left} is what an interrupted stage left; the next run of that stage (or a run "
                          f"that finds it up to date) removes it")
            return 0
        if args.command == "run":
            targets = [args.until] if args.until else default_targets()
            if args.until == "search":  # its request (target, budget) is checked before data, teacher and logits
                from pipeline import search

                search.request_of(cfg)
        else:
            targets = [args.command]
        run(cfg, targets, force=tuple(targets) if args.force else ())  # --force re-runs the named stages
        return 0
    except (PipelineError, PermissionError) as e:  # or a file or folder this process may not read or write
        print(error_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the unfinished stage left nothing behind; run the same command again to resume",
              file=sys.stderr)
        return 130
