"""data.max_unlabeled through the real stages: the texts data.max_train leaves out reach the distillation set
with the teacher's logits and no label, and changing how many re-runs the logits stage, not the teacher."""
from __future__ import annotations

import json

import numpy as np

from pipeline.config import config_from_dict
from pipeline.data import read_split
from pipeline.stage import run


def _cfg(tiny_cfg_dict, n: int):
    d = dict(tiny_cfg_dict)
    d["data"] = {**d["data"], "max_train": 120, "max_unlabeled": n}
    return config_from_dict(d, "tiny-unlabeled")


def test_unlabeled_texts_join_the_distillation_set(tiny_cfg_dict):
    cfg = _cfg(tiny_cfg_dict, 40)
    assert run(cfg, ["distill"]) == ["data", "teacher", "logits", "distill"]
    run_dir = cfg.run_dir
    left_out = [r["text"] for r in read_split(run_dir / "data", "left_out")]
    assert len(left_out) > 40
    assert "label" not in json.loads((run_dir / "data" / "left_out.jsonl").read_text().splitlines()[0])
    rows = read_split(run_dir / "logits", "distill_set")
    mine = [r for r in rows if r["origin"] == "unlabeled"]
    assert [r["text"] for r in mine] == left_out[:40] and all(r["label"] is None for r in mine)
    assert sum(r["origin"] == "train" for r in rows) == 120
    logits = np.load(run_dir / "logits" / "teacher_logits.npy")
    assert logits.shape[0] == len(rows) and np.isfinite(logits).all()
    summary = json.loads((run_dir / "logits" / "manifest.json").read_text())["summary"]
    assert summary["unlabeled_texts"] == 40
    # another count: only the logits stage and what reads it run again (not the data stage or the teacher)
    assert run(_cfg(tiny_cfg_dict, 10), ["distill"]) == ["logits", "distill"]
    rows = read_split(run_dir / "logits", "distill_set")
    assert [r["text"] for r in rows if r["origin"] == "unlabeled"] == left_out[:10]
    # none: the distillation set is the labelled and augmented texts alone
    assert run(_cfg(tiny_cfg_dict, 0), ["logits"]) == ["logits"]
    assert not any(r["origin"] == "unlabeled" for r in read_split(run_dir / "logits", "distill_set"))


def test_max_unlabeled_without_a_cap_warns_that_nothing_is_left(tiny_cfg_dict, caplog):
    d = dict(tiny_cfg_dict)
    d["data"] = {**d["data"], "max_unlabeled": 5}
    cfg = config_from_dict(d, "tiny-uncapped")
    with caplog.at_level("WARNING"):
        run(cfg, ["logits"])
    assert "none is left to use unlabeled; lower data.max_train" in caplog.text
    assert not (cfg.run_dir / "data" / "left_out.jsonl").exists()
