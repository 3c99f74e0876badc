"""data.max_unlabeled through the real stages: the left-out training texts reach the distillation set with the
teacher's logits and no label, and the student trains on them."""
from __future__ import annotations

import json

import numpy as np

from pipeline.config import config_from_dict
from pipeline.data import read_split
from pipeline.stage import run


def test_unlabeled_texts_join_the_distillation_set(tiny_cfg_dict):
    d = dict(tiny_cfg_dict)
    d["data"] = {**d["data"], "max_train": 120, "max_unlabeled": 40}
    cfg = config_from_dict(d, "tiny-unlabeled")
    assert run(cfg, ["distill"]) == ["data", "teacher", "logits", "distill"]
    run_dir = cfg.run_dir
    unlabeled = [r["text"] for r in read_split(run_dir / "data", "unlabeled")]
    assert len(unlabeled) == 40 and not {"label"} & set(json.loads(
        (run_dir / "data" / "unlabeled.jsonl").read_text().splitlines()[0]))
    rows = read_split(run_dir / "logits", "distill_set")
    mine = [r for r in rows if r["origin"] == "unlabeled"]
    assert [r["text"] for r in mine] == unlabeled and all(r["label"] is None for r in mine)
    assert sum(r["origin"] == "train" for r in rows) == 120
    logits = np.load(run_dir / "logits" / "teacher_logits.npy")
    assert logits.shape[0] == len(rows) and np.isfinite(logits).all()
    summary = json.loads((run_dir / "logits" / "manifest.json").read_text())["summary"]
    assert summary["unlabeled_texts"] == 40
