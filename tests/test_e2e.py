"""End to end: every stage of the real pipeline on a tiny config in a temporary run folder."""
from __future__ import annotations

import json

import pytest

from pipeline.manifest import read_manifest
from pipeline.stage import run

pytestmark = pytest.mark.e2e

CLASSIFY = ["data", "teacher", "logits", "distill", "baseline", "eval"]


def test_pipeline_end_to_end_then_incremental(tiny_cfg):
    ran = run(tiny_cfg, ["eval"])
    assert ran == CLASSIFY
    run_dir = tiny_cfg.run_dir
    rows = json.loads((run_dir / "eval" / "accuracy.json").read_text())
    assert [r["model"] for r in rows] == ["teacher", "student", "lstm", "lstm_distilled"]
    for r in rows:
        assert 0.0 <= r["accuracy"] <= 1.0 and 0.0 <= r["macro_f1"] <= 1.0
        assert r["params"] > 0 and r["size_bytes"] > 0
    # the synthetic labels are decided by keywords: a fine-tuned teacher must learn them
    assert rows[0]["accuracy"] >= 0.8
    for name in CLASSIFY:
        m = read_manifest(run_dir / name)
        assert m is not None and m["stage"] == name and m["outputs"]
    assert not list(run_dir.glob(".*.partial"))
    # nothing changed: nothing runs again
    assert run(tiny_cfg, ["eval"]) == []
