"""CSV rows with the checks csv.DictReader leaves out: the delimiter (data.delimiter, "auto" sniffs it), a
duplicate header column, a row with more fields than the header (an unquoted comma inside a text would
otherwise shift the fields and turn a piece of text into a label), a quote that never closes (the rest of the
file would be one text) or closes only at a stray quote lines later (the rows between would be one text), a
line above the header (Excel's "sep=;" hint, a title or a comment), the header repeated as a row (files joined
with their headers: it became a class named after the label column), and a file that is not CSV at all.
"""
from __future__ import annotations

import csv
import io
import itertools
import re
from collections import Counter
from pathlib import Path

from pipeline.errors import PipelineError

SNIFF_DELIMITERS = ",;\t|"
_EXCEL_SEP = re.compile(r'^"?sep=(.?)"?[,;\t|]*$')  # the line Excel reads (and some tools write) above the header


def _delimiter(text: str, setting: str, path: Path) -> str:
    if setting != "auto":
        return setting
    sample = "\n".join(text.splitlines()[:50])
    try:
        return csv.Sniffer().sniff(sample, delimiters=SNIFF_DELIMITERS).delimiter
    except csv.Error:
        raise PipelineError(f"{path}: data.delimiter = \"auto\" could not tell the delimiter from the first lines; set it "
                            f"explicitly, e.g. data.delimiter = \";\" (or \"\\t\" for tab-separated files)") from None


def _not_csv(header: list[str], text: str, path: Path, delimiter: str) -> None:
    """A JSONL file read as CSV, or a file separated by something other than data.delimiter."""
    first = text.lstrip()[:1]
    if first in ("{", "["):
        raise PipelineError(f"{path} looks like JSON (its first line starts with {first!r}), not CSV: set "
                            f"data.source = \"jsonl\" (one JSON object per line)")
    first_line = text.split("\n", 1)[0].strip("\r")
    if m := _EXCEL_SEP.match(first_line):
        sep = f" and set data.delimiter = {m[1]!r}" if m[1] and m[1] != delimiter else ""
        raise PipelineError(f"{path}: line 1 {first_line!r} is a hint for Excel, not the header naming the columns: "
                            f"delete that line{sep}")
    if len(header) == 1:
        for other in (d for d in SNIFF_DELIMITERS if d != delimiter):
            if other in header[0]:
                raise PipelineError(f"{path}: the header {header[0]!r} is one column when split at {delimiter!r}; the "
                                    f"file looks {other!r}-separated: set data.delimiter = {other!r} (or \"auto\")")


def read_rows(text: str, path: Path, delimiter: str) -> list[dict]:
    """Rows of a CSV text as dicts keyed by the header; one error per structural problem, with its row."""
    delim = _delimiter(text, delimiter, path)
    # the csv module refuses fields over 128 KiB by default; the file is already in memory, so a long document
    # in one field is no risk (the whole file is the limit, as for JSON Lines)
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delim)
        header = list(reader.fieldnames or [])
        _not_csv(header, text, path, delim)
        # unnamed columns (a spreadsheet's trailing empty cells, "t,y,,") are read by no setting: not duplicates
        dupes = [name for name, n in Counter(header).items() if n > 1 and name.strip()]
        if dupes:
            cols = ", ".join(f"'{name}' (columns {', '.join(str(i + 1) for i, h in enumerate(header) if h == name)})"
                             for name in dupes)
            raise PipelineError(f"{path}: the header names a column twice: {cols}; the later one would silently win. "
                                f"Rename or remove the duplicate")
        rows, before, last, lines = [], reader.line_num, reader.line_num, None
        for n, row in enumerate(reader, 1):
            before, last = last, reader.line_num  # the row runs from line before + 1 to line last
            if last - before > 1:  # a quoted field over several lines, or empty lines before the row
                lines = lines or io.StringIO(text, newline="").readlines()  # as the reader counts its line_num
                _stray_quote(lines[before:last], before, path, delim)
            extra = row.get(None)
            if extra is not None and len(header) == 1:  # the first line is not the header (a title, a comment)
                raise PipelineError(f"{path}: the header line {header[0][:60]!r} has 1 field, but row {n} (line "
                                    f"{reader.line_num}) has {1 + len(extra)}: is that line a title or a comment above "
                                    f"the header? Delete it, so the first line names the columns (else quote the "
                                    f"texts that hold a {delim!r})")
            if extra is not None:  # DictReader's restkey: fields past the header
                raise PipelineError(f"{path}: row {n} (line {reader.line_num}) has {len(header) + len(extra)} fields, "
                                    f"the header {len(header)}: a text with an unquoted {delim!r}? Quote that field "
                                    f"(\"like{delim} this\"), or check data.delimiter")
            if len(header) > 1 and [str(row[h] or "").lstrip("\ufeff") for h in header] == header:
                raise PipelineError(f"{path}: row {n} (line {reader.line_num}) repeats the header "
                                    f"({delim.join(header)}): files joined with their header lines (cat a.csv b.csv)? "
                                    f"Delete that line, or it becomes an example whose label is a column name")
            rows.append(row)
    except csv.Error as e:
        raise PipelineError(f"{path}: malformed CSV ({e})") from None
    if last > before:  # the last row (where a quote that never closes ends up)
        _unclosed_quote(text, before, last, path, delim)
    return rows


def _stray_quote(lines: list[str], before: int, path: Path, delimiter: str) -> None:
    """A row read over several lines that is not valid CSV read strictly: a text starting with a quote that never
    closes as a field should (he said "so) until a stray quote lines later, so every row between became part of
    one text without a word. A quoted field over several lines written right (a quote inside doubled) passes."""
    skipped = next((i for i, line in enumerate(lines) if line.strip("\r\n")), 0)  # empty lines the reader skips
    if len(lines) - skipped < 2:
        return
    try:
        for _ in csv.reader(io.StringIO("".join(lines[skipped:]), newline=""), delimiter=delimiter, strict=True):
            pass
    except csv.Error as e:
        if "end of data" in str(e):  # the last row: _unclosed_quote names it
            return
        start, end = before + skipped + 1, before + len(lines)
        raise PipelineError(f"{path}: the row on line {start} opens a quote that a stray quote on a later line "
                            f"closes, so lines {start}-{end} would be read as one field and the rows between them "
                            f"lost. Write a quote inside a text as two (\"\"), and put quotes around a text that "
                            f"starts with one (\"\"\"great\"\" movie\")") from None


def _unclosed_quote(text: str, before: int, end: int, path: Path, delimiter: str) -> None:
    """The csv module (not strict) reads an opening quote that is never closed as one field running to the end
    of the file: the rest of the file became one text, and the errors that followed (a row without a label, one
    huge text) named the wrong problem. The last row, read strictly, tells."""
    buf = io.StringIO(text, newline="")  # lines split as the reader counts its line_num
    for _ in itertools.islice(buf, before):
        pass
    lines = buf.readlines()  # the last row's (and empty lines before it)
    skipped = next((i for i, line in enumerate(lines) if line.strip("\r\n")), 0)  # empty lines the reader skips
    try:
        for _ in csv.reader(io.StringIO("".join(lines), newline=""), delimiter=delimiter, strict=True):
            pass
    except csv.Error as e:
        if "end of data" in str(e):  # EOF inside a quoted field
            start = before + skipped + 1
            span = f"lines {start}-{end} (the rest of the file) would be read" if end > start else "it is read"
            raise PipelineError(f"{path}: the row on line {start} opens a quote that is never closed, so {span} as "
                                f"one field. Close that quote, or write a quote inside a quoted text as two (\"\")") \
                from None
