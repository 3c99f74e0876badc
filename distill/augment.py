"""Data augmentation for distillation (Tang et al. 2019, "Distilling Task-Specific Knowledge from BERT
into Simple Neural Networks"): masking, word replacement and n-gram sampling. The teacher labels the
new texts, so they need no gold label.

Word replacement: Tang et al. swap a word for one with the same part-of-speech tag. A tagger is not
shipped here, so a word is swapped for one drawn from the training corpus by frequency; the teacher's
soft label still describes the changed text, which is what distillation needs.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Sequence

from pipeline.config import AugmentSection


class Augmenter:
    def __init__(self, corpus: Sequence[str], cfg: AugmentSection, mask_token: str, seed: int):
        self.cfg = cfg
        self.mask = mask_token
        self.rng = random.Random(seed)
        counts = Counter(w for text in corpus for w in text.split())
        self.words = list(counts)
        self.weights = list(counts.values())

    def one(self, text: str) -> str:
        c, rng = self.cfg, self.rng
        out = []
        for w in text.split():
            x = rng.random()
            if x < c.p_mask:
                out.append(self.mask)
            elif x < c.p_mask + c.p_replace and self.words:
                out.append(rng.choices(self.words, self.weights)[0])
            else:
                out.append(w)
        if len(out) > 2 and rng.random() < c.p_ngram:
            n = rng.randint(1, min(c.ngram_max, len(out) - 1))
            start = rng.randint(0, len(out) - n)
            out = out[start: start + n]
        return " ".join(out)

    def augment(self, texts: Sequence[str]) -> list[str]:
        """cfg.copies new texts per input text, none equal to an original or to each other."""
        seen = set(texts)
        new: list[str] = []
        for text in texts:
            for _ in range(self.cfg.copies):
                for _try in range(3):  # short texts often come back unchanged: retry a little
                    cand = self.one(text)
                    if cand and cand not in seen:
                        seen.add(cand)
                        new.append(cand)
                        break
        return new
