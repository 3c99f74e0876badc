"""The command line's shared arguments: --config / --set / --force, and the environment the Makefile hands them
over in. Below pipeline/cli.py, so the commands that build their own parser (verify-bundle, phone-bench, search)
import it without a cycle."""
from __future__ import annotations

import argparse
import logging
import os
import re

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


def apply_env(args: argparse.Namespace) -> None:
    """--config defaults to $POCKETFORMER_CONFIG, then configs/demo.toml; $POCKETFORMER_SET's items go
    before the command line's --set, so those win."""
    config, sets = env_settings()
    if args.config is None:
        args.config = config or DEFAULT_CONFIG
    if sets:
        log.info("%s: %s", ENV_SET, " ".join(f"--set {s}" for s in sets))
    args.overrides = sets + args.overrides


def common_options(p: argparse.ArgumentParser, force: bool = True) -> None:
    p.add_argument("--config", default=None,
                   help=f"run config (TOML), default ${ENV_CONFIG} or else {DEFAULT_CONFIG}")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help=f"override one config value, e.g. --set distill.epochs=2 (repeatable; after ${ENV_SET}'s)")
    if force:  # status and show-config run no stage: --force there would be a no-op the user thinks did something
        p.add_argument("--force", action="store_true", help="re-run the named stage even if it is up to date")
