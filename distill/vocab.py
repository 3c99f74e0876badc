"""Vocabulary restriction for both tasks: student row i <-> teacher id teacher_ids[i], plus one "other" row
for every teacher token not kept. Why: the teacher's table is most of a small student (30,522 x 128 is 3.9M
of a 4 x 128 classifier's 4.7M parameters; SmolLM2's 49,152 rows would be 12.6M of a 256-wide decoder)
while the corpus uses a fraction of it (~11k tweet ids, ~17.7k Shakespeare ids).

- Classification (`training_vocab`): the most frequent training ids up to a cap, plus the special tokens.
  The teacher id -> row table lives inside the model (distill/embeddings.py), so every exported graph
  and client feeds unmodified tokenizer ids.
- Generation (`VocabMap.build`): every id of the training stream; the student speaks its own ids, and
  perplexity spreads "other"'s probability evenly over the tokens it stands for, so every model is
  scored on the same full-vocabulary events.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from pipeline.errors import PipelineError

VOCAB_FILE = "vocab_map.json"


@dataclass
class VocabMap:
    teacher_ids: np.ndarray  # (V_kept,) int64, sorted: student id i <-> teacher id teacher_ids[i]
    teacher_vocab: int
    has_other: bool  # True: student id V_kept is "other" (every teacher id not kept)

    @property
    def size(self) -> int:
        return len(self.teacher_ids) + int(self.has_other)

    @property
    def other_id(self) -> int | None:
        return len(self.teacher_ids) if self.has_other else None

    @property
    def n_unkept(self) -> int:
        return self.teacher_vocab - len(self.teacher_ids)

    def lookup(self) -> np.ndarray:
        """(teacher_vocab,) teacher id -> student id."""
        table = np.full(self.teacher_vocab, self.other_id if self.has_other else 0, dtype=np.int64)
        table[self.teacher_ids] = np.arange(len(self.teacher_ids))
        return table

    def to_student(self, ids):
        table = self.lookup()
        if isinstance(ids, torch.Tensor):
            return torch.from_numpy(table)[ids]
        return table[np.asarray(ids)]

    def to_teacher(self, ids) -> np.ndarray:
        """Student ids -> teacher ids; "other" has no single teacher token and maps to -1."""
        ids = np.asarray(ids, dtype=np.int64)  # an empty list would be float64, which cannot index
        out = np.full(ids.shape, -1, dtype=np.int64)
        kept = ids < len(self.teacher_ids)
        out[kept] = self.teacher_ids[ids[kept]]
        return out

    def rows_of(self, weight: torch.Tensor) -> torch.Tensor:
        """A teacher-vocabulary table (teacher_vocab, D) -> the student's (size, D): the kept rows, and for
        "other" the mean of the rows it stands for (how every restricted embedding starts)."""
        rows = weight[torch.from_numpy(self.teacher_ids)]
        if not self.has_other:
            return rows
        dropped = np.setdiff1d(np.arange(self.teacher_vocab), self.teacher_ids)
        return torch.cat([rows, weight[torch.from_numpy(dropped)].mean(0, keepdim=True)])

    def save(self, folder: Path) -> None:
        (folder / VOCAB_FILE).write_text(json.dumps({"teacher_vocab": self.teacher_vocab, "has_other": self.has_other,
                                                     "teacher_ids": self.teacher_ids.tolist()}))

    @classmethod
    def load(cls, folder: Path) -> "VocabMap":
        path = folder / VOCAB_FILE
        if not path.is_file():
            raise PipelineError(f"{folder} has no {VOCAB_FILE}: re-run the stage that wrote it")
        d = json.loads(path.read_text())
        return cls(np.asarray(d["teacher_ids"], dtype=np.int64), d["teacher_vocab"], d["has_other"])

    @classmethod
    def full(cls, vocab: int) -> "VocabMap":
        return cls(np.arange(vocab, dtype=np.int64), vocab, False)

    @classmethod
    def build(cls, train_stream: np.ndarray, teacher_vocab: int, restrict: bool, always: tuple[int, ...] = ()) -> "VocabMap":
        """Generation: every id of the training token stream plus `always` (restrict=False: all of them)."""
        if not restrict:
            return cls.full(teacher_vocab)
        kept = np.union1d(np.unique(train_stream), np.asarray(always, dtype=np.int64))
        return cls(kept.astype(np.int64), teacher_vocab, len(kept) < teacher_vocab)


def training_vocab(tokenizer, texts: Sequence[str], max_length: int, cap: int) -> tuple[VocabMap, dict]:
    """Classification: the ids `texts` use (as encoded for training), at most `cap` rows with "other".
    Returns the map and what it kept (for the stage summary)."""
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
