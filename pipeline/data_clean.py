"""What the data stage refuses to change silently: missing labels (empty, null, NaN, NA and the like),
non-string texts, one label written several ways, and texts shared between splits.

Each problem is either one PipelineError with counts and an example row, or a loud warning whose counts
are also recorded in split.json.
"""
from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

from pipeline.errors import PipelineError

# zero-width space / (non-)joiner, word joiner, BOM, soft hyphen: a text of them alone is no text
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_NO_INVISIBLE = str.maketrans("", "", INVISIBLE)

log = logging.getLogger(__name__)
SPLIT_ORDER = ("test", "validation", "train")  # a text in two splits stays in the earlier one


# Missing-value markers that tables and exports write for "no value" (R's write.csv: NA; Excel: #N/A; pandas:
# <NA>, nan; SQL: NULL). No one names a class so, so a label spelled like one is refused as missing rather than
# trained as a class. "None" is not among them: a "none" class (no intent, no emotion) is real data; its one
# accidental source is Python's str(None), spelled exactly "None", which stays a class with a warning.
MISSING_MARKERS = ("", "nan", "na", "n/a", "#n/a", "<na>", "null")


def _missing_kind(row: dict, label_col: str) -> str | None:
    """How a row's label is missing, for the error ("absent", "null", "NaN", "empty" or the marker), or None."""
    if label_col not in row:  # a JSON Lines row without the key
        return "absent"
    value = row[label_col]
    if value is None:
        return "null"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else None
    if not isinstance(value, str) or (marker := bare(value)).lower() not in MISSING_MARKERS:
        return None
    # "nan" is a float NaN written as text
    return "NaN" if marker.lower() == "nan" else repr(marker) if marker else "empty"


def bare(text: str) -> str:
    """Without surrounding space and zero-width characters, which no one sees in a label."""
    return text.translate(_NO_INVISIBLE).strip()


def label_text(value: Any) -> str:
    """A present label as its name; 1 and 1.0 stay different here and are merged by merge_label_variants. Zero-width
    characters (pasted from a web page) go with the surrounding space: 'positive\\u200b' was a class of its own
    beside 'positive', shown the same in every list."""
    return bare(str(value))


