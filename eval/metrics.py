"""Classification metrics, written out so no extra dependency is needed."""
from __future__ import annotations

import numpy as np


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float((pred == gold).mean()) if len(gold) else float("nan")


def macro_f1(pred: np.ndarray, gold: np.ndarray, num_labels: int) -> float:
    """Mean over labels of F1; a label absent from both pred and gold scores 0 only if it is in gold."""
    f1s = []
    for c in range(num_labels):
        tp = int(((pred == c) & (gold == c)).sum())
        fp = int(((pred == c) & (gold != c)).sum())
        fn = int(((pred != c) & (gold == c)).sum())
        if tp + fp + fn == 0:
            continue
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s)) if f1s else float("nan")


def scores(logits: np.ndarray, gold: np.ndarray, num_labels: int) -> dict[str, float]:
    pred = logits.argmax(-1)
    return {"accuracy": accuracy(pred, gold), "macro_f1": macro_f1(pred, gold, num_labels)}
