"""Reading the user's data files as text: the checks that turn a wrong file into one message with the fix.

- a folder, a compressed file or a workbook where a text file is expected: named as such; so are a Git LFS
  pointer (a clone without its large files) and a web page saved in place of the file;
- a UTF-8 byte-order mark (spreadsheet programs write one) is dropped, so the first column is not '\\ufefftext';
- bytes that are not UTF-8: data.encoding_errors = "strict" refuses at the first one; otherwise they are
  replaced (or dropped), warned about with counts per file and recorded (`undecodable` in split.json);
  a file mostly made of them (binary data, or text in another encoding) is refused either way.
"""
from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pipeline.config import DataSection
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)
# A file where more than this share of the bytes is not UTF-8 text (undecodable, or control characters such as
# NUL) is not a corpus: random bytes score ~0.6, text in Latin-1 with accented letters a few percent.
BINARY_SHARE = 0.25
_CONTROL = bytes([c for c in range(32) if chr(c) not in "\t\n\r\f\v"] + [0x7F])
_ESCAPED = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of an undecodable byte
_NEWLINE = re.compile(r"\r\n|\r|\n")


def text_lines(text: str) -> list[str]:
    """A file's lines, cut at \\n, \\r\\n or \\r only: str.splitlines also cuts at U+2028, U+2029, U+0085 and
    other separators, which JSON keeps raw inside a string, so a text holding one broke its JSON line in two (and
    shifted every line number after it)."""
    return _NEWLINE.split(text)


_MAGIC = {b"\x1f\x8b": ("gzip-compressed (.gz)", "decompress it first (gunzip FILE) and point data.*_path at the "
                                                    "result"),
          b"PK\x03\x04": ("a zip archive (an .xlsx workbook is one)", "extract it, or export the sheet as CSV"),
          b"PAR1": ("a Parquet file", "set data.source = \"parquet\"")}
# text that stands in for the data: the fix is to fetch the real file, not to read this one
_STAND_INS = ((re.compile(r"version https://git-lfs\.github\.com/spec/"), "a Git LFS pointer",
               "the repository was cloned or downloaded without its large files: run git lfs pull in it (after git "
               "lfs install), or download the file itself"),
              (re.compile(r"\s*<(!doctype html|html[\s>])", re.IGNORECASE), "a web page (HTML)",
               "the download saved the page that shows the file: download the raw file (on GitHub or the Hugging "
               "Face Hub, its raw / download link)"))
_UTF16_BOM = {b"\xff\xfe": "little-endian", b"\xfe\xff": "big-endian"}
_HANDLED = {"replace": "replaced by U+FFFD", "ignore": "dropped", "backslashreplace": "written as \\x escapes"}

_notes: list[dict] | None = None  # per-file decoding counts, collected while a data step reads its files


@contextmanager
def decoding_notes() -> Iterator[list[dict]]:
    """Collect {"file", "bytes", "undecodable_bytes", "lines_with_undecodable"} for every file read inside."""
    global _notes
    outer, _notes = _notes, []
    try:
        yield _notes
    finally:
        _notes = outer


def _utf16_hint(body: bytes) -> str:
    """UTF-16 without a byte-order mark has a NUL beside every ASCII character: name it, or the encoding to try."""
    head = body[:4000]
    if len(head) >= 4 and (head[1::2].count(0) > 0.4 * len(head) / 2 or head[0::2].count(0) > 0.4 * len(head) / 2):
        return "this one looks like UTF-16: iconv -f utf-16le -t utf-8 FILE"
    return "from Windows: -f cp1252"


def check_file(path: Path) -> None:
    """A missing path or a folder as one error naming the data.*_path settings."""
    if path.is_dir():
        raise PipelineError(f"data path {path} is a folder; give a file in data.train_path / data.validation_path / "
                            f"data.test_path (e.g. {path}/train.csv)")
    if not path.is_file():
        if path.exists():  # a named pipe, a device (/dev/null): reading it would block or give nothing
            raise PipelineError(f"data file {path} is not a regular file (a pipe or a device); give a file in "
                                f"data.*_path")
        # a relative path is read from the folder the command runs in, not the config file's: say where it looked
        where = "" if path.is_absolute() else f" (looked for at {Path.cwd() / path}: a relative path is read from " \
                                              f"the folder the command runs in)"
        raise PipelineError(f"data file {path}{where} does not exist; check the data.*_path settings")


def check_stand_in(path: Path, head: bytes, d: DataSection, what: str) -> None:
    """A Git LFS pointer or a saved web page in place of the data (head: the file's first bytes), as one error
    with the fix; read as data they failed later as a missing column, or trained as text."""
    start = head[:200].decode("utf-8", errors="replace")
    for pattern, kind, fix in _STAND_INS:
        if pattern.match(start):
            raise PipelineError(f"{path} is {kind}, not {what} (data.source = \"{d.source}\"): {fix}")


def read_text(path: Path, d: DataSection, what: str = "a text file") -> str:
    """The file's text (BOM dropped), undecodable bytes handled by data.encoding_errors and counted."""
    check_file(path)
    raw = path.read_bytes()
    for magic, (kind, fix) in _MAGIC.items():
        if raw.startswith(magic):
            raise PipelineError(f"{path} is {kind}, not {what} (data.source = \"{d.source}\"): {fix}")
    if raw[:2] in _UTF16_BOM:  # Excel's "Unicode Text" and Windows' "Unicode" save: UTF-16 with its byte-order mark
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError as e:
            raise PipelineError(f"{path} starts as UTF-16 ({_UTF16_BOM[raw[:2]]}) but byte {e.start} is not: save "
                                f"it as UTF-8 (e.g. iconv -f utf-16 -t utf-8 FILE)") from None
        log.info("%s is UTF-16 (%s): read as such", path, _UTF16_BOM[raw[:2]])
        return text
    body = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
    check_stand_in(path, body, d, what)
    # surrogateescape maps each undecodable byte to one lone surrogate: count them without a second pass
    escaped = body.decode("utf-8", errors="surrogateescape")
    bad = len(_ESCAPED.findall(escaped))
    control = len(body) - len(body.translate(None, _CONTROL))
    if body and (bad + control) / len(body) > BINARY_SHARE:
        raise PipelineError(f"{path}: {bad + control} of {len(body)} bytes ({(bad + control) / len(body):.0%}) are not "
                            f"UTF-8 text ({bad} undecodable, {control} control bytes): binary data, or text in another "
                            f"encoding. Give {what} saved as UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE; "
                            f"{_utf16_hint(body)})")
    if bad:
        lines = [n for n, line in enumerate(text_lines(escaped), 1) if _ESCAPED.search(line)]
        if d.encoding_errors == "strict":
            raise PipelineError(f"{path}: {bad} byte(s) on {len(lines)} line(s) are not UTF-8, e.g. line {lines[0]}. "
                                f"Save the file as UTF-8, or set data.encoding_errors = \"replace\" to replace them")
        log.warning("WARNING: %s: %d byte(s) on %d line(s) are not UTF-8 (e.g. line %d) and were %s "
                    "(data.encoding_errors = %r); recorded in split.json", path, bad, len(lines), lines[0],
                    _HANDLED.get(d.encoding_errors, "handled"), d.encoding_errors)
        if _notes is not None:
            _notes.append({"file": str(path), "bytes": len(body), "undecodable_bytes": bad,
                           "lines_with_undecodable": len(lines)})
    return body.decode("utf-8", errors=d.encoding_errors) if bad else escaped
