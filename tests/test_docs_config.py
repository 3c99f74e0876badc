"""docs/configuration.md lists every config key under its section with the default the dataclasses hold, and
nothing that is not a key: a new or renamed setting, or a changed default, fails here until the reference
says so."""
from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from pipeline.config import Config

ROOT = Path(__file__).resolve().parent.parent
SECTION = re.compile(r"^## `\[(\w+)\]`")
# defaults the reference describes in words instead of writing them out
PROSE_DEFAULTS = {"lm.prompts": "three Shakespeare prompts"}


def reference_rows(text: str) -> dict[str, dict[str, str]]:
    """{section: {key: its default cell}}; a row may name several keys (`a`, `b`) with one default each."""
    rows: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        if m := SECTION.match(line):
            section = m.group(1)
            rows[section] = {}
        elif line.startswith("#"):
            section = None
        elif section and line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            keys = re.findall(r"`(\w+)`", cells[0])
            values = split_defaults(cells[1], len(keys))
            rows[section].update(zip(keys, values))
    return rows


def split_defaults(cell: str, count: int) -> list[str]:
    """One default per key: `x`, `y` (or one `x` for all) when the row names several keys; the whole cell for
    one key (a list may be written as plain comma-separated names); a trailing '(generation: ...)' note is not
    the default."""
    cell = re.sub(r"\s*\(generation:.*\)$", "", cell)
    if count == 1:
        return [cell]
    parts = re.findall(r"`([^`]*)`", cell)
    if len(parts) == count:
        return [f"`{p}`" for p in parts]
    if len(parts) == 1 and cell == f"`{parts[0]}`":  # one default shared by every key of the row
        return [cell] * count
    pieces = [p.strip() for p in cell.split(", ")]  # a default in words beside literals
    assert len(pieces) == count, f"cannot split {cell!r} into {count} defaults"
    return pieces


def parse_default(cell: str):
    """A cell as a value: `literal` (TOML), or names separated by commas for a list."""
    if cell.startswith("`") and cell.endswith("`") and cell.count("`") == 2:
        literal = cell[1:-1]
        try:
            return tomllib.loads(f"x = {literal}")["x"]
        except tomllib.TOMLDecodeError:
            return literal
    if cell in ("[]", "`[]`"):
        return []
    return [int(p) if p.strip().isdigit() else p.strip() for p in cell.split(",")]


def same(documented, actual) -> bool:
    if isinstance(actual, (list, tuple)):
        return isinstance(documented, list) and list(documented) == list(actual)
    if isinstance(actual, float) and isinstance(documented, (int, float)) and not isinstance(documented, bool):
        return float(documented) == actual
    return documented == actual and type(documented) is type(actual)


SECTIONS = [f.name for f in dataclasses.fields(Config) if dataclasses.is_dataclass(f.default_factory)]
ROWS = reference_rows((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("section", SECTIONS)
def test_every_key_is_documented_with_its_default(section):
    assert section in ROWS, f"docs/configuration.md has no '## `[{section}]`' table"
    defaults = getattr(Config(), section)
    keys = {f.name for f in dataclasses.fields(defaults)}
    documented = ROWS[section]
    assert not keys - set(documented), f"[{section}] keys missing from docs/configuration.md"
    assert not set(documented) - keys, f"[{section}] rows in docs/configuration.md that are not keys"
    for key in sorted(keys):
        cell, actual = documented[key], getattr(defaults, key)
        if f"{section}.{key}" in PROSE_DEFAULTS:
            assert PROSE_DEFAULTS[f"{section}.{key}"] in cell
            continue
        assert same(parse_default(cell), actual), f"{section}.{key}: the reference says {cell}, the code {actual!r}"


def test_the_parser_reads_each_form_and_sees_a_wrong_default():
    rows = reference_rows("## `[demo]`\n\n| key | default | what |\n|---|---|---|\n"
                          "| `a`, `b` | `1`, `\"x\"` | two keys |\n| `f`, `g` | `0` | shared |\n"
                          "| `c` | host-cpu, mobile-cpu | list |\n"
                          "| `d` | `\"p\"` (generation: `\"q\"`) | per task |\n| `e` | `0.5` | float |\n")
    assert {k: parse_default(v) for k, v in rows["demo"].items()} == {
        "a": 1, "b": "x", "f": 0, "g": 0, "c": ["host-cpu", "mobile-cpu"], "d": "p", "e": 0.5}
    assert same(parse_default("`2`"), 2.0) and not same(parse_default("`3`"), 2)
    assert not same(parse_default("16, 32"), [16, 32, 64]) and not same(parse_default("`true`"), 1)


def test_adding_a_task_describes_every_field_of_task():
    """docs/adding-a-task.md's table of the Task interface names each of its fields: a new field fails here until
    the walk-through says what a task puts there."""
    from pipeline.task import Task

    text = (ROOT / "docs" / "adding-a-task.md").read_text()
    named = {n for line in text.splitlines() if line.startswith("| `")
             for n in re.findall(r"`(\w+)`", line.split(" | ")[0])}
    assert {f.name for f in dataclasses.fields(Task)} <= named, {f.name for f in dataclasses.fields(Task)} - named


def test_the_shell_metacharacter_row_quotes_what_the_config_prints():
    """The bad-input row for `SET='run.name=x;touch /tmp/f'` quotes the errors a reader gets, word for word."""
    from pipeline.config import load_config
    from pipeline.errors import PipelineError

    text = (ROOT / "docs" / "configuration.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `make ... SET='run.name=x;touch /tmp/f'`"))
    quoted = re.findall(r"`([^`]+)`", row.split(" | ")[1])
    printed = []
    for path, sets in ((ROOT / "configs/demo.toml", ["run.name=x;touch /tmp/f"]), ("configs/no such.toml", [])):
        with pytest.raises(PipelineError) as e:
            load_config(path, sets)
        printed.append(str(e.value))
    assert len(quoted) == 2 and all(q in p for q, p in zip(quoted, printed)), (quoted, printed)
