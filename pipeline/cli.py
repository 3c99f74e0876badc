"""Command line: `python -m pipeline run --config configs/demo.toml [--set key=value ...]`, one
subcommand per stage (running what it needs first), and `status`. Heavy libraries load only when a
stage runs, so --help and config errors are instant."""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys

from pipeline.errors import PipelineError

DEFAULT_CONFIG = "configs/demo.toml"
# The Makefile hands CONFIG and SET over in these (never pasted into a shell line); --config and --set win.
ENV_CONFIG = "POCKETFORMER_CONFIG"
ENV_SET = "POCKETFORMER_SET"
# SET holds space-separated section.key=value items; a new item starts only where whitespace is followed by
# `section.key=`, so a value keeps its own spaces and quotes: bench.targets=["host-cpu", "mobile-cpu"]
_NEXT_ITEM = re.compile(r"\s+(?=[A-Za-z_][\w-]*\.[A-Za-z_][\w-]*\s*=)")

log = logging.getLogger(__name__)


def split_sets(text: str) -> list[str]:
    """SET's items, one --set each (see _NEXT_ITEM), never cut inside a double-quoted string or a list
    (lm.prompts=["a b.c=1"] is one item); text with no section.key= stays one item and fails there."""
    text, items, start = text.strip(), [], 0
    for m in _NEXT_ITEM.finditer(text):
        head = text[start:m.start()]
        if head.count('"') % 2 == 0 and head.count("[") == head.count("]"):
            items.append(head)
            start = m.end()
    return items + [text[start:]] if text else []


def env_settings(environ=os.environ) -> tuple[str | None, list[str]]:
    """The config path and --set items the environment gives (POCKETFORMER_CONFIG, POCKETFORMER_SET)."""
    return environ.get(ENV_CONFIG) or None, split_sets(environ.get(ENV_SET, ""))


def env_argv(environ=os.environ) -> list[str]:
    """The same as --config/--set arguments, for tools with their own parser (make bench-ddp)."""
    config, sets = env_settings(environ)
    return ["--config", config or DEFAULT_CONFIG] + [a for s in sets for a in ("--set", s)]


def _apply_env(args: argparse.Namespace) -> None:
    """--config defaults to $POCKETFORMER_CONFIG, then configs/demo.toml; $POCKETFORMER_SET's items go
    before the command line's --set, so those win."""
    config, sets = env_settings()
    if args.config is None:
        args.config = config or DEFAULT_CONFIG
    if sets:
        log.info("%s: %s", ENV_SET, " ".join(f"--set {s}" for s in sets))
    args.overrides = sets + args.overrides


def _stages():
    from pipeline.stage import STAGES

    return STAGES


def _common(p: argparse.ArgumentParser, force: bool = True) -> None:
    p.add_argument("--config", default=None,
                   help=f"run config (TOML), default ${ENV_CONFIG} or else {DEFAULT_CONFIG}")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help=f"override one config value, e.g. --set distill.epochs=2 (repeatable; after ${ENV_SET}'s)")
    if force:  # status and show-config run no stage: --force there would be a no-op the user thinks did something
        p.add_argument("--force", action="store_true", help="re-run the named stage even if it is up to date")


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
        _common(sub.add_parser(name, help=doc), force=name not in ("status", "show-config"))
    sub.choices["run"].add_argument("--until", default=None, help="last stage to run")
    from pipeline import phone
    from pipeline import search
    from pipeline import verify

    search.add_cli(sub, _common)
    verify.add_cli(sub)
    phone.add_cli(sub)
    return parser


# Library warnings that say nothing the pipeline does not already handle, each with why it is dropped:
_QUIET = (
    # quantize_dynamic, once per file: the pipeline runs that pre-processing before quantize_static
    # (export/quantize.py, export/npu.py), where calibration needs it, and checks every quantized file either way
    "pre-processing before quantization",
    # coremltools on Linux, at import: Core ML prediction needs macOS, and export/coreml.py records that reason
    "Failed to load _MLModelProxy",
    # coremltools on nn.Embedding's padding_idx: it only shapes gradients, so the converted lookup is the same
    "Core ML embedding (gather) layer does not support any inputs besides",
)


def _not_quiet(record: logging.LogRecord) -> bool:
    return not any(q in record.getMessage() for q in _QUIET)


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
    _apply_env(args)
    # an empty value is an unset shell variable (--config "$CFG"), not a choice: it would quietly mean the
    # defaults (the demo) or every stage
    left_out = {"config": f"${ENV_CONFIG}, else {DEFAULT_CONFIG}", "until": "every stage"}
    if empty := [flag for flag in left_out if getattr(args, flag, None) == ""]:
        print(f"error: --{empty[0]} is empty (an unset variable?): give a value, or leave --{empty[0]} out "
              f"({left_out[empty[0]]})", file=sys.stderr)
        return 2
    try:
        from pipeline.config import dumps, load_config
        from pipeline.stage import STAGES, default_targets, run, statuses

        if args.command == "phone-bench":  # verify-bundle returned above
            from pipeline import phone

            return phone.run_cli(args)
        if args.command == "search":  # its flags are overrides of [search] keys (so its fingerprint has them)
            from pipeline import search

            args.overrides = args.overrides + search.flag_overrides(args)
        cfg = load_config(args.config, args.overrides)
        if args.command == "search":
            return search.run_cli(cfg, args)
        if args.command == "show-config":
            print(dumps(cfg))
            return 0
        if args.command == "status":
            for name, (_, why) in statuses(cfg, list(STAGES)).items():
                print(f"{name:10s} {why}")
            # an interrupted stage's scratch folder: never taken as finished, replaced when the stage runs again
            for left in sorted(cfg.run_dir.glob(".*.partial")):
                print(f"note: {left} is what an interrupted stage left; the stage's next run removes it")
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
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the unfinished stage left nothing behind; run the same command again to resume",
              file=sys.stderr)
        return 130
