"""The one padding rule for Core ML packages, shared by the export check, verify-bundle and the Swift sample.

A package exported with enumerated shapes accepts only the listed sequence lengths; one with a RangeDim
accepts 1..max_length. Both accept every length of allowed_lengths(), so the rule is the same for both:
pad the token ids on the right with the pad id up to the smallest allowed length that holds them, with
attention_mask 1 on the real tokens and 0 on the padding. Pure Python + numpy: verify-bundle imports it
on machines that have no torch or coremltools.
"""
from __future__ import annotations

import numpy as np

from pipeline.errors import PipelineError


def allowed_lengths(lengths: list[int], max_length: int) -> list[int]:
    """The sequence lengths a package is exported for: the configured ones up to max_length, plus
    max_length itself (so every tokenized text, which the tokenizer cuts at max_length, has a length)."""
    return sorted({int(n) for n in lengths if 1 <= int(n) <= max_length} | {int(max_length)})


def padded_length(n: int, allowed: list[int]) -> int:
    """The smallest allowed length >= n."""
    fits = [a for a in allowed if a >= n]
    if not fits:
        raise PipelineError(f"{n} token ids do not fit the Core ML package's lengths {allowed}: the tokenizer "
                            f"must cut texts at the largest one; rebuild the bundle with `make bundle`")
    return min(fits)


def pad(ids: list[int], allowed: list[int], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), int32, shape (1, T) with T = padded_length(len(ids), allowed)."""
    T = padded_length(len(ids), allowed)
    x = np.full((1, T), pad_id, dtype=np.int32)  # (1, T)
    mask = np.zeros((1, T), dtype=np.int32)  # (1, T)
    x[0, : len(ids)] = ids
    mask[0, : len(ids)] = 1
    return x, mask