def text_value(value: Any) -> str | None:
    """The text of a row: "" for a missing one (the empty-text rule applies), None for a non-string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value if isinstance(value, str) else None


def check_rows(rows: list[dict], text_col: str, label_col: str, where: str) -> None:
    """One error with counts for rows without a label or with a text that is not a string."""
    missing = [(i + 1, kind) for i, r in enumerate(rows) if (kind := _missing_kind(r, label_col))]
    if missing:
        kinds = ", ".join(sorted({kind for _, kind in missing}))
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        shown = ", ".join(str(n) for n, _ in missing[:5]) + more
        marker = next((kind for _, kind in missing if kind.startswith("'")), None)
        rename = f"; if {marker} is a real class, rename it in the data (e.g. 'not_applicable')" if marker else ""
        raise PipelineError(f"{where}: {len(missing)} row(s) have no label in column '{label_col}' ({kinds}): "
                            f"row(s) {shown}. Fill in their labels or remove those rows{rename}")
    if nones := [i + 1 for i, r in enumerate(rows) if r[label_col] == "None"]:
        log.warning("WARNING: %s: %d label(s) in column '%s' are 'None' (e.g. row %d): kept as a class; if they are "
                    "missing labels written by str(None), fill them in or remove those rows", where, len(nones),
                    label_col, nones[0])
    # an Infinity in JSON became a class "inf"
    nested = [(i + 1, r[label_col]) for i, r in enumerate(rows) if not isinstance(r[label_col], (str, int, float))
              or (isinstance(r[label_col], float) and math.isinf(r[label_col]))]
    if nested:
        n, v = nested[0]
        raise PipelineError(f"{where}: {len(nested)} label(s) in column '{label_col}' are not a name or a number, "
                            f"e.g. row {n}: {v!r} ({type(v).__name__}). Give one label per row")
    odd = [(i + 1, r.get(text_col)) for i, r in enumerate(rows) if text_value(r.get(text_col)) is None]
    if odd:
        n, v = odd[0]
        raise PipelineError(f"{where}: {len(odd)} text(s) in column '{text_col}' are not strings, e.g. row {n}: "
                            f"{v!r} ({type(v).__name__}). Point data.text_column at the text column, or store "
                            f"the texts as strings")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_text_column(rows: list[dict], text_col: str, where: str) -> None:
    """A text column holding only numbers (an id, a score: data.text_column pointed at the wrong column) would
    train a classifier on digits; a JSON Lines number is refused as not a string, a CSV one was read as text."""
    texts = [t for r in rows if isinstance(t := r.get(text_col), str) and t.strip()]
    if len(texts) >= 8 and all(_number(t) for t in texts):
        raise PipelineError(f"{where}: every text in column '{text_col}' (data.text_column) is a number (e.g. "
                            f"{texts[0].strip()!r}): it looks like an id, a score or a label, not text. Point "
                            f"data.text_column at the column that holds the texts")


def check_label_column(rows: list[dict], text_col: str, label_col: str, where: str) -> None:
    """A label column that holds free text (the two columns swapped) would make every text its own class: refuse
    when it has more distinct values than half the rows, most of them several words long, and longer on average
    than what the text column holds (few-shot intents such as "book a flight" are wordy and distinct too, but
    their texts are longer still)."""
    values = [label_text(r[label_col]) for r in rows]
    distinct = set(values)
    if len(rows) < 8 or len(distinct) * 2 <= len(rows):
        return
    wordy = sum(1 for v in distinct if len(v.split()) > 2)
    if wordy * 2 <= len(distinct):
        return
    if sum(len(v.split()) for v in values) <= sum(len(str(r.get(text_col) or "").split()) for r in rows):
        return
    example = max(distinct, key=len)[:60]
    raise PipelineError(f"{where}: the label column '{label_col}' (data.label_column) has {len(distinct)} distinct "
                        f"values in {len(rows)} rows, most of them several words long (e.g. {example!r}): it looks like "
                        f"free text, not labels. Set data.label_column to the column of class names and "
                        f"data.text_column (now '{text_col}') to the text column")


def check_continuous_labels(labels: list[str], label_col: str) -> None:
    """Labels that are numbers, more than 20 distinct and most with a fraction (0.362, 3.75) are a continuous score
    (a regression data set), which was trained as that many classes of a few examples each. A 0-10 rating in
    halves (21 values, 10 with a fraction) stays classes."""
    distinct = sorted(set(labels), key=lambda v: float(v) if _number(v) else 0.0)
    if len(distinct) <= 20 or not all(_number(v) and math.isfinite(float(v)) for v in distinct):
        return
    fractional = [v for v in distinct if float(v) != int(float(v))]
    if len(fractional) * 2 <= len(distinct):
        return
    raise PipelineError(f"the labels in column '{label_col}' (data.label_column) are {len(distinct)} distinct numbers, "
                        f"most with a fraction (from {distinct[0]} to {distinct[-1]}, e.g. {fractional[0]}): a "
                        f"continuous score, not classes, and the pipeline trains classifiers. Bin the scores into "
                        f"classes in the data (e.g. 'low' below a threshold, 'high' above it), or point "
                        f"data.label_column at a column of classes")


def _variant_key(name: str) -> str:
    """What two spellings of one label share: case-folded, and numbers in one form (1, 1.0, 1e0 -> 1)."""
    try:
        number = float(name)
    except ValueError:
        return name.casefold()
    if math.isfinite(number) and number == int(number):
        return str(int(number))
    return repr(number) if math.isfinite(number) else name.casefold()


def merge_label_variants(splits: dict[str, list[dict]], mode: str) -> dict[str, dict[str, int]]:
    """Labels of every split that are one label spelled differently. mode merge: rename them (in place) to
    the most frequent spelling and return {kept spelling: {spelling: count}}; error: raise; keep: {}."""
    counts = Counter(ex["label"] for rows in splits.values() for ex in rows)
    groups: dict[str, list[str]] = {}
    for name in sorted(counts):
        groups.setdefault(_variant_key(name), []).append(name)
    variants = {key: names for key, names in groups.items() if len(names) > 1}
    if not variants or mode == "keep":
        return {}
    shown = "; ".join(" / ".join(f"{n!r} ({counts[n]})" for n in names) for names in variants.values())
    if mode == "error":
        raise PipelineError(f"the labels include one label spelled several ways: {shown}. Fix the labels, or set "
                            f"data.label_variants = \"merge\" (or \"keep\" if they are different classes)")
    merges, rename = {}, {}
    for names in variants.values():
        kept = max(names, key=lambda n: (counts[n], n == names[0]))  # most frequent; ties: first sorted
        merges[kept] = {n: counts[n] for n in names}
        rename.update({n: kept for n in names if n != kept})
    for rows in splits.values():
        for ex in rows:
            ex["label"] = rename.get(ex["label"], ex["label"])
    log.warning("WARNING: merged labels that differ only in case or number spelling: %s "
                "(data.label_variants = \"keep\" keeps them apart)", shown)
    return merges


def dedupe_across_splits(splits: dict[str, list[dict]], enabled: bool) -> dict[str, int]:
    """Drop (in place) every example whose text already is in an earlier split of SPLIT_ORDER; the test
    split keeps its size and the copies leave training. Returns the examples removed per split."""
    removed = {s: 0 for s in SPLIT_ORDER}
    if not enabled:
        return removed
    seen: set[str] = set()
    for s in SPLIT_ORDER:
        kept = [ex for ex in splits[s] if ex["text"] not in seen]
        removed[s] = len(splits[s]) - len(kept)
        splits[s] = kept
        seen |= {ex["text"] for ex in kept}
    if any(removed.values()):
        log.warning("WARNING: dropped texts already in another split (test > validation > train): %s",
                    ", ".join(f"{n} from {s}" for s, n in removed.items() if n))
    return removed


def shared_texts(splits: dict[str, list[dict]]) -> dict[str, int]:
    """Distinct texts that two of the written splits share (0 everywhere unless dedupe is off)."""
    texts = {s: {ex["text"] for ex in splits[s]} for s in SPLIT_ORDER}
    shared = {f"{a} & {b}": len(texts[a] & texts[b])
              for a, b in (("test", "train"), ("validation", "train"), ("test", "validation"))}
    if any(shared.values()):
        log.warning("WARNING: texts shared between splits (data.dedupe_across_splits = false): %s",
                    ", ".join(f"{n} in {pair}" for pair, n in shared.items() if n))
    return shared
