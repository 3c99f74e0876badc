"""Vocabulary restriction for the classification student and the RNN baselines.

The teacher's WordPiece table has 30,522 rows; a tweet corpus uses ~11k of them, and in a 4 x 128
student the full table is 3.9M of its 4.7M parameters. `training_vocab` keeps the ids the training
texts use (the most frequent ones when there are more than the cap) plus the tokenizer's special
tokens; every other id maps to one extra "other" row. It reuses the generation path's VocabMap
(distill/lm_student.py): student id i <-> teacher id teacher_ids[i], "other" = the last row.

The models keep taking the tokenizer's own ids: the teacher id -> row table lives inside the model
(distill/embeddings.py), so the exported graphs, the string-in model, the app samples and
verify-bundle all feed unmodified tokenizer output.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from distill.lm_student import VocabMap


def training_vocab(tokenizer, texts: Sequence[str], max_length: int, cap: int) -> tuple[VocabMap, dict]:
    """The ids `texts` use (as encoded for training), at most `cap` rows with "other". Returns the map and
    what it kept (for the stage summary)."""
    from distill.batching import encode

    ids, _ = encode(tokenizer, texts, max_length)
    counts = Counter(i for seq in ids for i in seq)
    special = sorted(set(tokenizer.all_special_ids))
    room = cap - 1 - len(special)  # one row is "other"
    # most frequent first; ties by id so the map is deterministic
    ranked = sorted((i for i in counts if i not in special), key=lambda i: (-counts[i], i))
    kept_ids = np.array(sorted(set(ranked[:room]) | set(special)), dtype=np.int64)
    vocab = len(tokenizer)
    vmap = VocabMap(kept_ids, vocab, has_other=len(kept_ids) < vocab)
    total = sum(counts.values())
    kept = set(kept_ids.tolist())
    covered = sum(c for i, c in counts.items() if i in kept)
    info = {"teacher_vocab": vocab, "rows": vmap.size, "training_ids_used": len(counts),
            "training_ids_dropped": max(0, len(ranked) - room),
            "training_token_coverage": covered / total if total else 1.0}
    return vmap, info


def row_table(vmap: VocabMap) -> np.ndarray:
    """(teacher_vocab,) int32 teacher id -> embedding row (CompactEmbedding stores it as int16 when it fits)."""
    return vmap.lookup().astype(np.int32)

