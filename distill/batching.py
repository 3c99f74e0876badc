"""Tokenize once, then batch by length so each batch pads only to its own longest text.

Length bucketing roughly halves step time against padding every batch to the global maximum.
"""
from __future__ import annotations

import itertools
import math
import random
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from pipeline.errors import PipelineError


_tally: dict[str, dict] | None = None  # where -> {"texts", "truncated", "max_length"} while a stage counts


@contextmanager
def truncation_tally() -> Iterator[dict[str, dict]]:
    """Count the texts every encode() inside cuts, per `where`: a stage reports them once (log line and summary)."""
    global _tally
    outer, _tally = _tally, {}
    try:
        yield _tally
    finally:
        _tally = outer


def encode(tokenizer, texts: Sequence[str], max_length: int, on_too_long: str = "truncate",
           where: str = "data") -> tuple[list[list[int]], int]:
    """Token ids per text (with special tokens), cut to max_length. Returns (ids, number truncated)."""
    # verbose=False silences the library's "Token indices sequence length is longer than the specified maximum
    # sequence length ... will result in indexing errors": every text is cut below, the count is reported instead
    ids = tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    too_long = [i for i, seq in enumerate(ids) if len(seq) > max_length]
    if too_long and on_too_long == "error":
        i = too_long[0]
        raise PipelineError(f"{where}: {len(too_long)} text(s) are longer than max_length={max_length} tokens, "
                            f"e.g. #{i + 1} has {len(ids[i])} tokens ({texts[i][:60]!r}...). Raise teacher.max_length "
                            f"or set teacher.on_too_long = \"truncate\"")
    if _tally is not None:
        entry = _tally.setdefault(where, {"texts": 0, "truncated": 0, "max_length": max_length})
        entry["texts"] += len(ids)
        entry["truncated"] += len(too_long)
    if too_long:
        ids = [cut(seq, max_length) for seq in ids]
    return ids, len(too_long)


def cut(ids: Sequence[int], n: int) -> list[int]:
    """ids cut to n tokens, the final [SEP]/</s> kept so the model sees a well-formed sequence."""
    return list(ids) if len(ids) <= n else list(ids[: n - 1]) + list(ids[-1:])


def param_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence: (input_ids, attention_mask), each (B, T) int64."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    if device is not None and device.type != "cpu":
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask  # (B, T), (B, T)


def bucketed_batches(lengths: Sequence[int], batch_size: int, rng: random.Random | None) -> list[list[int]]:
    """Index batches of similar length. rng=None: deterministic, sorted (for inference)."""
    idx = list(range(len(lengths)))
    if rng is None:
        idx.sort(key=lambda i: lengths[i])
        return [idx[i: i + batch_size] for i in range(0, len(idx), batch_size)]
    rng.shuffle(idx)
    chunk = batch_size * 50  # sort within chunks: similar lengths per batch, still a random order overall
    batches = []
    for c in range(0, len(idx), chunk):
        part = sorted(idx[c: c + chunk], key=lambda i: lengths[i])
        batches += [part[i: i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def _passes(one_pass: Callable[[], Iterable], total: int) -> Iterator:
    """The first `total` batches of one_pass(), one_pass(), ... (each call one pass over the data); fewer when a
    pass is empty (no data: the trainer then reports that no step ran, instead of waiting forever for a batch)."""
    def stream() -> Iterator:
        while True:
            empty = True
            for batch in one_pass():
                empty = False
                yield batch
            if empty:
                return

    return itertools.islice(stream(), total)


def epoch_stream(n_items: int, lengths: Sequence[int], batch_size: int, epochs: float, seed: int) -> Iterator[list[int]]:
    """Batches for a fractional number of epochs: ceil(epochs * batches per epoch) steps in all."""
    rng = random.Random(seed)
    return _passes(lambda: bucketed_batches(lengths, batch_size, rng), steps_for(n_items, batch_size, epochs))


def steps_for(n_items: int, batch_size: int, epochs: float, steps: int = 0) -> int:
    """The training budget: `steps` when > 0 (fixed, whatever the corpus size), else epochs over n_items."""
    if steps > 0:
        return steps
    return max(1, math.ceil(epochs * math.ceil(n_items / batch_size)))


def window_batches(n: int, batch_size: int, epochs: float, seed: int, steps: int = 0) -> tuple[Iterator[np.ndarray], int]:
    """Shuffled index batches over n equal-length windows (generation: nothing to bucket): `steps` batches
    when > 0, else a fractional number of epochs; returns (iterator, total steps). Each pass is a fresh
    permutation of the same seeded stream, so a budget of k steps is the first k batches of any longer one."""
    total = steps_for(n, batch_size, epochs, steps)
    rng = np.random.default_rng(seed)

    def one_pass() -> list[np.ndarray]:
        order = rng.permutation(n)
        return [order[i: i + batch_size] for i in range(0, n, batch_size)]

    return _passes(one_pass, total), total
