"""What every probe's command line shares: counts that must be positive, and bad input (a bad option, a missing
run, a refused config) as one `error:` line with exit status 2 instead of a usage block or a traceback."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pipeline.errors import PipelineError


class ToolParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error (`--rounds 0`, an unknown option) is one `error:` line, exit 2, like
    main_exit's: the usage block argparse prints first buried the one line that says what to fix. --help is unchanged."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\n")


def _whole(text: str, least: int, need: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {need}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number above 0 (a count of calls, rounds, threads, a batch or a length)."""
    return _whole(text, 1, "at least 1")


def non_negative_int(text: str) -> int:
    """argparse type: a whole number, 0 or more (a count where 0 means "all" or "none": texts, warm-up calls)."""
    return _whole(text, 0, "0 or more")


def need_run(run, what: str = "a finished run (make all)") -> None:
    """Refuse a --run folder that does not exist before a library call fails deep inside on a missing file."""
    if not run.is_dir():
        raise PipelineError(f"run folder {run} does not exist: give --run runs/<name> of {what}")


def main_exit(main: Callable[[], int | None]) -> int:
    """Run a probe's main; PipelineError and OS errors (a missing or unreadable file) become one line."""
    try:
        return main() or 0
    except (PipelineError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
